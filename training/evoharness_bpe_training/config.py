"""The two recipes' configs: TRL's own `SFTConfig` / `GRPOConfig` and `ModelConfig`, plus the harness's fields.

    from evoharness_bpe_training import SFTRecipeConfig, run_sft
    run_sft(SFTRecipeConfig(output_dir="runs/sft", model_name_or_path="tiny", traces="traces.jsonl"))

Every TRL `TrainingArguments`, `SFTConfig`/`GRPOConfig` and `ModelConfig` field is a field here, so
any TRL option can be set, from Python, a YAML recipe (``--config``, through `TrlParser`) or the
command line. The harness adds only what TRL has no notion of: where the traces are and how they
become rows (SFT), the environment and the reward's prices (GRPO). ``model_name_or_path`` (flag
``--model``) also takes ``tiny`` and ``smollm2-135m``; LoRA is on unless ``use_peft`` is false.
"""

# No `from __future__ import annotations`: HfArgumentParser reads the field types at run time.

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from trl import GRPOConfig, ModelConfig, SFTConfig, get_peft_config

from evoharness_bpe.exceptions import UserError

from .rewards import CostWeights

__all__ = ["CHAT_TEMPLATE_KWARGS", "SFTRecipeConfig", "CostAwareGRPOConfig", "as_recipe", "recipe_dict"]

CHAT_TEMPLATE_KWARGS: dict[str, Any] = {"enable_thinking": False}
"""What the chat template gets when a reply is generated: Qwen3's renders a past reply after an
empty ``<think>`` block, so generation starts after one too (templates without the flag ignore it)."""


def _has_accelerator() -> bool:
    import torch

    mps = getattr(torch.backends, "mps", None)
    return torch.cuda.is_available() or bool(mps and mps.is_available())


def _bf16_supported() -> bool:
    import torch

    return torch.cuda.is_available() and torch.cuda.is_bf16_supported()


class _HarnessDefaults:
    """What both recipes do before TRL validates: CPU when there is no accelerator, bf16 only where supported."""

    def _harness_post_init(self) -> None:
        if self.max_steps == 0 or self.max_steps < -1:
            raise UserError(f"max_steps must be positive or -1 (train for num_train_epochs), got {self.max_steps}")
        if self.max_steps == -1 and self.num_train_epochs <= 0:
            raise UserError("num_train_epochs must be positive when max_steps is -1")
        if self.learning_rate <= 0:
            raise UserError(f"learning_rate must be positive, got {self.learning_rate}")
        if isinstance(self.lora_target_modules, str) and "," in self.lora_target_modules:
            self.lora_target_modules = [t.strip() for t in self.lora_target_modules.split(",") if t.strip()]
        if not _has_accelerator():
            self.use_cpu = True
        if self.bf16 is None:
            self.bf16 = not self.fp16 and _bf16_supported()
        ModelConfig.__post_init__(self)  # TrainingArguments does not chain to the second base

    def peft_config(self):  # -> peft.PeftConfig | None
        """The PEFT `LoraConfig` of this recipe (TRL's `get_peft_config`), or None with ``use_peft=False``."""
        return get_peft_config(self)

    def lora_config(self):  # -> peft.PeftConfig | None
        """Same as `peft_config` (the name of earlier releases)."""
        return self.peft_config()


_MODEL_HELP = "Model: `tiny`, `smollm2-135m`, or a local model folder (config.json and weights, or a .gguf file)."
_PEFT_HELP = "Train LoRA adapters (the default); `--use-peft false` trains every weight, for small models."


@dataclass
class SFTRecipeConfig(_HarnessDefaults, SFTConfig, ModelConfig):
    """Phase 1, harness fine-tuning: TRL's `SFTConfig` and `ModelConfig`, plus how traces become rows."""

    model_name_or_path: str | None = field(default="tiny", metadata={"help": _MODEL_HELP, "aliases": ["--model"]})
    use_peft: bool = field(default=True, metadata={"help": _PEFT_HELP})
    gradient_checkpointing: bool = field(
        default=False, metadata={"help": "Deprecated by transformers: set `activation_checkpointing`."}
    )
    traces: str | None = field(
        default=None,
        metadata={"help": "Training data: a JSONL trace file, a folder of them, or a folder written by `evoharness export`."},
    )
    eval_fraction: float = field(default=0.1, metadata={"help": "Share of episodes held out for evaluation."})
    successful_only: bool = field(default=True, metadata={"help": "Train only on episodes that succeeded."})
    deduplicate: bool = field(
        default=True,
        metadata={"help": "Drop repeated rows within a split (compared with random ids such as note ids masked)."},
    )
    balance_positions: bool = field(
        default=False,
        metadata={"help": "Give every call position (opening move, second move, …) as many rows as episodes reaching it, "
                          "repeating its distinct rows, so deduplication does not starve the shared opening moves."},
    )
    truncation_side: str = field(
        default="left",
        metadata={"help": "Where a row longer than `max_length` loses tokens: `left` cuts the prompt's start and keeps "
                          "the completion; `right` cuts the end (TRL's keep_start). Rows that would lose completion "
                          "tokens are dropped and counted either way.", "choices": ["left", "right"]},
    )
    max_lost_completions: float = field(
        default=0.05,
        metadata={"help": "Largest share of a split's rows that may be dropped for losing completion tokens to "
                          "`max_length`; above it the run refuses and says how long the rows are."},
    )
    opening_weight: float = field(
        default=1.0,
        metadata={"help": "Loss weight of the first `opening_tokens` tokens of each reply, where a call names its tool "
                          "(1: every token alike). The choice of tool is one token among the dozens of a call's "
                          "arguments, so an unweighted loss can fall low while the choice stays a guess."},
    )
    opening_tokens: int = field(
        default=24,
        metadata={"help": "How many tokens at the start of each reply `opening_weight` applies to (the call's opening "
                          "markup, its tool name and its first argument)."},
    )

    cache_frozen_layers: bool = field(
        default=True,
        metadata={"help": "With LoRA on the top layers only and one row a pass (per_device_train_batch_size 1), keep the "
                          "hidden state the frozen layers below hand up for each row and hand it up again on its later "
                          "passes (the same loss and adapter, sooner; up to 4 GiB kept, "
                          "`frozen_layers.cache_frozen_layers`). Not under DeepSpeed or FSDP."},
    )
    checkpoint_dir: str | None = field(
        default=None,
        metadata={"help": "Where the trainer's checkpoints go (`save_strategy`, `save_steps`), apart from the adapter and "
                          "metrics in `output_dir`; None: `output_dir`. `resume_from_checkpoint` (one of them) continues "
                          "a stopped training there."},
    )

    def __post_init__(self) -> None:
        if not 0.0 <= self.eval_fraction < 1.0:
            raise UserError(f"eval_fraction must be in [0, 1), got {self.eval_fraction}")
        if not 0.0 <= self.max_lost_completions <= 1.0:
            raise UserError(f"max_lost_completions must be in [0, 1], got {self.max_lost_completions}")
        if self.truncation_side not in ("left", "right"):
            raise UserError(f"truncation_side must be left or right, not {self.truncation_side!r}")
        if self.opening_weight <= 0 or self.opening_tokens < 1:
            raise UserError(f"opening_weight must be above 0 and opening_tokens at least 1, got {self.opening_weight} and "
                            f"{self.opening_tokens}")
        if self.max_length is not None and self.max_length < 1:
            raise UserError(f"max_length must be at least 1, got {self.max_length}")
        self._harness_post_init()
        super().__post_init__()

    def sft_config(self) -> "SFTRecipeConfig":
        """This object, a TRL `SFTConfig` (kept for callers of earlier releases)."""
        return self


@dataclass
class CostAwareGRPOConfig(_HarnessDefaults, GRPOConfig, ModelConfig):
    """Phase 2, cost-aware RL: TRL's `GRPOConfig` and `ModelConfig`, plus the environment and the reward's prices."""

    model_name_or_path: str | None = field(default="tiny", metadata={"help": _MODEL_HELP, "aliases": ["--model"]})
    use_peft: bool = field(default=True, metadata={"help": _PEFT_HELP + " Ignored with `adapter`."})
    gradient_checkpointing: bool = field(
        default=False, metadata={"help": "Deprecated by transformers: set `activation_checkpointing`."}
    )
    chat_template_kwargs: dict | None = field(
        default_factory=lambda: dict(CHAT_TEMPLATE_KWARGS),
        metadata={"help": "Extra chat-template arguments of rollouts; the default opens replies after the empty think "
                          "block fine-tuning rendered."},
    )
    adapter: str | None = field(default=None, metadata={"help": "LoRA adapter from `train sft` to start from (trained further)."})
    environment: str | None = field(
        default=None,
        metadata={"help": "Environment: a registered name or `package.module:Factory`.", "aliases": ["--env"]},
    )
    difficulties: str = field(default="1", metadata={"help": "Comma-separated difficulties to sample episodes from."})
    seeds: int = field(default=64, metadata={"help": "Training episodes (seeds 0..N-1) per difficulty."})
    lam: float = field(default=0.02, metadata={"help": "λ: price of one meta-action call, in reward units."})
    mu: float = field(default=0.0005, metadata={"help": "μ: price of one token the meta-actions and dashboards added."})
    invalid_penalty: float = field(default=0.1, metadata={"help": "Price of one invalid action (refused or malformed call)."})
    charge_on_success_only: bool = field(default=False, metadata={"help": "Charge λ and μ only on successful rollouts."})
    refresh_dashboard: bool = field(
        default=True,
        metadata={"help": "With `rollouts: trl`, show the updated dashboard after each environment step (windowed "
                          "rollouts show the current one in the system prompt of every call)."},
    )
    dashboard_tokens: int = field(default=600, metadata={"help": "Dashboard token budget."})
    rollouts: str = field(
        default="windowed",
        metadata={"help": "`windowed`: every model call of a rollout sees the harness's prompt (the current dashboard in "
                          "the system prompt, the task and the recent `window` of messages), as inference does; the "
                          "opening call is trained on the episode's reward; an episode makes at most "
                          "`max_tool_calling_iterations` + 1 model calls (200 when unset). `trl`: TRL's multi-turn loop, "
                          "one growing conversation whose every call is trained, on prompts inference never shows.",
                  "choices": ["windowed", "trl"]},
    )
    window: int = field(default=12, metadata={"help": "Recent messages kept in each prompt of a windowed rollout "
                                                       "(the lab's `EpisodeConfig.window`)."})

    def __post_init__(self) -> None:
        if self.rollouts not in ("windowed", "trl"):
            raise UserError(f"rollouts must be windowed or trl, not {self.rollouts!r}")
        for name in ("per_device_train_batch_size", "gradient_accumulation_steps", "num_generations", "seeds",
                     "dashboard_tokens", "window"):
            if getattr(self, name) < 1:
                raise UserError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.num_generations < 2:
            raise UserError("num_generations must be at least 2: GRPO compares rollouts within a group")
        if self.generation_batch_size is None and self.steps_per_generation is None and (
            self.per_device_train_batch_size * self.gradient_accumulation_steps
        ) % self.num_generations:
            raise UserError(
                f"per_device_train_batch_size × gradient_accumulation_steps "
                f"({self.per_device_train_batch_size}×{self.gradient_accumulation_steps}) must be a multiple of "
                f"num_generations ({self.num_generations})"
            )
        if self.temperature <= 0:
            raise UserError(f"temperature must be positive, got {self.temperature}")
        self.difficulty_levels()
        self.weights()
        self._harness_post_init()
        super().__post_init__()

    def difficulty_levels(self) -> list[int]:
        """The difficulties as integers."""
        try:
            levels = [int(x) for x in str(self.difficulties).split(",") if x.strip()]
        except ValueError:
            raise UserError(f"difficulties must be comma-separated integers such as '1,2,3', not {self.difficulties!r}") from None
        if not levels:
            raise UserError("difficulties must name at least one level, e.g. '1'")
        return levels

    def weights(self) -> CostWeights:
        """The reward's prices."""
        return CostWeights(lam=self.lam, mu=self.mu, invalid_penalty=self.invalid_penalty, charge_on_success_only=self.charge_on_success_only)

    def grpo_config(self) -> "CostAwareGRPOConfig":
        """This object, a TRL `GRPOConfig` (kept for callers of earlier releases)."""
        return self


def as_recipe(config: Any, cls: type) -> Any:
    """`config` as a `cls` recipe: itself if it is one, else a copy of a plain TRL config.

    The copy keeps every value of `config` (already validated by TRL, which is not run again)
    and gives the fields `config` lacks, the harness's and the model's, their defaults.
    """
    if isinstance(config, cls):
        return config
    recipe = object.__new__(cls)
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            recipe.__dict__[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            recipe.__dict__[f.name] = f.default_factory()
    recipe.__dict__.update(vars(config))
    return recipe


def recipe_dict(config: Any, model_config: Any = None) -> dict[str, Any]:
    """Every field of a recipe (and of a separate `ModelConfig`) as JSON-ready values, tokens masked."""
    values = config.to_dict() if hasattr(config, "to_dict") else dataclasses.asdict(config)
    if model_config is not None:
        values.update({f.name: getattr(model_config, f.name) for f in dataclasses.fields(model_config)})
    return values
