"""The reproduction as a run to leave and come back to, and lockstep evaluation equal to sequential."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evoharness_bpe.exceptions import UserError


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory: pytest.TempPathFactory):
    """A tiny run stopped by Ctrl-C in GRPO training, then resumed."""
    from evoharness_bpe_training import reproduce as module

    out = tmp_path_factory.mktemp("resumable")
    config = module.load_reproduce_preset("tiny", out=str(out))
    real = module.train_grpo

    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    module.train_grpo = interrupt
    first: list[str] = []
    try:
        with pytest.raises(KeyboardInterrupt):
            module.reproduce(config, log=first.append)
    finally:
        module.train_grpo = real
    kept = {p.name: p.stat().st_mtime_ns for p in (out / "stages").glob("*.json")}
    second: list[str] = []
    summary = module.reproduce(module.resume_config(out), log=second.append, resume=True)
    return out, kept, first, second, summary


@pytest.mark.slow
def test_resume_continues_at_the_first_unfinished_stage(interrupted) -> None:
    out, kept, first, second, summary = interrupted
    assert set(kept) == {"expert.json", "raw.json", "sft-train.json", "sft.json", "grpo-states.json"}
    for name, mtime in kept.items():  # finished stages are read back, not run again
        assert (out / "stages" / name).stat().st_mtime_ns == mtime
        assert any(line.startswith(f"{name[:-5]}: finished earlier") for line in second)
    assert not any("finished earlier" in line for line in first)
    assert [r["stage"] for r in summary["results"]] == ["raw", "sft", "grpo"]
    assert set(summary["stage_wall_s"]) == {"expert", "raw", "sft-train", "sft", "grpo-states", "grpo-train", "grpo"}
    assert (out / "grpo" / "model").is_dir() and (out / "report.md").exists()
    assert json.loads((out / "stages" / "grpo.json").read_text())["result"]["stage"] == "grpo"


@pytest.mark.slow
def test_resume_refuses_another_config_and_an_empty_folder(interrupted, tmp_path: Path) -> None:
    from evoharness_bpe_training.reproduce import reproduce
    from evoharness_bpe_training.reproduce_config import load_reproduce_preset, resume_config

    out = interrupted[0]
    with pytest.raises(UserError, match=r"another config \(grpo_steps: 1 → 3"):
        reproduce(resume_config(out, grpo_steps=3), resume=True)
    with pytest.raises(UserError, match="nothing to resume"):
        resume_config(tmp_path / "empty")
    with pytest.raises(UserError, match="already holds a run"):
        reproduce(load_reproduce_preset("tiny", out=str(out)))


@pytest.mark.slow
def test_lockstep_evaluation_equals_one_episode_after_another(interrupted, tmp_path: Path) -> None:
    """The SFT policy of the run, on held-out seeds: batched rounds give the sequential traces."""
    from evoharness_bpe_training import reproduce as module
    from evoharness_bpe_training.speed import inference_copy

    out = interrupted[0]
    config = module.resume_config(out, eval_episodes=3, max_steps=6, precision="fp32")
    model, tokenizer = module._base_model(config, out, None)
    model = module._load_trained(model, out / "sft" / "model")
    policy = module.policy_for(inference_copy(model, "fp32"), tokenizer, config)
    seeds = {1: [10_000, 10_001, 10_002], 2: [10_000]}
    batched = [0]
    original = policy.complete_batch

    def counting(requests):
        batched[0] = max(batched[0], len(requests))
        return original(requests)

    policy.complete_batch = counting
    together = module.play_seeds(policy, config, seeds, tmp_path / "lockstep.jsonl")
    assert batched[0] == 4  # every episode in one generation
    alone = module.play_seeds(policy, module.resume_config(out, lockstep=False, eval_episodes=3, max_steps=6, precision="fp32"),
                         seeds, tmp_path / "sequential.jsonl")

    def strip(value):  # call ids are numbered across a policy's calls, so they follow the order of play
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in ("id", "tool_call_id")}
        return [strip(v) for v in value] if isinstance(value, list) else value

    def view(trace):
        calls = [(strip(c.messages), strip(c.response)) for c in trace.model_calls]
        return calls, trace.outcome.success, trace.metadata.get("prompt_tokens")

    assert [view(t) for t in together] == [view(t) for t in alone]
    assert sum(len(t.model_calls) for t in together) > 4


def test_reproduce_help_shows_the_cpu_presets_values_and_no_none() -> None:
    import subprocess
    import sys

    text = subprocess.run([sys.executable, "-m", "evoharness_bpe.lab.cli", "reproduce", "--help"], capture_output=True,
                          text=True, check=True).stdout
    assert "None" not in text and "(cpu: smollm2-135m)" in text and "--resume OUT" in text
    assert " ".join(text.split()).count("(cpu: 10)") >= 2  # eval episodes and LoRA layers


def test_shared_stages_end_before_the_first_stage_a_changed_setting_touches() -> None:
    from dataclasses import asdict

    from evoharness_bpe_training.reproduce_config import ReproduceConfig, STAGES, shared_stages

    saved = asdict(ReproduceConfig())
    assert shared_stages(saved, dict(saved)) == list(STAGES)
    assert shared_stages(saved, {**saved, "lam": 0.1}) == ["expert", "raw", "sft-train", "sft", "grpo-states"]
    assert shared_stages(saved, {**saved, "charge_on_success_only": True}) == ["expert", "raw", "sft-train", "sft", "grpo-states"]
    assert shared_stages(saved, {**saved, "grpo_skip_pull_only": True}) == ["expert", "raw", "sft-train", "sft", "grpo-states"]
    assert shared_stages(saved, {**saved, "grpo_scale_rewards": "batch"}) == ["expert", "raw", "sft-train", "sft", "grpo-states"]
    assert shared_stages(saved, {**saved, "grpo_skip_uniform_groups": True}) == ["expert", "raw", "sft-train", "sft", "grpo-states"]
    assert shared_stages(saved, {**saved, "lam": 0.1, "grpo_states": "consulting"}) == ["expert", "raw", "sft-train", "sft"]
    assert shared_stages(saved, {**saved, "grpo_closing_states": True}) == ["expert", "raw", "sft-train", "sft"]
    assert shared_stages(saved, {**saved, "grpo_eval_difficulties": "2"})[-1] == "grpo-train"
    assert shared_stages(saved, {**saved, "out": "elsewhere", "threads": 1}) == ["expert"]
    assert shared_stages(saved, {**saved, "sft_epochs": 9.0}) == []  # a setting not listed changes every stage
    # more held-out seeds re-evaluate every stage's model and retrain nothing
    assert shared_stages(saved, {**saved, "eval_episodes": 20}) == ["expert", "sft-train", "grpo-states", "grpo-train"]
    assert shared_stages(saved, {**saved, "eval_episodes": 20, "lam": 0.1}) == ["expert", "sft-train", "grpo-states"]
    older = {k: v for k, v in saved.items() if k != "expert_skip_rate"}  # a run made before the setting existed
    assert shared_stages(older, saved) == list(STAGES)
    assert shared_stages(older, {**saved, "expert_skip_rate": 0.3}) == []


def test_grpo_reward_takes_the_runs_prices_budget_and_skip_handling(tmp_path: Path) -> None:
    from evoharness_bpe_training.continuation import ContinuationReward
    from evoharness_bpe_training.reproduce_config import load_reproduce_preset
    from evoharness_bpe_training.reproduce_training import continuation_reward

    config = load_reproduce_preset("tiny", out=str(tmp_path), lam=0.2, mu=0.001, invalid_penalty=0.3, charge_on_success_only=True,
                                   grpo_continuation_calls=7, grpo_skip_pull_only=True, grpo_skip_uniform_groups=True, lockstep=False)
    reward = continuation_reward(config)
    assert isinstance(reward, ContinuationReward) and reward.scorer is None
    assert (reward.weights.lam, reward.weights.mu, reward.weights.invalid_penalty) == (0.2, 0.001, 0.3)
    assert reward.weights.charge_on_success_only and reward.skips_pull_only and reward.skip_uniform_groups and not reward.lockstep
    assert reward.continuation_calls == 7 and reward.config == config.episode_config()
    default = continuation_reward(load_reproduce_preset("tiny", out=str(tmp_path), reward="reference", grpo_continuation_calls=0))
    assert not default.skips_pull_only and not default.skip_uniform_groups and default.scorer is not None and default.continuation_calls is None


def test_grpo_arguments_take_the_runs_sampling_and_advantage_scaling(tmp_path: Path) -> None:
    from evoharness_bpe_training.reproduce_config import load_reproduce_preset
    from evoharness_bpe_training.reproduce_training import grpo_arguments
    from evoharness_bpe_training.student import student_chat_template
    from evoharness_bpe_training.tiny import build_tiny_tokenizer

    tokenizer = build_tiny_tokenizer(512, chat_template=student_chat_template())
    config = load_reproduce_preset("tiny", out=str(tmp_path), grpo_scale_rewards="batch", grpo_temperature=1.3,
                                   grpo_generations=3, grpo_states_per_step=2)
    args = grpo_arguments(config, tmp_path, "fp32", tokenizer)
    assert (args.scale_rewards, args.temperature, args.num_generations, args.per_device_train_batch_size) == ("batch", 1.3, 3, 6)
    assert grpo_arguments(load_reproduce_preset("tiny", out=str(tmp_path)), tmp_path, "fp32", tokenizer).scale_rewards == "group"
    with pytest.raises(UserError, match="group or batch or none"):
        load_reproduce_preset("tiny", out=str(tmp_path), grpo_scale_rewards="std")


def test_grpo_seed_reseeds_grpo_alone(tmp_path: Path) -> None:
    from dataclasses import asdict

    from evoharness_bpe_training.reproduce_config import load_reproduce_preset, shared_stages
    from evoharness_bpe_training.reproduce_training import grpo_arguments
    from evoharness_bpe_training.student import student_chat_template
    from evoharness_bpe_training.tiny import build_tiny_tokenizer

    tokenizer = build_tiny_tokenizer(512, chat_template=student_chat_template())
    run = load_reproduce_preset("tiny", out=str(tmp_path), seed=3)
    reseeded = load_reproduce_preset("tiny", out=str(tmp_path), seed=3, grpo_seed=7)
    assert grpo_arguments(run, tmp_path, "fp32", tokenizer).seed == 3  # -1: the run's seed
    assert grpo_arguments(reseeded, tmp_path, "fp32", tokenizer).seed == 7
    assert shared_stages(asdict(run), asdict(reseeded)) == ["expert", "raw", "sft-train", "sft", "grpo-states"]
    saved = {k: v for k, v in asdict(run).items() if k != "grpo_seed"}  # a run made before the setting existed
    assert "grpo-train" in shared_stages(saved, asdict(run)) and "grpo-train" not in shared_stages(saved, asdict(reseeded))
    with pytest.raises(UserError, match="grpo-seed"):
        load_reproduce_preset("tiny", out=str(tmp_path), grpo_seed=-2)


@pytest.mark.slow
def test_a_fork_reuses_the_stages_its_changes_leave_alone(interrupted, tmp_path: Path) -> None:
    from dataclasses import replace

    from evoharness_bpe_training.reproduce import reproduce

    from evoharness_bpe_training.reproduce_config import resume_config

    source = interrupted[0]
    config = replace(resume_config(source), out=str(tmp_path / "fork"), lam=0.2, grpo_continuation_calls=3)
    lines: list[str] = []
    summary = reproduce(config, log=lines.append, fork=source)
    fork = tmp_path / "fork"
    assert lines[0] == f"fork: expert, raw, sft-train, sft, grpo-states taken from {source}"
    for stage in ("expert", "raw", "sft-train", "sft", "grpo-states"):
        assert json.loads((fork / "stages" / f"{stage}.json").read_text())["copied_from"] == str(source)
    assert "copied_from" not in json.loads((fork / "stages" / "grpo-train.json").read_text())
    sft = "sft/model/model.safetensors"
    assert (fork / sft).read_bytes() == (source / sft).read_bytes()  # the SFT it starts from is the source's
    assert json.loads((fork / "config.json").read_text())["lam"] == 0.2
    assert [r["stage"] for r in summary["results"]] == ["raw", "sft", "grpo"]
    with pytest.raises(UserError, match="pass one of them"):
        reproduce(config, fork=source, resume=True)


@pytest.mark.slow
def test_no_trainer_outlives_its_stage(interrupted, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The GRPO evaluation starts with the GRPO trainer (its optimizer, rollouts and reward) freed."""
    import gc
    from dataclasses import replace

    from transformers import Trainer

    from evoharness_bpe_training import reproduce as module

    alive: dict[str, int] = {}
    real = module.evaluate_stage

    def evaluate(stage, *args, **kwargs):
        alive[stage] = sum(isinstance(o, Trainer) for o in gc.get_objects())
        return real(stage, *args, **kwargs)

    monkeypatch.setattr(module, "evaluate_stage", evaluate)
    config = replace(module.resume_config(interrupted[0]), out=str(tmp_path / "fork"), lam=0.3)
    module.reproduce(config, log=lambda line: None, fork=interrupted[0])
    assert alive == {"grpo": 0}


@pytest.mark.slow
def test_a_fork_with_more_held_out_seeds_evaluates_the_sources_models_again(interrupted, tmp_path: Path) -> None:
    from dataclasses import replace

    from evoharness_bpe import read_traces
    from evoharness_bpe_training.reproduce import reproduce
    from evoharness_bpe_training.reproduce_config import resume_config

    source = interrupted[0]
    config = replace(resume_config(source), out=str(tmp_path / "wider"), eval_episodes=resume_config(source).eval_episodes + 1)
    lines: list[str] = []
    summary = reproduce(config, log=lines.append, fork=source)
    wider = tmp_path / "wider"
    assert lines[0] == f"fork: expert, sft-train, grpo-states, grpo-train taken from {source}"
    for result in summary["results"]:
        stage = result["stage"]
        assert "copied_from" not in json.loads((wider / "stages" / f"{stage}.json").read_text())
        assert {level["episodes"] for level in result["levels"].values()} == {config.eval_episodes}
        assert len(list(read_traces(wider / f"eval-{stage}.jsonl"))) == config.eval_episodes * len(result["levels"])
    grpo = "grpo/model/model.safetensors"
    assert (wider / grpo).read_bytes() == (source / grpo).read_bytes()  # evaluated, not trained again
    assert [r["stage"] for r in summary["results"]] == ["raw", "sft", "grpo"]


@pytest.mark.slow
def test_a_run_saved_before_a_setting_existed_resumes_with_its_default(interrupted, tmp_path: Path) -> None:
    import shutil

    from evoharness_bpe_training.reproduce import reproduce

    from evoharness_bpe_training.reproduce_config import resume_config

    out = tmp_path / "older"
    shutil.copytree(interrupted[0], out)
    saved = json.loads((out / "config.json").read_text())
    del saved["grpo_continuation_calls"]
    (out / "config.json").write_text(json.dumps(saved))
    lines: list[str] = []
    reproduce(resume_config(out), log=lines.append, resume=True)
    assert any(line.startswith("grpo: finished earlier") for line in lines)


@pytest.mark.parametrize(("flags", "message"), [
    (["--fork", "{tmp}/nowhere", "--out", "{tmp}/new"], "no run there"),
    (["--fork", "{tmp}/nowhere"], "give it its own --out"),
    (["--fork", "{tmp}/a", "--resume", "{tmp}/b"], "pass one of them"),
])
def test_fork_mistakes_are_clear_errors(tmp_path: Path, flags: list[str], message: str) -> None:
    import subprocess
    import sys

    argv = [flag.format(tmp=tmp_path) for flag in flags]
    done = subprocess.run([sys.executable, "-m", "evoharness_bpe.lab.cli", "reproduce", *argv], capture_output=True, text=True)
    assert done.returncode != 0 and message in done.stderr + done.stdout
    assert "Traceback" not in done.stderr and not (tmp_path / "new").exists()


def test_a_stage_run_again_starts_without_what_its_interrupted_try_left(tmp_path: Path) -> None:
    from evoharness_bpe_training.stages import StageFolder

    outputs = {"train": ("train", "log.jsonl"), "eval": ("eval.jsonl",)}
    folder = StageFolder.open(tmp_path, {"x": 1}, outputs=outputs)
    (tmp_path / "eval.jsonl").write_text("kept\n")

    def interrupted() -> dict:
        (tmp_path / "train").mkdir()
        (tmp_path / "train" / "metrics.jsonl").write_text('{"step": 1}\n')
        with (tmp_path / "log.jsonl").open("a") as fh:
            fh.write("half")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        folder.run("train", interrupted, lambda line: None)

    def again() -> dict:
        assert not (tmp_path / "train").exists() and not (tmp_path / "log.jsonl").exists()
        (tmp_path / "log.jsonl").write_text("whole\n")
        return {"ok": True}

    resumed = StageFolder.open(tmp_path, {"x": 1}, resume=True, outputs=outputs)
    assert resumed.run("train", again, lambda line: None) == {"ok": True}
    assert (tmp_path / "log.jsonl").read_text() == "whole\n"
    assert (tmp_path / "eval.jsonl").read_text() == "kept\n"  # another stage's output stays
    assert resumed.run("train", interrupted, lambda line: None) == {"ok": True}  # finished: read back, not run


def test_decoupled_aggregation_reaches_trls_config_and_is_checked(tmp_path: Path) -> None:
    from evoharness_bpe_training.reproduce_config import load_reproduce_preset, shared_stages
    from evoharness_bpe_training.reproduce_training import grpo_arguments
    from evoharness_bpe_training.tiny import build_tiny_tokenizer

    tokenizer = build_tiny_tokenizer(512)
    config = load_reproduce_preset("tiny", out=str(tmp_path), grpo_aggregation="decoupled", grpo_cost_weight=0.5)
    args = grpo_arguments(config, tmp_path, "fp32", tokenizer)
    assert (args.multi_objective_aggregation, args.reward_weights) == ("normalize_then_sum", [1.0, 0.5])
    assert grpo_arguments(load_reproduce_preset("tiny", out=str(tmp_path)), tmp_path, "fp32", tokenizer).multi_objective_aggregation == \
        "sum_then_normalize"
    with pytest.raises(UserError, match="use --reward cost"):
        load_reproduce_preset("tiny", out=str(tmp_path), grpo_aggregation="decoupled", reward="reference")
    with pytest.raises(UserError, match="leave one of them out"):
        load_reproduce_preset("tiny", out=str(tmp_path), grpo_aggregation="decoupled", grpo_skip_uniform_groups=True)
    with pytest.raises(UserError, match="--grpo-cost-weight must be above 0"):
        load_reproduce_preset("tiny", out=str(tmp_path), grpo_aggregation="decoupled", grpo_cost_weight=0)
    with pytest.raises(UserError, match="sum or decoupled"):
        load_reproduce_preset("tiny", out=str(tmp_path), grpo_aggregation="gdpo")
    assert "grpo-states" in shared_stages({"grpo_aggregation": "sum"}, {"grpo_aggregation": "decoupled"})
    assert "grpo-train" not in shared_stages({"grpo_aggregation": "sum"}, {"grpo_aggregation": "decoupled"})


@pytest.mark.slow
def test_raw_stage_alone_trains_nothing(tmp_path: Path) -> None:
    """``--stages raw`` evaluates the untrained policy and stops: no SFT training, no GRPO, a report."""
    from evoharness_bpe_training import reproduce as module

    lines: list[str] = []
    summary = module.reproduce(module.load_reproduce_preset("tiny", out=str(tmp_path), stages="raw"), log=lines.append)
    assert [r["stage"] for r in summary["results"]] == ["raw"]
    assert set(summary["stage_wall_s"]) == {"expert", "raw"}
    assert not (tmp_path / "sft").exists() and not (tmp_path / "grpo").exists()
    assert not any(line.startswith(("sft", "[sft-train]")) for line in lines)
    assert (tmp_path / "report.md").exists() and (tmp_path / "eval-raw.jsonl").exists()


@pytest.mark.slow
def test_a_stop_in_sft_training_resumes_from_its_last_save(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C in ``sft-train`` after a save: ``--resume`` trains on from the save, logs each step once and
    leaves no saves behind once the stage has finished."""
    from transformers import TrainerCallback

    from evoharness_bpe_training import reproduce as module
    from evoharness_bpe_training import reproduce_training

    class StopAtStep3(TrainerCallback):
        def on_log(self, args, state, control, **kwargs):  # noqa: ANN001 - transformers' signature
            if state.global_step == 3:
                raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(reproduce_training, "step_progress", lambda stage, log: StopAtStep3())
        with pytest.raises(KeyboardInterrupt):
            module.reproduce(module.load_reproduce_preset("tiny", out=str(tmp_path), stages="sft", sft_checkpoint_steps=2),
                             log=lambda line: None)
    assert not (tmp_path / "stages" / "sft-train.json").exists()
    assert (tmp_path / "sft-checkpoints" / "checkpoint-2" / "trainer_state.json").exists()

    lines: list[str] = []
    module.reproduce(module.resume_config(tmp_path), log=lines.append, resume=True)
    assert "sft-train: resuming from its save at step 2" in lines
    progress = [line for line in lines if line.startswith("[sft-train] ")]
    assert progress and progress[0].startswith("[sft-train] 3/")  # counted on from the save
    steps = [json.loads(line)["step"] for line in (tmp_path / "sft" / "metrics.jsonl").read_text("utf-8").splitlines()
             if "loss" in json.loads(line)]
    assert steps == list(range(1, steps[-1] + 1)) and steps[-1] > 3
    assert (tmp_path / "stages" / "sft-train.json").exists() and not (tmp_path / "sft-checkpoints").exists()


@pytest.mark.slow
@pytest.mark.parametrize("select_every", [1, 0])
def test_a_stop_in_grpo_training_resumes_from_its_last_save_and_ends_as_an_unstopped_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, select_every: int) -> None:
    """Ctrl-C in ``grpo-train`` after the save of update 1, once update 2 was scored (and validated):
    ``--resume`` goes on from update 1 with its rewards (validations and best weights), and the stage
    ends with the logs and weights of the same GRPO never stopped (a fork of the same stages)."""
    from dataclasses import replace

    from safetensors.torch import load_file
    from transformers import TrainerCallback

    from evoharness_bpe_training import continuation, reproduce_training
    from evoharness_bpe_training import reproduce as module

    # the tiny policy fails every episode alike, so its groups would carry no advantage: score by the moves made
    monkeypatch.setattr(continuation.ContinuationReward, "episode_score",
                        lambda self, trace, step=0: (len(json.dumps(trace.messages, default=str)) % 11) / 10)

    class StopAtUpdate2(TrainerCallback):
        def on_log(self, args, state, control, **kwargs):  # noqa: ANN001 - transformers' signature
            if state.global_step == 2:  # update 2 scored and validated, its save not yet written
                raise KeyboardInterrupt

    stopped, whole = tmp_path / "stopped", tmp_path / "whole"
    settings = {"stages": "grpo", "grpo_steps": 2, "grpo_select_every": select_every, "grpo_checkpoint_steps": 1, "grpo_temperature": 1.5}
    real = reproduce_training.step_progress
    with monkeypatch.context() as patch:
        patch.setattr(reproduce_training, "step_progress",
                      lambda stage, log: StopAtUpdate2() if stage == "grpo-train" else real(stage, log))
        with pytest.raises(KeyboardInterrupt):
            module.reproduce(module.load_reproduce_preset("tiny", out=str(stopped), **settings), log=lambda line: None)
    assert [json.loads(line)["step"] for line in (stopped / "grpo" / "rewards.jsonl").read_text("utf-8").splitlines()][-1] == 1
    assert (stopped / "grpo-checkpoints" / "checkpoint-1" / "files" / "saved.json").exists()
    module.reproduce(replace(module.resume_config(stopped), out=str(whole)), log=lambda line: None, fork=stopped)

    lines: list[str] = []
    module.reproduce(module.resume_config(stopped), log=lines.append, resume=True)
    assert "grpo-train: resuming from its save at update 1" in lines
    assert [line for line in lines if line.startswith("[grpo-train] ")][0].startswith("[grpo-train] 2/2 steps")  # update 2 alone
    assert any(line.startswith("[select] resumed with 2 validations") for line in lines) == bool(select_every)
    assert not (stopped / "grpo-checkpoints").exists() and (stopped / "stages" / "grpo-train.json").exists()
    assert not (stopped / "grpo" / "selection-best.safetensors").exists()  # kept for a resume only; grpo/model holds them

    def logs(run: Path, name: str) -> list[dict]:
        return [json.loads(line) for line in (run / "grpo" / name).read_text("utf-8").splitlines()]

    for name, value in [("rewards.jsonl", "reward")] + ([("selection.jsonl", "score")] if select_every else []):
        assert [(r["step"], r[value]) for r in logs(stopped, name)] == [(r["step"], r[value]) for r in logs(whole, name)]
    assert len({r["reward"] for r in logs(whole, "rewards.jsonl")}) > 1  # groups with an advantage: GRPO moved the weights
    weights = {run: load_file(str(run / "grpo" / "model" / "model.safetensors")) for run in (whole, stopped)}
    sft = load_file(str(whole / "sft" / "model" / "model.safetensors"))
    moved = max((weights[whole][k] - sft[k]).abs().max().item() for k in sft) > 0
    if select_every:  # validations at updates 0, 1 and 2, the best weights put back at the end
        assert sorted(p.name for p in (stopped / "grpo" / "validation").iterdir()) == ["update-0.jsonl", "update-1.jsonl", "update-2.jsonl"]
        assert moved == (logs(whole, "selection.jsonl")[-1]["best_step"] > 0)
    else:
        assert moved  # two updates changed the weights: the comparison below checks the resumed optimizer
    assert max((weights[whole][k] - weights[stopped][k]).abs().max().item() for k in sft) < 1e-6
