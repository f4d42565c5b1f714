"""Phase 1, harness fine-tuning: supervised LoRA training on the model calls of expert traces.

    evoharness train sft --preset tiny --traces traces.jsonl --output-dir runs/sft

The policy learns the format and the habit of the harness: reading the dashboard, calling the
meta-actions (`track`, `commit`, `recall`, `note`) and the environment's tools. The loss is on
the assistant's tokens only (prompt-completion rows).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from evoharness_bpe.exceptions import UserError



__all__ = ["SFTRecipeConfig", "SFTResult", "run_sft", "load_sft_dataset"]


@dataclass
class SFTRecipeConfig:
    """Everything `run_sft` needs; every field doubles as a command-line flag."""

    model: str = field(default="tiny", metadata={"help": "Model: `tiny`, `smollm2-135m`, or a local model folder."})
    traces: str | None = field(
        default=None,
        metadata={"help": "Training data: a JSONL trace file, a folder of them, or a folder written by `evoharness export`."},
    )
    output_dir: str = field(default="runs/sft", metadata={"help": "Where the adapter, checkpoints and metrics go."})
    max_steps: int = field(default=-1, metadata={"help": "Optimizer steps; -1 trains for `num_train_epochs`."})
    num_train_epochs: float = field(default=3.0, metadata={"help": "Epochs over the training rows when `max_steps` is -1."})
    learning_rate: float = field(default=2e-4, metadata={"help": "Peak learning rate (LoRA usually wants 1e-4 to 5e-4)."})
    per_device_train_batch_size: int = field(default=4, metadata={"help": "Rows per device per step."})
    gradient_accumulation_steps: int = field(default=1, metadata={"help": "Steps accumulated before an optimizer step."})
    max_length: int = field(default=2048, metadata={"help": "Tokens per row; longer rows are truncated."})
    lora: bool = field(default=True, metadata={"help": "Train LoRA adapters; off (`--no-lora`) trains every weight, for small models."})
    lora_r: int = field(default=16, metadata={"help": "LoRA rank."})
    lora_alpha: int = field(default=32, metadata={"help": "LoRA scaling numerator (alpha / r scales the update)."})
    lora_dropout: float = field(default=0.05, metadata={"help": "Dropout on the LoRA branch."})
    lora_target_modules: str = field(
        default="all-linear", metadata={"help": "Modules given adapters: `all-linear` or a comma-separated list of names."}
    )
    dtype: str = field(default="float32", metadata={"help": "Weights dtype: float32 on CPU, bfloat16 on recent GPUs."})
    bf16: bool = field(default=False, metadata={"help": "bf16 mixed precision (GPU)."})
    gradient_checkpointing: bool = field(default=False, metadata={"help": "Trade compute for memory on large models."})
    eval_fraction: float = field(default=0.1, metadata={"help": "Share of episodes held out for evaluation."})
    successful_only: bool = field(default=True, metadata={"help": "Train only on episodes that succeeded."})
    logging_steps: int = field(default=1, metadata={"help": "Log every N steps."})
    save_steps: int = field(default=500, metadata={"help": "Checkpoint every N steps."})
    seed: int = field(default=0, metadata={"help": "Random seed (data split, initialisation, shuffling)."})
    report_to: str = field(default="none", metadata={"help": "Experiment tracker: none, tensorboard, wandb, trackio."})

    def __post_init__(self) -> None:
        if self.max_steps == 0 or self.max_steps < -1:
            raise UserError(f"max_steps must be positive or -1 (train for num_train_epochs), got {self.max_steps}")
        if self.max_steps == -1 and self.num_train_epochs <= 0:
            raise UserError("num_train_epochs must be positive when max_steps is -1")
        for name in ("per_device_train_batch_size", "gradient_accumulation_steps", "max_length", "lora_r", "lora_alpha", "logging_steps", "save_steps"):
            if getattr(self, name) < 1:
                raise UserError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.learning_rate <= 0:
            raise UserError(f"learning_rate must be positive, got {self.learning_rate}")
        if not 0.0 <= self.lora_dropout < 1.0:
            raise UserError(f"lora_dropout must be in [0, 1), got {self.lora_dropout}")
        if not 0.0 <= self.eval_fraction < 1.0:
            raise UserError(f"eval_fraction must be in [0, 1), got {self.eval_fraction}")
        if self.bf16 and self.dtype == "float16":
            raise UserError("bf16 mixed precision needs dtype bfloat16 or float32, not float16")

    def lora_config(self):  # -> peft.LoraConfig
        """The PEFT `LoraConfig` of this recipe."""
        from peft import LoraConfig

        targets: str | list[str] = self.lora_target_modules
        if targets != "all-linear":
            targets = [t.strip() for t in targets.split(",") if t.strip()]
        return LoraConfig(
            r=self.lora_r,
            lora_alpha=self.lora_alpha,
            lora_dropout=self.lora_dropout,
            target_modules=targets,
            task_type="CAUSAL_LM",
        )

    def sft_config(self):  # -> trl.SFTConfig
        """TRL's `SFTConfig` of this recipe (built without touching a GPU)."""
        from trl import SFTConfig

        return SFTConfig(
            output_dir=self.output_dir,
            max_steps=self.max_steps,
            num_train_epochs=self.num_train_epochs,
            learning_rate=self.learning_rate,
            per_device_train_batch_size=self.per_device_train_batch_size,
            gradient_accumulation_steps=self.gradient_accumulation_steps,
            max_length=self.max_length,
            bf16=self.bf16,
            activation_checkpointing=self.gradient_checkpointing,
            logging_steps=self.logging_steps,
            save_steps=self.save_steps,
            save_total_limit=2,
            seed=self.seed,
            report_to=self.report_to,
            completion_only_loss=True,
            use_cpu=not _has_accelerator(),
            dataloader_num_workers=0,
        )


@dataclass
class SFTResult:
    """Where `run_sft` put its outputs, and its final metrics."""

    output_dir: Path
    adapter_dir: Path
    """The LoRA adapter (``<output_dir>/adapter``), or with ``lora=False`` the whole model (``<output_dir>/model``)."""
    metrics: dict[str, Any]


def _has_accelerator() -> bool:
    import torch

    return torch.cuda.is_available()


def load_sft_dataset(source: str | os.PathLike[str], *, eval_fraction: float = 0.1, successful_only: bool = True, seed: int = 0):
    """A `DatasetDict` from traces (file or folder) or from a folder written by `evoharness export`."""
    from datasets import DatasetDict, load_dataset

    from .datasets import traces_to_sft_dataset

    path = Path(source)
    for fmt, builder in (("parquet", "parquet"), ("jsonl", "json")):
        if path.is_dir() and (path / f"train.{fmt}").exists():
            files = {split: str(path / f"{split}.{fmt}") for split in ("train", "eval") if (path / f"{split}.{fmt}").exists()}
            return DatasetDict(load_dataset(builder, data_files=files))
    return traces_to_sft_dataset(path, eval_fraction=eval_fraction, successful_only=successful_only, seed=seed)


def run_sft(config: SFTRecipeConfig, *, dataset=None, model: Any = None, tokenizer: Any = None) -> SFTResult:
    """Fine-tune `config.model` with LoRA on `dataset` (or `config.traces`); save the adapter.

    The adapter lands in ``<output_dir>/adapter`` (loadable with `peft.PeftModel.from_pretrained`
    over the same base model; with ``lora=False`` the whole model lands in ``<output_dir>/model``,
    a folder to pass as `model`), the tokenizer beside it, and the training log in
    ``<output_dir>/metrics.jsonl`` plus the final figures in ``metrics.json``.
    """
    from trl import SFTTrainer

    from .callbacks import MetricsFileCallback
    from .models import load_model_and_tokenizer

    if dataset is None:
        if config.traces is None:
            raise UserError("no training data: set `traces` (a trace file or folder) or pass `dataset=`")
        dataset = load_sft_dataset(config.traces, eval_fraction=config.eval_fraction, successful_only=config.successful_only, seed=config.seed)
    train = dataset["train"] if hasattr(dataset, "keys") else dataset
    evaluation = dataset.get("eval") if hasattr(dataset, "keys") else None
    keep = {"prompt", "completion", "tools", "messages"}
    train = train.remove_columns([c for c in train.column_names if c not in keep])
    if evaluation is not None and len(evaluation):
        evaluation = evaluation.remove_columns([c for c in evaluation.column_names if c not in keep])
    else:
        evaluation = None
    if len(train) == 0:
        raise UserError("the training split is empty; lower eval_fraction or add traces")
    if model is None or tokenizer is None:
        model, tokenizer = load_model_and_tokenizer(config.model, dtype=config.dtype)
    out = Path(config.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "recipe.json").write_text(json.dumps(asdict(config), indent=2), "utf-8")
    args = config.sft_config()
    if evaluation is not None:
        args.eval_strategy = "steps"
        args.eval_steps = max(1, config.save_steps)
    trainer = SFTTrainer(
        model=model,
        args=args,
        train_dataset=train,
        eval_dataset=evaluation,
        processing_class=tokenizer,
        peft_config=config.lora_config() if config.lora else None,
        callbacks=[MetricsFileCallback(out / "metrics.jsonl")],
    )
    result = trainer.train()
    metrics: dict[str, Any] = dict(result.metrics)
    if evaluation is not None:
        metrics.update(trainer.evaluate())
    adapter_dir = out / ("adapter" if config.lora else "model")
    trainer.model.save_pretrained(adapter_dir)
    tokenizer.save_pretrained(adapter_dir)
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2, default=float), "utf-8")
    return SFTResult(output_dir=out, adapter_dir=adapter_dir, metrics=metrics)
