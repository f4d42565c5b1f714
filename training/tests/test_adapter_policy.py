"""A saved LoRA adapter and its card, played back as a policy with the prompt format it was trained with."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evoharness_bpe.exceptions import UserError


@pytest.fixture(scope="module")
def adapter_folder(tiny_dir, save_tiny_adapter, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from evoharness_bpe_training.reproduce_config import load_reproduce_preset

    config = load_reproduce_preset("cpu", out="runs/x", model=str(tiny_dir))
    return save_tiny_adapter(tmp_path_factory.mktemp("adapter"), config, "sft")


def test_the_card_records_the_base_the_prompt_format_and_what_produced_it(adapter_folder, tiny_dir) -> None:
    from evoharness_bpe.lab.policies.adapter import read_adapter_card

    card = read_adapter_card(adapter_folder)
    assert card["base"] == str(tiny_dir)
    assert card["episode"] == {"harness": "bpe", "max_steps": 50, "window": 4, "dashboard_tokens": 160, "spec_style": "compact",
                               "system_prompt": "Call exactly one tool per reply.", "max_invalid_run": 5}
    assert "# Tools" in card["policy"]["chat_template"]  # the compact template itself, not a name
    assert card["produced_by"]["stage"] == "sft" and card["produced_by"]["config"]["lora_layers"] == 10
    assert card["produced_by"]["command"] == f"evoharness reproduce --preset cpu --out runs/x --model {tiny_dir}"


def test_the_recorded_command_makes_the_same_config() -> None:
    import shlex
    from dataclasses import asdict, fields

    from evoharness_bpe.lab.cli import build_parser
    from evoharness_bpe_training.reproduce_config import ReproduceConfig, load_reproduce_preset, reproduce_command

    config = load_reproduce_preset("cpu", out="runs/my run", difficulties="1,2", train_episodes="16,2", sft_epochs=2.0,
                                   system_prompt="One tool a reply, please.", lockstep=False)
    command = reproduce_command(config)
    assert "--lora-r" not in command  # only what differs from the preset
    args = build_parser().parse_args(shlex.split(command)[1:])
    again = load_reproduce_preset(args.preset, **{f.name: getattr(args, f.name) for f in fields(ReproduceConfig)})
    assert asdict(again) == asdict(config)


def test_the_adapter_policy_answers_as_the_merged_model(adapter_folder, tiny_dir) -> None:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from evoharness_bpe.lab.envs import make_env
    from evoharness_bpe.lab.policies import TransformersPolicy
    from evoharness_bpe.lab.policies.adapter import adapter_policy, read_adapter_card

    played = adapter_policy(adapter_folder, max_new_tokens=16)
    tokenizer = AutoTokenizer.from_pretrained(tiny_dir)
    card = read_adapter_card(adapter_folder)["policy"]
    tokenizer.chat_template = card["chat_template"]
    options = {"native_tools": True, "max_new_tokens": 16, "chat_template_kwargs": card["chat_template_kwargs"], "one_line_calls": True}
    merged = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_dir), str(adapter_folder)).merge_and_unload()
    plain = TransformersPolicy(AutoModelForCausalLM.from_pretrained(tiny_dir), tokenizer=tokenizer, **options)
    reference = TransformersPolicy(merged, tokenizer=tokenizer, **options)
    env = make_env("crm-migration", 1)
    task, first = env.reset(0)
    messages = [{"role": "system", "content": "Call exactly one tool per reply."}, {"role": "user", "content": f"{task}\n\n{first}"}]
    tools = env.tools(style="compact")
    assert played.render_prompt(messages, tools) == reference.render_prompt(messages, tools)
    assert played.complete(messages, tools).get("content") == reference.complete(messages, tools).get("content")
    assert reference.complete(messages, tools).get("content") != plain.complete(messages, tools).get("content")


def test_a_folder_without_an_adapter_or_card_is_a_clear_error(tmp_path: Path, adapter_folder) -> None:
    from evoharness_bpe.lab.policies.adapter import read_adapter_card

    with pytest.raises(UserError, match="no adapter_config.json"):
        read_adapter_card(tmp_path)
    (tmp_path / "adapter_config.json").write_text("{}")
    with pytest.raises(UserError, match="no evoharness.json"):
        read_adapter_card(tmp_path)
    card = json.loads((adapter_folder / "evoharness.json").read_text())
    card["episode"]["temperature"] = 2
    (tmp_path / "evoharness.json").write_text(json.dumps(card))
    with pytest.raises(UserError, match="unknown episode fields: temperature"):
        read_adapter_card(tmp_path)


def test_evoharness_run_plays_the_trained_policy_under_its_cards_settings(adapter_folder, tmp_path: Path) -> None:
    from evoharness_bpe import read_traces
    from evoharness_bpe.lab.cli import main

    out = tmp_path / "run"
    assert main(["run", "--policy", "trained", "--adapter", str(adapter_folder), "--env", "crm-migration", "--harness", "bpe",
                 "--max-steps", "2", "--out", str(out)]) == 0
    (trace,) = read_traces(out / "traces.jsonl")
    assert trace.metadata["spec_style"] == "compact" and len(trace.model_calls) <= 2
    system = trace.model_calls[0].messages[0]["content"]
    assert system.startswith("Call exactly one tool per reply.")  # the card's system prompt
    assert len([m for m in trace.model_calls[-1].messages if m["role"] != "system"]) <= 4  # the card's window


def test_the_trained_policy_without_an_adapter_says_what_to_pass(tmp_path: Path, monkeypatch, capsys) -> None:
    from evoharness_bpe.lab.cli import main
    from evoharness_bpe.lab.runner import suite

    monkeypatch.setattr(suite, "shipped_adapter", lambda: None)
    assert main(["run", "--policy", "trained", "--env", "crm-migration", "--out", str(tmp_path / "r")]) == 1
    assert "needs --adapter FOLDER" in capsys.readouterr().err


def test_the_main_job_compares_the_shipped_adapter_with_its_base_on_held_out_seeds(adapter_folder, tmp_path: Path,
                                                                                    monkeypatch, capsys) -> None:
    from evoharness_bpe import read_traces
    from evoharness_bpe.lab import cli
    from evoharness_bpe.lab.runner import suite

    monkeypatch.setattr(suite, "shipped_adapter", lambda: None)
    assert not cli._shipped_adapter_playable()  # nothing shipped: the main job stays as it was
    monkeypatch.setattr(suite, "shipped_adapter", lambda: adapter_folder)
    assert cli._shipped_adapter_playable()
    main_run = suite.RunConfig(out=tmp_path / "run", seed=0, mode="new")
    main_run.out.mkdir()
    assert cli._trained_comparison(main_run, episodes=1) == []
    traces = list(read_traces(tmp_path / "run" / "trained" / "traces.jsonl"))
    assert sorted(t.metadata["policy"] for t in traces) == ["base", "trained"]
    for trace in traces:
        assert trace.env == "crm-migration" and trace.harness == "bpe"
        assert trace.metadata["difficulty"] == 1 and trace.metadata["seed"] >= cli.TRAINED_SEEDS  # never a training seed
        assert trace.model_calls[0].messages[0]["content"].startswith("Call exactly one tool per reply.")  # the card's prompt
    printed = capsys.readouterr().out
    assert "before and after harness training" in printed and "crm-migration      base" in printed
    assert "crm-migration      trained" in printed


def test_the_shipped_adapter_is_the_cpu_presets_and_fits_the_package() -> None:
    from dataclasses import asdict

    from evoharness_bpe.lab.policies.adapter import read_adapter_card
    from evoharness_bpe.lab.runner.suite import shipped_adapter
    from evoharness_bpe_training.reproduce_config import load_reproduce_preset, reproduce_command, shared_stages

    folder = shipped_adapter()
    assert folder is not None, "the training package ships adapters/smollm2-crm"
    assert sum(p.stat().st_size for p in folder.iterdir()) <= 10 * 2**20
    card = read_adapter_card(folder)
    produced = card["produced_by"]
    preset = load_reproduce_preset("cpu", out=produced["config"]["out"])
    # the preset's last training stage made it; the preset may change its evaluations only
    assert produced["stage"] == "grpo" and "grpo-train" in shared_stages(produced["config"], asdict(preset)), \
        "the cpu preset changed a setting of a training stage: retrain and ship its GRPO adapter again"
    assert produced["command"] == reproduce_command(preset)
    assert card["episode"]["max_steps"] == preset.max_steps and card["episode"]["window"] == preset.window
    lora = json.loads((folder / "adapter_config.json").read_text())
    assert (lora["r"], lora["lora_alpha"], len(lora["layers_to_transform"])) == (preset.lora_r, preset.lora_alpha, preset.lora_layers)
