"""`evoharness train sft|grpo`, presets and dry runs."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest

from evoharness_bpe import TraceWriter
from evoharness_bpe.lab.cli import main
from evoharness_bpe.exceptions import UserError
from evoharness_bpe_training.grpo import CostAwareGRPOConfig
from evoharness_bpe_training.presets import PRESETS, accelerate_config_path, get_preset
from evoharness_bpe_training.sft import SFTRecipeConfig


@pytest.mark.slow  # trains SFT and GRPO
def test_train_commands_show_progress_and_write_metrics(sft_traces, tmp_path, capfd) -> None:
    traces = tmp_path / "traces.jsonl"
    with TraceWriter(traces) as writer:
        for trace in sft_traces:
            writer.write(trace)
    sft_out = tmp_path / "sft"
    assert main(["train", "sft", "--preset", "tiny", "--traces", str(traces), "--output-dir", str(sft_out),
                 "--max-steps", "1", "--eval-fraction", "0"]) == 0
    captured = capfd.readouterr()
    assert "1/1 [" not in captured.err  # no third-party progress bar in a log (only with --verbose)
    assert "'loss':" in captured.out     # plain progress lines instead
    assert "adapter:" in captured.out
    assert (sft_out / "adapter" / "adapter_config.json").exists()
    assert json.loads((sft_out / "metrics.json").read_text())["train_loss"] > 0
    assert json.loads((sft_out / "recipe.json").read_text())["max_steps"] == 1

    grpo_out = tmp_path / "grpo"
    assert main(["train", "grpo", "--preset", "tiny", "--env", "crm-migration", "--adapter", str(sft_out / "adapter"),
                 "--output-dir", str(grpo_out), "--max-steps", "1", "--seeds", "2", "--lam", "0.05", "--charge-on-success-only"]) == 0
    captured = capfd.readouterr()
    assert "1/1 [" not in captured.err and "meta-action calls per episode" in captured.out
    metrics = json.loads((grpo_out / "metrics.json").read_text())
    assert metrics["harness"]["overall"]["episodes"] == 2
    recipe = json.loads((grpo_out / "recipe.json").read_text())
    assert recipe["lam"] == 0.05 and recipe["charge_on_success_only"] is True
    assert (grpo_out / "episodes.jsonl").exists() and (grpo_out / "harness_evolution.png").exists()
    # the rollouts opened crm-migration episodes (built in, through make_env) with the core runner's prompt
    assert all(json.loads(line)["difficulty"] == 1 for line in (grpo_out / "episodes.jsonl").read_text().splitlines())


def test_environments_resolve_by_built_in_name_entry_point_or_module(monkeypatch, locker_env_cls) -> None:
    from evoharness_bpe.lab.envs.crm import CRMMigrationEnv
    from evoharness_bpe_training.envs import available_envs, env_factory

    crm = env_factory("crm-migration", difficulty=2)
    assert isinstance(crm(), CRMMigrationEnv) and crm().difficulty == 2 and crm(difficulty=1).difficulty == 1
    assert {"crm-migration", "compliance-review", "alfworld", "textworld"} <= set(available_envs())
    module = types.ModuleType("cli_lockers")
    module.LockerEnv = locker_env_cls
    monkeypatch.setitem(sys.modules, "cli_lockers", module)
    assert env_factory("cli_lockers:LockerEnv", difficulty=3)().difficulty == 3
    with pytest.raises(UserError, match="cannot load environment"):
        env_factory("cli_lockers:Nope")
    with pytest.raises(UserError, match="difficulty"):
        env_factory("crm-migration", difficulty=9)


@pytest.mark.slow  # builds the 8B preset's configs
def test_qwen3_8b_preset_builds_without_a_gpu(capsys) -> None:
    preset = get_preset("qwen3-8b")
    sft = preset.sft_config(model="/models/Qwen3-8B")
    args, lora = sft.sft_config(), sft.lora_config()
    assert args.bf16 and sft.activation_checkpointing and lora.target_modules == "all-linear" and sft.model_name_or_path == "/models/Qwen3-8B"
    grpo = preset.grpo_config()
    grpo_args = grpo.grpo_config()
    assert grpo_args.use_vllm and grpo_args.vllm_mode == "server" and grpo_args.num_generations == 8
    assert "zero_stage: 3" in accelerate_config_path(preset.accelerate_config).read_text()
    assert main(["train", "grpo", "--preset", "qwen3-8b", "--dry-run"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["accelerate_config"] == "zero3" and printed["launch"].startswith("accelerate launch")
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    assert "accelerate launch" in readme and "trl vllm-serve" in readme


def test_configs_say_what_to_set() -> None:
    with pytest.raises(UserError, match="num_generations"):
        CostAwareGRPOConfig(per_device_train_batch_size=3, num_generations=2)
    with pytest.raises(UserError, match="difficulties"):
        CostAwareGRPOConfig(difficulties="easy")
    with pytest.raises(UserError, match="max_steps"):
        SFTRecipeConfig(max_steps=0)
    with pytest.raises(UserError, match="unknown preset"):
        get_preset("gpt-9")
    with pytest.raises(UserError, match="unknown environment"):
        from evoharness_bpe_training.envs import env_factory

        env_factory("no-such-env")
    assert set(PRESETS) == {"tiny", "smollm2-135m", "smollm2-135m-gpu", "qwen3-8b"}
    assert main(["train", "sft", "--preset", "tiny", "--traces", "/nonexistent/traces.jsonl", "--output-dir", "/tmp/x"]) == 1


def test_every_config_field_has_help() -> None:
    import dataclasses

    for cls in (SFTRecipeConfig, CostAwareGRPOConfig):
        for f in dataclasses.fields(cls):
            if f.init:
                assert f.metadata.get("help"), f"{cls.__name__}.{f.name} has no help"


def test_package_import_stays_light() -> None:
    import subprocess

    code = "import sys, evoharness_bpe_training; print(' '.join(m for m in ('torch', 'trl', 'transformers', 'datasets', 'vllm') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_miniature_script_documents_itself() -> None:
    import subprocess

    script = Path(__file__).parents[2] / "examples" / "reproduce_miniature.py"
    out = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, check=True)
    assert "--preset" in out.stdout and "--stages" in out.stdout and "smollm2-gpu" in out.stdout
