"""Recipes are TRL configs: YAML presets through `TrlParser`, a user's own TRL and PEFT configs accepted."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest

from evoharness_bpe.exceptions import UserError
from evoharness_bpe_training.cli import parse_train_args
from evoharness_bpe_training.presets import PRESETS, get_preset


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_parses_into_valid_trl_configs(name: str) -> None:
    from trl import GRPOConfig, ModelConfig, SFTConfig

    preset = get_preset(name)
    for phase, base in (("sft", SFTConfig), ("grpo", GRPOConfig)):
        _, parsed = parse_train_args(phase, ["--preset", name])
        built = getattr(preset, f"{phase}_config")()
        assert isinstance(parsed, base) and isinstance(parsed, ModelConfig)
        recipe = preset.recipe(phase)
        assert recipe.pop("report_to") == "none" and parsed.report_to == built.report_to == []  # TRL's spelling of none
        for key, value in recipe.items():
            assert getattr(parsed, key) == getattr(built, key) == value, f"{name}/{phase}.yaml {key}"
        # the recipe's TRL fields alone make TRL's own config, and its model fields TRL's ModelConfig
        trl_names = {f.name for f in dataclasses.fields(base)}
        model_names = {f.name for f in dataclasses.fields(ModelConfig)}
        assert set(recipe) - trl_names - model_names <= set(dataclasses.asdict(parsed)) - trl_names - model_names
        # (this machine may have no GPU for a bf16 recipe)
        own = base(**{k: v for k, v in recipe.items() if k in trl_names}, use_cpu=True)
        assert own.max_steps == parsed.max_steps and own.learning_rate == parsed.learning_rate
        ModelConfig(**{k: v for k, v in recipe.items() if k in model_names})


def test_the_gpu_preset_chains_sft_into_vllm_rollouts_on_one_gpu() -> None:
    preset = get_preset("smollm2-135m-gpu")
    sft, grpo = preset.sft_config(), preset.grpo_config()
    assert sft.model_name_or_path == "smollm2-135m" and not sft.use_peft and sft.peft_config() is None
    assert sft.bf16 and sft.balance_positions and sft.truncation_side == "left" and sft.max_length == 8192
    # the GRPO recipe starts from the full model the SFT recipe writes, and generates with vLLM in-process
    assert grpo.model_name_or_path == str(Path(sft.output_dir) / "model")
    assert grpo.use_vllm and grpo.vllm_mode == "colocate" and not grpo.use_peft and grpo.bf16
    assert grpo.vllm_max_model_length <= 8192  # SmolLM2's context
    assert "accelerate" not in preset.launch and preset.accelerate_config is None
    qwen = get_preset("qwen3-8b").grpo_config()
    assert qwen.use_vllm and qwen.vllm_mode == "server" and qwen.vllm_server_base_url


def test_the_reproduction_preset_balances_positions_and_cuts_prompts_from_the_left() -> None:
    sft = get_preset("smollm2-135m").sft_config(model="smollm2-135m", traces="t.jsonl", max_length=3072)
    assert sft.balance_positions and sft.truncation_side == "left" and sft.max_length == 3072


def test_flags_override_the_config_file_which_overrides_the_preset(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("EVOHARNESS_RECIPE_TEST", raising=False)
    recipe = tmp_path / "mine.yaml"
    recipe.write_text("env:\n  EVOHARNESS_RECIPE_TEST: set\nmax_steps: 7\nlearning_rate: 3.0e-4\nlora_r: 4\n"
                      "weight_decay: 0.1\nbalance_positions: true\n")
    command, config = parse_train_args("sft", ["--preset", "tiny", "--config", str(recipe), "--max-steps", "9",
                                               "--model", "smollm2-135m", "--dry-run"])
    assert command.dry_run and command.preset == "tiny"
    assert config.max_steps == 9 and config.learning_rate == 3e-4 and config.lora_r == 4
    assert config.weight_decay == 0.1  # a TRL option no recipe copies
    assert config.balance_positions and config.model_name_or_path == "smollm2-135m"
    assert config.per_device_train_batch_size == 2  # from the preset
    assert os.environ["EVOHARNESS_RECIPE_TEST"] == "set"
    _, grpo = parse_train_args("grpo", ["--env", "crm-migration", "--lam", "0.05", "--charge-on-success-only"])
    assert grpo.environment == "crm-migration" and grpo.lam == 0.05 and grpo.charge_on_success_only


def test_bad_recipes_are_refused_with_the_field(tmp_path) -> None:
    recipe = tmp_path / "typo.yaml"
    recipe.write_text("max_stepz: 3\n")
    with pytest.raises(UserError, match="max_stepz"):
        parse_train_args("sft", ["--config", str(recipe)])
    with pytest.raises(UserError, match="max_lost_completions"):
        parse_train_args("sft", ["--max-lost-completions", "2"])
    with pytest.raises(UserError, match="num_generations"):
        parse_train_args("grpo", ["--per-device-train-batch-size", "3", "--num-generations", "2"])


def test_run_sft_accepts_a_users_own_trl_and_peft_configs(sft_traces, tiny_dir, tmp_path) -> None:
    from peft import LoraConfig
    from trl import ModelConfig, SFTConfig

    from evoharness_bpe_training.datasets import traces_to_sft_dataset
    from evoharness_bpe_training.sft import run_sft

    args = SFTConfig(output_dir=str(tmp_path), max_steps=1, use_cpu=True, bf16=False, report_to="none",
                     max_length=2048, per_device_train_batch_size=2, gradient_checkpointing=False, logging_steps=1)
    model_config = ModelConfig(model_name_or_path=str(tiny_dir), dtype="float32")
    peft = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    dataset = traces_to_sft_dataset(sft_traces, eval_fraction=0.0)
    result = run_sft(args, model_config, peft_config=peft, dataset=dataset)
    adapter = json.loads((result.adapter_dir / "adapter_config.json").read_text())
    assert adapter["r"] == 4 and sorted(adapter["target_modules"]) == ["q_proj", "v_proj"]
    assert json.loads((tmp_path / "recipe.json").read_text())["model_name_or_path"] == str(tiny_dir)
    assert result.rows["train"]["kept"] == len(dataset["train"])


def test_a_plain_trl_config_becomes_a_recipe_with_the_harness_defaults() -> None:
    from trl import GRPOConfig

    from evoharness_bpe_training.config import CostAwareGRPOConfig, as_recipe

    plain = GRPOConfig(output_dir="runs/x", use_cpu=True, bf16=False, per_device_train_batch_size=2, num_generations=2,
                       max_steps=3, weight_decay=0.2)
    recipe = as_recipe(plain, CostAwareGRPOConfig)
    assert isinstance(recipe, CostAwareGRPOConfig) and as_recipe(recipe, CostAwareGRPOConfig) is recipe
    assert recipe.max_steps == 3 and recipe.weight_decay == 0.2 and recipe.generation_batch_size == plain.generation_batch_size
    assert recipe.difficulty_levels() == [1] and recipe.weights().lam == 0.02 and recipe.environment is None


@pytest.mark.slow  # a GRPO step on the tiny model
def test_run_grpo_accepts_a_users_own_trl_and_peft_configs(tiny_dir, tmp_path, locker_env_cls) -> None:
    from peft import LoraConfig
    from trl import GRPOConfig, ModelConfig

    from evoharness_bpe_training.grpo import run_grpo

    args = GRPOConfig(output_dir=str(tmp_path), max_steps=1, use_cpu=True, bf16=False, report_to="none",
                      per_device_train_batch_size=2, num_generations=2, max_completion_length=24,
                      max_tool_calling_iterations=1, gradient_checkpointing=False, logging_steps=1)
    peft = LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj"], task_type="CAUSAL_LM")
    result = run_grpo(args, ModelConfig(model_name_or_path=str(tiny_dir)), peft_config=peft, env_factory=locker_env_cls, plots=False)
    assert json.loads((result.adapter_dir / "adapter_config.json").read_text())["r"] == 2
    assert len(result.episodes) == 2
