"""The miniature reproduction: a policy raw, after harness fine-tuning, after cost-aware GRPO.

    evoharness reproduce --out runs/miniature                # the CPU preset: SmolLM2-135M, LoRA, bf16 (2 cores)
    evoharness reproduce --resume runs/miniature             # continue it at its first unfinished stage
    evoharness reproduce --fork runs/miniature --lam 0.1 --out runs/lam01  # a GRPO ablation on the same SFT
    evoharness reproduce --preset tiny --out runs/smoke      # a smoke test of the pipeline (about a minute)
    evoharness reproduce --preset smollm2-gpu --out runs/gpu # SmolLM2-135M full fine-tune on one GPU
    evoharness reproduce --model student --lora-r 0 ...      # the from-scratch student of earlier rounds

Every stage plays the same held-out seeds of `crm-migration` under the ``bpe`` harness through
the core loop, with the prompts inference always sees (the dashboard, a recent window, the
compact tool specs); training never sees those seeds. The stages (`STAGES`), each leaving its
outputs and a marker in the run folder so that ``--resume`` continues where a run stopped (a
stage that plays episodes keeps those that ended before the stop, `StageFolder.scratch`):

1. ``expert`` — the scripted expert's episodes of the training seeds, at every difficulty;
2. ``raw`` — the policy before training;
3. ``sft-train`` / ``sft`` — supervised harness fine-tuning (`run_sft`) on those episodes, then
   its evaluation;
4. ``grpo-states`` / ``grpo-train`` / ``grpo`` — the SFT policy's own training-seed episodes,
   step-level cost-aware GRPO (`evoharness_bpe_training.continuation`) on their states, then
   its evaluation.

The episodes of a stage, and the continuations of a GRPO step, advance in lockstep: each round
of their model calls is one batched generation (`evoharness_bpe.lab.runner.lockstep`). On a CPU
with native bf16 the model trains under bf16 autocast and generates from a bf16 copy of its
weights; LoRA on the top layers only keeps the backward pass short (`speed`).

The report (``report.md``, ``results.json``, plots) checks the effects the method predicts:
success after SFT at least 50 points above raw; after GRPO at most 0.7× the SFT policy's
meta-action calls per episode at success within 5 points (annealing); more meta-action calls per
environment step at difficulty 2 than at 1 (evolution).
"""


from __future__ import annotations

import argparse
import json
import shutil
import time
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from evoharness_bpe.exceptions import UserError

from .metrics import read_jsonl
from .reproduce_config import (FORK_OR_RESUME, PRESETS, STAGE_OUTPUTS, STAGES, ReproduceConfig, field_defaults, fork_config, int_list,
                               load_reproduce_preset, needs_sft_training, preset_values, reproduce_command, resume_config,
                               shared_stages)
from .reproduce_episodes import (evaluate_stage, expert_traces, lean_seeds, play_seeds, policy_for, run_budget_problems, training_seeds,
                                 write_traces)
from .reproduce_training import GRPO_CHECKPOINTS, SFT_CHECKPOINTS, grpo_train_states, train_grpo, train_sft

__all__ = ["ReproduceConfig", "load_reproduce_preset", "reproduce", "reproduce_command", "resume_config", "fork_config",
           "shared_stages", "STAGE_OUTPUTS", "write_adapter_card", "adapter_provenance", "register", "PRESETS", "STAGES"]


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The records of a JSONL file the run wrote ([] when it has none)."""
    return read_jsonl(path) if path.exists() else []


def _save(model: Any, tokenizer: Any, folder: Path, config: ReproduceConfig | None = None, stage: str = "") -> None:
    from .models import save_model_and_tokenizer

    save_model_and_tokenizer(model, tokenizer, folder)
    if config is not None and (folder / "adapter_config.json").exists():
        write_adapter_card(folder, config, tokenizer, stage)



def write_adapter_card(folder: str | Path, config: ReproduceConfig, tokenizer: Any, stage: str) -> Path:
    """The adapter card (``evoharness.json``) of a LoRA adapter a stage saved: its base model, the
    episode settings and prompt format it was trained under, and the config that produced it, so
    ``evoharness run --adapter FOLDER`` plays it as it was evaluated."""
    from evoharness_bpe.lab.policies.adapter import ADAPTER_CARD

    from .grpo import CHAT_TEMPLATE_KWARGS

    episode = config.episode_config()
    card = {
        "base": config.model,
        "episode": {"harness": "bpe", "max_steps": episode.max_steps, "window": episode.window, "dashboard_tokens": episode.dashboard_tokens,
                    "system_prompt": episode.system_prompt, "spec_style": episode.spec_style,
                    "max_invalid_run": episode.max_invalid_run},
        "policy": {"chat_template": tokenizer.chat_template, "chat_template_kwargs": dict(CHAT_TEMPLATE_KWARGS),
                   "one_line_calls": True},
        "produced_by": adapter_provenance(config, stage),
    }
    path = Path(folder) / ADAPTER_CARD
    path.write_text(json.dumps(card, indent=2), "utf-8")
    return path


def adapter_provenance(config: ReproduceConfig, stage: str) -> dict[str, Any]:
    """The card's ``produced_by``: the command and config that made a stage's adapter, and its training seeds."""
    return {"command": reproduce_command(config), "stage": stage,
            "train_seeds": {str(level): [0, n - 1] for level, n in config.episodes_per_level().items()},
            "config": asdict(config)}


def _load_trained(base: Any, folder: Path) -> Any:
    """The model a finished training stage saved: its LoRA adapter over `base`, or a whole model."""
    if (folder / "adapter_config.json").exists():
        from peft import PeftModel

        return _on_accelerator(PeftModel.from_pretrained(base, str(folder), is_trainable=True))
    from transformers import AutoModelForCausalLM

    return _on_accelerator(AutoModelForCausalLM.from_pretrained(folder))


def _on_accelerator(model: Any) -> Any:
    """`model` on the CUDA device when there is one (the trainers train it there, and every stage's
    episodes generate there), else where it is."""
    import torch

    return model.to("cuda") if torch.cuda.is_available() else model


def _base_model(config: ReproduceConfig, out: Path, dataset: Any) -> tuple[Any, Any]:
    """The raw policy (on the accelerator, when there is one) and its tokenizer."""
    model, tokenizer = _built_or_loaded(config, out, dataset)
    return _on_accelerator(model), tokenizer


def _built_or_loaded(config: ReproduceConfig, out: Path, dataset: Any) -> tuple[Any, Any]:
    """The raw policy and its tokenizer: the student built (once, saved in ``raw/``) or the model loaded."""
    from .grpo import CHAT_TEMPLATE_KWARGS
    from .models import load_model_and_tokenizer
    from .student import build_student, student_chat_template

    if config.model == "student":
        if (out / "raw" / "config.json").exists():
            from transformers import AutoModelForCausalLM, AutoTokenizer

            return AutoModelForCausalLM.from_pretrained(out / "raw"), AutoTokenizer.from_pretrained(out / "raw")
        train = dataset["train"]
        sample = train.select(range(0, len(train), max(1, len(train) // 300)))
        return build_student(sample, vocab_size=config.student_vocab, hidden_size=config.student_hidden,
                             layers=config.student_layers, seed=config.seed, out_dir=out / "raw",
                             template_kwargs=CHAT_TEMPLATE_KWARGS, id_rows=train)
    model, tokenizer = load_model_and_tokenizer(config.model, dtype="float32")  # fp32 master weights; bf16 by autocast
    if config.chat_template.startswith("compact"):  # every difficulty-1 prompt within 1,024 SmolLM2 tokens (docs/benchmarks.md)
        tokenizer.chat_template = student_chat_template(tools_first=config.chat_template == "compact-tools-first")
    return model, tokenizer


def reproduce(config: ReproduceConfig, *, log: Any = print, resume: bool = False, fork: str | Path | None = None) -> dict[str, Any]:
    """Run the reproduction end to end; write ``results.json``, ``report.md`` and plots in ``config.out``.

    Every stage (`STAGES`) leaves its outputs and a marker in ``config.out``; with `resume` the run
    already there continues at its first unfinished stage (its config must equal `config`). With
    `fork`, a new run starts from the finished stages of the run in that folder which `config`'s
    differences leave alone (`shared_stages`): a GRPO ablation reuses the SFT it starts from.
    """
    import torch

    from evoharness_bpe import read_traces

    from .continuation import closing_states, consulting_states, state_rows, successful_states
    from .datasets import traces_to_sft_dataset
    from .reproduce_report import targets, write_report
    from .speed import resolve_precision
    from .stages import StageFolder, load_average

    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()  # stages print their own progress lines
    started = time.perf_counter()
    out = Path(config.out)
    if fork is not None and resume:
        raise UserError(FORK_OR_RESUME)
    folder = StageFolder.open(out, asdict(config), resume=resume, defaults=field_defaults(), outputs=STAGE_OUTPUTS)
    if fork is not None:
        reused = shared_stages(fork_config(fork), asdict(config))
        copied = folder.adopt(fork, {stage: STAGE_OUTPUTS[stage] for stage in reused})
        log(f"fork: {', '.join(copied) or 'no stage'} taken from {fork}")
    precision = resolve_precision(config.precision)
    if config.threads:
        torch.set_num_threads(config.threads)
    torch.manual_seed(config.seed)
    stages = config.stage_list()
    machine = {"precision": precision, "threads": torch.get_num_threads(), "load_at_start": load_average(),
               "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"}
    log(f"run: {out} ({'resumed' if resume else 'new'}), precision {precision}, {machine['threads']} torch threads, "
        f"load {machine['load_at_start']}")

    def expert() -> dict[str, Any]:
        traces = expert_traces(config, training_seeds(config))
        added = expert_traces(config, lean_seeds(config), lean=True)  # none without --expert-lean-episodes
        traces += added
        write_traces(out / "expert.jsonl", traces)
        return {"episodes": len(traces), "model_calls": sum(len(t.model_calls) for t in traces),
                "successes": sum(bool(t.outcome.success) for t in traces), "lean_added": len(added)}

    record = folder.run("expert", expert, log)
    log(f"expert: {record['episodes']} episodes, {record['model_calls']} model calls, {record['successes']} successes")
    # Identical rows (random ids masked) collapse, then every call position gets one row per episode
    # that reaches it, so late calls weigh as much as the opening.
    dataset = traces_to_sft_dataset(read_traces(out / "expert.jsonl"), deduplicate=True, balance_positions=True,
                                    eval_fraction=0.0, seed=config.seed)
    model, tokenizer = _base_model(config, out, dataset)
    log(f"policy: {config.model}, {sum(p.numel() for p in model.parameters()):,} parameters, vocabulary {len(tokenizer)}")
    budget = run_budget_problems(config, stages, tokenizer, policy_for(model, tokenizer, config).prefill)
    for problem in budget:
        log(f"budget: {problem}")

    def evaluate(stage: str, levels: list[int] | None = None) -> dict[str, Any]:
        """The evaluation stage `stage` of the current `model`, its finished episodes kept across a stop."""
        return folder.run(stage, lambda: evaluate_stage(stage, model, tokenizer, config, out, log, precision, levels,
                                                        keep=folder.scratch(stage)), log)

    results: list[dict[str, Any]] = []
    if "raw" in stages:
        results.append(evaluate("raw"))

    def sft_train() -> dict[str, Any]:
        trained, metrics = train_sft(model, tokenizer, dataset, config, out, precision, log)
        _save(trained, tokenizer, out / "sft" / "model", config, "sft")
        shutil.rmtree(out / SFT_CHECKPOINTS, ignore_errors=True)  # the stage is done: nothing left to resume
        log(f"sft: {len(dataset['train'])} rows, loss {metrics.get('train_loss', float('nan')):.3f}")
        return {"rows": len(dataset["train"]), **{k: v for k, v in metrics.items() if isinstance(v, (int, float))}}

    sft_metrics: dict[str, Any] = {}
    if needs_sft_training(stages):
        sft_metrics = folder.run("sft-train", sft_train, log)
        if (out / "sft" / "model" / "adapter_config.json").exists():  # a fresh base: training injected its LoRA layers in place
            model, tokenizer = _base_model(config, out, dataset)
        model = _load_trained(model, out / "sft" / "model")
    if "sft" in stages:
        results.append(evaluate("sft"))

    reward_log: list[dict[str, Any]] = []
    selection_log: list[dict[str, Any]] = []
    if "grpo" in stages:
        def grpo_states() -> dict[str, Any]:
            from evoharness_bpe.lab.envs import make_env

            from .speed import inference_copy

            seeds = {level: list(range(config.grpo_state_episodes)) for level in config.grpo_levels()}
            player = policy_for(inference_copy(model, precision), tokenizer, config)
            own = play_seeds(player, config, seeds, out / "grpo-states.jsonl", log=log, stage="grpo-states",
                             keep=folder.scratch("grpo-states"))
            states = state_rows(own, player.render_prompt)
            closing = closing_states(states, make_env, config.episode_config()) if config.grpo_closing_states else []
            if config.grpo_from_successes:
                finished = successful_states(states)
                if not finished:
                    log("grpo: the SFT policy finished none of its episodes; training on the states of all of them")
                states = finished or states
            kind = config.grpo_states
            if kind == "consulting":
                consulting = consulting_states(states)
                if not consulting:
                    log("grpo: the SFT policy never called a meta-action; training on all its states")
                    kind = "all"
                states = consulting or states
            places = {(c["difficulty"], c["seed"], c["position"]) for c in closing}
            states = [{**state, "closing": False} for state in states  # one set of columns for the dataset
                      if (state["difficulty"], state["seed"], state["position"]) not in places] + closing
            (out / "grpo-states.json").write_text(json.dumps(states), "utf-8")
            return {"states": len(states), "kind": kind, "closing": len(closing), "episodes": len(own), "successes": sum(bool(t.outcome.success) for t in own)}

        info = folder.run("grpo-states", grpo_states, log)
        closing_note = f", {info['closing']} of them closing" if info.get("closing") else ""
        log(f"grpo: {info['states']} states ({info['kind']}{closing_note}) from {info['episodes']} SFT-policy episodes ({info['successes']} successes)")

        def grpo_train() -> dict[str, Any]:
            states = json.loads((out / "grpo-states.json").read_text("utf-8"))
            kept = grpo_train_states(states, config)
            if len(kept) != len(states):
                lead = " or come just before one (--grpo-lead-states)" if config.grpo_lead_states else ""
                closing = sum(bool(state.get("closing")) for state in kept)
                also = f", {closing} closing states" if closing else ""
                log(f"grpo: {len(kept)} of {len(states)} states kept: {len(kept) - closing} called {', '.join(config.skip_kinds())} "
                    f"(--grpo-skip-kinds){lead}{also}")
            states = kept
            trained, rewards = train_grpo(model, tokenizer, states, config, out, precision, log)
            _save(trained, tokenizer, out / "grpo" / "model", config, "grpo")
            shutil.rmtree(out / GRPO_CHECKPOINTS, ignore_errors=True)
            return {"steps": config.grpo_steps, "scored": len(rewards)}

        folder.run("grpo-train", grpo_train, log)
        reward_log = _read_jsonl(out / "grpo" / "rewards.jsonl")
        selection_log = _read_jsonl(out / "grpo" / "selection.jsonl")
        base, tokenizer = _base_model(config, out, dataset) if config.model != "student" else (None, tokenizer)
        model = _load_trained(base, out / "grpo" / "model") if base is not None else _load_trained(model, out / "grpo" / "model")
        results.append(evaluate("grpo", int_list(config.grpo_eval_difficulties) or None))

    summary = {
        "config": asdict(config),
        "machine": {**machine, "load_at_end": load_average()},
        "results": results,
        "sft": sft_metrics,
        "grpo_curve": reward_log,
        "grpo_selection": selection_log,
        "budget_problems": budget,
        "stage_wall_s": dict(folder.wall),
        "wall_s": round(sum(folder.wall.values()), 1),
        "wall_s_this_process": round(time.perf_counter() - started, 1),
    }
    summary["targets"] = targets(results)
    (out / "results.json").write_text(json.dumps(summary, indent=2, default=float), "utf-8")
    write_report(summary, out)
    log(f"report: {out / 'report.md'} ({summary['wall_s']:.0f} s of stages)")
    return summary


# -- command line ---------------------------------------------------------------------------
def register(commands: Any) -> None:
    """Add ``evoharness reproduce`` and ``evoharness export-adapter`` (its adapters, shared) to the CLI's sub-parsers."""
    parser = commands.add_parser("reproduce", help="the miniature reproduction: raw → SFT → cost-aware GRPO, with a report",
                                 description="Each flag's value comes from the preset (--preset, default cpu) unless given; "
                                             "the values shown are the cpu preset's.")
    parser.add_argument("--preset", default=None, choices=PRESETS, help="settings to start from (default: cpu; tiny is a smoke "
                                                                        "test of the pipeline, not a result)")
    parser.add_argument("--resume", metavar="OUT", default=None,
                        help="continue the run in OUT at its first unfinished stage (refused if a flag differs from its config)")
    parser.add_argument("--fork", metavar="SRC", default=None,
                        help="start a new run (--out) with SRC's settings and the flags given, taking SRC's finished stages "
                             "those flags leave alone (a GRPO ablation reuses SRC's SFT)")
    shown = preset_values("cpu")
    for f in fields(ReproduceConfig):
        flag = "--" + f.name.replace("_", "-")
        kind = type(f.default) if f.default is not None else str
        value = shown.get(f.name, f.default)
        text = f.metadata["help"] + ("" if f.name == "out" or value in ("", None) else f" (cpu: {value})")
        if kind is bool:
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=None, help=text)
        else:
            parser.add_argument(flag, type=kind, default=None, help=text)
    parser.set_defaults(handler=_main)
    from .adapter_export import register as register_export

    register_export(commands)



def _main(args: argparse.Namespace) -> int:
    overrides = {f.name: getattr(args, f.name) for f in fields(ReproduceConfig)}
    if args.resume and args.fork:
        raise UserError(FORK_OR_RESUME)
    if args.resume:
        if overrides.get("out") not in (None, args.resume):
            raise UserError("--resume OUT continues the run in OUT; leave out --out")
        config = resume_config(args.resume, args.preset, **overrides)
    elif args.fork:
        if overrides.get("out") in (None, args.fork):
            raise UserError("--fork SRC starts a new run: give it its own --out")
        config = (load_reproduce_preset(args.preset, **overrides) if args.preset
                  else ReproduceConfig(**{**fork_config(args.fork), **{k: v for k, v in overrides.items() if v is not None}}))
    else:
        config = load_reproduce_preset(args.preset or "cpu", **overrides)
    try:
        reproduce(config, log=lambda line: print(line, flush=True), resume=bool(args.resume), fork=args.fork)
    except KeyboardInterrupt:
        print(f"interrupted: the finished stages in {config.out} are kept; continue with "
              f"evoharness reproduce --resume {config.out}", flush=True)
        return 130
    return 0
