"""evoharness-bpe-training: harness fine-tuning, then cost-aware RL, for evoharness-bpe agents.

Phase 1 (`run_sft`) teaches a policy the harness's format from expert traces; phase 2
(`run_grpo`) teaches it when consulting its Belief/Progress/Experience is worth the cost.
Heavy libraries (torch, transformers, trl, peft, datasets) load on first use, not on import.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

__version__ = "0.1.0"

__all__ = [
    "traces_to_sft_dataset",
    "export_dataset",
    "SFTRecipeConfig",
    "run_sft",
    "CostAwareGRPOConfig",
    "run_grpo",
    "cost_aware_reward",
    "CostWeights",
    "ReferenceRewardWeights",
    "reference_reward_from_trace",
    "harness_metrics",
    "plot_harness_metrics",
    "harness_environment",
    "build_tiny_model",
    "load_model_and_tokenizer",
    "PRESETS",
    "consolidation_dataset",
    "__version__",
]

_EXPORTS = {
    "traces_to_sft_dataset": "datasets",
    "export_dataset": "datasets",
    "SFTRecipeConfig": "config",
    "run_sft": "sft",
    "CostAwareGRPOConfig": "config",
    "run_grpo": "grpo",
    "cost_aware_reward": "rewards",
    "CostWeights": "rewards",
    "ReferenceRewardWeights": "reference_reward",
    "reference_reward_from_trace": "reference_reward",
    "harness_metrics": "metrics",
    "plot_harness_metrics": "metrics",
    "harness_environment": "environment",
    "build_tiny_model": "tiny",
    "load_model_and_tokenizer": "models",
    "PRESETS": "presets",
    "consolidation_dataset": "consolidation",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'evoharness_bpe_training' has no attribute {name!r}")
    return getattr(import_module(f".{module}", __name__), name)
