"""Phase 1, harness fine-tuning: supervised training on the model calls of expert traces.

    evoharness train sft --preset tiny --traces traces.jsonl --output-dir runs/sft

The policy learns the format and the habit of the harness: reading the dashboard, calling the
meta-actions (`track`, `commit`, `recall`, `note`) and the environment's tools. The loss is on
the assistant's tokens only (prompt-completion rows). A row longer than ``max_length`` loses the
start of its prompt, never its completion silently: rows that would lose completion tokens are
dropped, counted and logged, and above ``max_lost_completions`` of a split the run refuses.
"""

from __future__ import annotations

import copy
import json
import logging
import os
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trl import SFTTrainer, get_peft_config

from evoharness_bpe.exceptions import UserError

from .config import SFTRecipeConfig, as_recipe, recipe_dict

__all__ = ["SFTRecipeConfig", "SFTResult", "CompletionSafeSFTTrainer", "fit_rows", "opening_weights", "run_sft", "load_sft_dataset"]

logger = logging.getLogger(__name__)

_FROM_CONFIG: Any = object()

@dataclass
class SFTResult:
    """Where `run_sft` put its outputs, its final metrics, and what became of the rows."""

    output_dir: Path
    adapter_dir: Path
    """The LoRA adapter (``<output_dir>/adapter``), or without PEFT the whole model (``<output_dir>/model``)."""
    metrics: dict[str, Any]
    rows: dict[str, dict[str, int]] = field(default_factory=dict)
    """Per split: rows given, kept, prompts cut, rows dropped for losing completion tokens (`fit_rows`)."""
    model: Any = None
    """The trained model (a PEFT model with LoRA), as it left the trainer."""


def fit_rows(dataset, max_length: int, *, side: str = "left"):  # -> tuple[datasets.Dataset, dict[str, int]]
    """Rows (tokenized, with ``labels``) cut to `max_length` without losing completion tokens.

    ``side="left"`` drops the oldest prompt tokens, so the completion at the end stays whole;
    ``"right"`` keeps the start (TRL's ``keep_start``). A row that would lose any trained token
    (``labels != -100``) is dropped, and so is a row with none. Returns the rows and a report:
    ``rows``, ``kept``, ``prompts_cut``, ``completions_lost``, ``no_completion``, ``longest_needed``
    (the ``max_length`` the longest dropped row would need), ``max_length``.
    """

    def fit(example: dict[str, Any]) -> dict[str, Any]:
        ids, labels = example["input_ids"], example["labels"]
        trained = [i for i, label in enumerate(labels) if label != -100]
        if not trained:
            return {"_fit": 3, "_need": 0}
        need = len(ids) - trained[0] if side == "left" else trained[-1] + 1
        if len(ids) <= max_length:
            return {"_fit": 0, "_need": need}
        if need > max_length:
            return {"_fit": 2, "_need": need}
        cut = slice(len(ids) - max_length, None) if side == "left" else slice(None, max_length)
        return {"input_ids": ids[cut], "labels": labels[cut], "_fit": 1, "_need": need}

    marked = dataset.map(fit, desc=f"Fitting rows to max_length {max_length}")
    status = marked["_fit"]
    lost = [need for s, need in zip(status, marked["_need"]) if s == 2]
    report = {
        "rows": len(status),
        "kept": sum(1 for s in status if s < 2),
        "prompts_cut": status.count(1),
        "completions_lost": len(lost),
        "no_completion": status.count(3),
        "longest_needed": max(lost, default=0),
        "max_length": max_length,
    }
    kept = marked.filter(lambda s: s < 2, input_columns="_fit").remove_columns(["_fit", "_need"])
    return kept, report


class CompletionSafeSFTTrainer(SFTTrainer):
    """TRL's `SFTTrainer`, but rows longer than ``max_length`` are cut by `fit_rows` instead of from the end.

    TRL truncates the end of a row and silently drops a row left without completion tokens; here
    the prompt's start goes first (``truncation_side="left"``), every dropped row is counted and
    logged (`row_report`), and when more than `max_lost_completions` of a split would be dropped
    the trainer refuses to start. With `opening_weight` above 1 the first `opening_tokens` tokens
    of each reply, where a call names its tool, weigh that much more in the loss (`opening_weights`).
    """

    def __init__(self, *args: Any, truncation_side: str = "left", max_lost_completions: float = 0.05,
                 opening_weight: float = 1.0, opening_tokens: int = 24, **kwargs: Any) -> None:
        self.truncation_side = truncation_side
        self.max_lost_completions = max_lost_completions
        self.opening_weight = opening_weight
        self.opening_tokens = opening_tokens
        self.row_report: dict[str, dict[str, int]] = {}
        super().__init__(*args, **kwargs)
        if opening_weight != 1.0 and (self.label_smoother is not None or self.compute_loss_func is not None):
            raise UserError("opening_weight weighs the negative log-likelihood; it cannot combine with label smoothing or a "
                            "compute_loss_func: leave it at 1 or drop those")

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):  # noqa: ANN001, ANN201 - TRL's signature
        """TRL's loss, or with `opening_weight` ≠ 1 the reply's opening tokens weighted (the negative
        log-likelihood of TRL's fused LM head, summed with the weights and divided by the tokens)."""
        if self.opening_weight == 1.0:
            return super().compute_loss(model, inputs, return_outputs=return_outputs, num_items_in_batch=num_items_in_batch)
        import torch

        inputs["use_cache"] = False
        outputs = model(**inputs, fused_lm_head=True)
        weights = opening_weights(outputs.label_mask, self.opening_tokens, self.opening_weight)
        tokens = outputs.label_mask.sum() if num_items_in_batch is None else num_items_in_batch
        loss = (-outputs.log_probs * weights).sum() / torch.as_tensor(tokens).clamp(min=1)
        if self.args.average_tokens_across_devices and num_items_in_batch is not None:
            loss = loss * self.accelerator.num_processes
        return (loss, outputs) if return_outputs else loss

    def _prepare_dataset(self, dataset, processing_class, args, packing, formatting_func, dataset_name):  # noqa: ANN001 - TRL's signature
        from datasets import Dataset

        limit = args.max_length
        if limit is None or packing or not isinstance(dataset, Dataset):  # TRL's own handling
            return super()._prepare_dataset(dataset, processing_class, args, packing, formatting_func, dataset_name)
        args.max_length = None  # tokenize whole rows; `fit_rows` cuts them
        try:
            prepared = super()._prepare_dataset(dataset, processing_class, args, packing, formatting_func, dataset_name)
        finally:
            args.max_length = limit
        prepared, report = fit_rows(prepared, limit, side=self.truncation_side)
        self.row_report[dataset_name] = report
        _check_lost(report, dataset_name, self.truncation_side, self.max_lost_completions)
        return prepared


def opening_weights(label_mask: Any, tokens: int, weight: float) -> Any:
    """Per-position loss weights: `weight` on the first `tokens` trained positions of each row
    (``label_mask`` True), 1 on the other trained positions, 0 elsewhere.

    >>> import torch
    >>> opening_weights(torch.tensor([[False, True, True, True]]), 2, 5.0).tolist()
    [[0.0, 5.0, 5.0, 1.0]]
    """
    trained = label_mask.bool()
    opening = trained & (trained.long().cumsum(dim=-1) <= tokens)
    return trained.float() + (weight - 1.0) * opening.float()


def _check_lost(report: dict[str, int], split: str, side: str, allowed: float) -> None:
    rows, lost, cut = report["rows"], report["completions_lost"], report["prompts_cut"]
    if cut:
        where = "the start of their prompt" if side == "left" else "the end of their prompt"
        logger.warning("SFT %s split: %d of %d rows longer than max_length %d lost %s; their completions are whole",
                       split, cut, rows, report["max_length"], where)
    if report["no_completion"]:
        logger.warning("SFT %s split: %d of %d rows have no completion tokens and are dropped", split, report["no_completion"], rows)
    if not lost:
        return
    message = (
        f"{lost} of {rows} {split} rows would lose completion tokens at max_length {report['max_length']} "
        f"(truncation_side {side}; the longest needs {report['longest_needed']} tokens)"
    )
    if lost > allowed * rows:
        raise UserError(
            f"{message}: raise max_length to {report['longest_needed']} or more, or let them be dropped with "
            f"max_lost_completions {lost / rows:.2f} (now {allowed:.2f})"
        )
    logger.warning("SFT %s: those rows are dropped", message)


def load_sft_dataset(
    source: str | os.PathLike[str],
    *,
    eval_fraction: float = 0.1,
    successful_only: bool = True,
    seed: int = 0,
    deduplicate: bool = True,
    balance_positions: bool = False,
):
    """A `DatasetDict` from traces (file or folder) or from a folder written by `evoharness export`."""
    from datasets import DatasetDict, load_dataset

    from .datasets import traces_to_sft_dataset

    path = Path(source)
    for fmt, builder in (("parquet", "parquet"), ("jsonl", "json")):
        if path.is_dir() and (path / f"train.{fmt}").exists():
            files = {split: str(path / f"{split}.{fmt}") for split in ("train", "eval") if (path / f"{split}.{fmt}").exists()}
            return DatasetDict(load_dataset(builder, data_files=files))
    return traces_to_sft_dataset(
        path, eval_fraction=eval_fraction, successful_only=successful_only, seed=seed,
        deduplicate=deduplicate, balance_positions=balance_positions,
    )


def run_sft(
    config: Any,
    model_config: Any = None,
    *,
    peft_config: Any = _FROM_CONFIG,
    dataset=None,
    model: Any = None,
    tokenizer: Any = None,
    callbacks: list[Any] | None = None,
    quiet: bool = False,
) -> SFTResult:
    """Fine-tune on `dataset` (or ``config.traces``); save the adapter or the model, and the metrics.

    `config` is an `SFTRecipeConfig` or any TRL `SFTConfig` (the harness fields then take their
    defaults, `as_recipe`). The model comes from `model_config` (a TRL `ModelConfig`) when given, else from
    `config`'s own ``model_name_or_path``/``dtype``; `peft_config` (any PEFT config, or None for
    full fine-tuning) replaces the LoRA settings of the model config. The adapter lands in
    ``<output_dir>/adapter`` (loadable with `peft.PeftModel.from_pretrained` over the same base
    model; without PEFT the whole model lands in ``<output_dir>/model``, a folder to pass as
    ``--model``), the tokenizer beside it, the training log in ``<output_dir>/metrics.jsonl`` and
    the final figures, with what became of the rows, in ``metrics.json``. Checkpoints (``save_strategy``)
    go to ``checkpoint_dir`` (else `output_dir`); ``resume_from_checkpoint`` (a ``checkpoint-<step>``
    folder, or True for the newest whole one there) continues from one, its log kept in
    ``metrics.jsonl`` and the steps after it trained again; anything else is refused before a model loads. `callbacks` are
    extra `transformers.TrainerCallback` objects (progress lines, say); `quiet` drops the
    trainer's own printing of log dicts and progress bars (when `callbacks` report progress).
    """
    from .callbacks import MetricsFileCallback
    from .checkpoints import checkpoint_to_resume
    from .models import load_model_and_tokenizer, save_model_and_tokenizer
    from .speed import score_trained_positions_only

    score_trained_positions_only()
    config = as_recipe(config, SFTRecipeConfig)
    checkpoint = checkpoint_to_resume(config.resume_from_checkpoint, Path(config.checkpoint_dir or config.output_dir))
    model_args = model_config if model_config is not None else config
    if peft_config is _FROM_CONFIG:
        peft_config = get_peft_config(model_args)
    if dataset is None:
        if config.traces is None:
            raise UserError("no training data: set `traces` (a trace file or folder) or pass `dataset=`")
        dataset = load_sft_dataset(
            config.traces, eval_fraction=config.eval_fraction, successful_only=config.successful_only,
            seed=config.seed, deduplicate=config.deduplicate, balance_positions=config.balance_positions,
        )
    train, evaluation = _splits(dataset)
    if model is None or tokenizer is None:
        if not model_args.model_name_or_path:
            raise UserError("no model: set `model_name_or_path` (tiny, smollm2-135m or a folder), pass a ModelConfig, or pass model= and tokenizer=")
        model, tokenizer = load_model_and_tokenizer(model_args.model_name_or_path, dtype=model_args.dtype or "float32")
    out = Path(config.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "recipe.json").write_text(json.dumps(recipe_dict(config, model_config), indent=2, default=str), "utf-8")
    args = copy.copy(config)  # the evaluation schedule and checkpoint folder below are this run's, not the caller's
    if config.checkpoint_dir:
        args.output_dir = config.checkpoint_dir
    if evaluation is not None and args.eval_strategy == "no":
        args.eval_strategy = "steps"
        args.eval_steps = max(1, int(args.save_steps))
    trainer = CompletionSafeSFTTrainer(
        model=model,
        args=args,
        train_dataset=train,
        eval_dataset=evaluation,
        processing_class=tokenizer,
        peft_config=peft_config,
        callbacks=[MetricsFileCallback(out / "metrics.jsonl"), *(callbacks or [])],
        truncation_side=config.truncation_side,
        max_lost_completions=config.max_lost_completions,
        opening_weight=config.opening_weight,
        opening_tokens=config.opening_tokens,
    )
    if len(trainer.train_dataset) == 0:
        raise UserError("no training row fits max_length; raise max_length")
    if quiet:
        quiet_trainer(trainer)
    with _frozen_layers_cache(trainer, config.cache_frozen_layers) as cache:
        result = trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
    metrics: dict[str, Any] = dict(result.metrics)
    if cache is not None:
        metrics["frozen_layers_cached"] = len(cache.layers)
        metrics["frozen_layers_cache_hits"] = cache.hits
    if evaluation is not None and len(trainer.eval_dataset):
        metrics.update(trainer.evaluate())
    metrics["rows"] = trainer.row_report
    adapter_dir = out / ("adapter" if peft_config is not None else "model")
    save_model_and_tokenizer(trainer.model, tokenizer, adapter_dir)
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2, default=float), "utf-8")
    return SFTResult(output_dir=out, adapter_dir=adapter_dir, metrics=metrics, rows=trainer.row_report, model=trainer.model)


def _frozen_layers_cache(trainer: Any, wanted: bool) -> Any:
    """The frozen layers' cache (`frozen_layers.cache_frozen_layers`) around `trainer`'s run where it
    pays and applies: one row a pass (a batch of several rows rarely comes back whole) and no
    DeepSpeed or FSDP (they gather a layer's weights as it runs); else a context that does nothing."""
    if not wanted or trainer.args.per_device_train_batch_size != 1 or trainer.is_deepspeed_enabled or trainer.is_fsdp_enabled:
        return nullcontext()
    from .frozen_layers import cache_frozen_layers

    return cache_frozen_layers(trainer.model)


def quiet_trainer(trainer: Any) -> Any:
    """`trainer` without its printing callbacks (raw log dicts, tqdm bars); metrics files stay."""
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    for callback in (PrinterCallback, ProgressCallback):
        trainer.remove_callback(callback)
    return trainer


def _splits(dataset: Any) -> tuple[Any, Any]:
    train = dataset["train"] if hasattr(dataset, "keys") else dataset
    evaluation = dataset.get("eval") if hasattr(dataset, "keys") else None
    keep = {"prompt", "completion", "tools", "messages"}
    train = train.remove_columns([c for c in train.column_names if c not in keep])
    if len(train) == 0:
        raise UserError("the training split is empty; lower eval_fraction or add traces")
    if evaluation is None or not len(evaluation):
        return train, None
    return train, evaluation.remove_columns([c for c in evaluation.column_names if c not in keep])
