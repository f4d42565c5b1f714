"""The training commands of `evoharness`: ``export`` and ``train sft|grpo`` (``consolidate`` is a core command).

Registered through the ``evoharness.commands`` entry-point group: `register` receives the core
parser's sub-parsers object. Training flags are generated from the config dataclasses, so every
field's help text is the flag's help. Also runnable as ``python -m evoharness_bpe_training.cli``
(what ``accelerate launch`` needs).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import typing
from collections.abc import Sequence
from typing import Any

__all__ = ["register", "add_dataclass_arguments", "main"]


def add_dataclass_arguments(parser: argparse.ArgumentParser, cls: type) -> None:
    """One ``--flag`` per dataclass field, typed and documented from the field's metadata."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        kind = next((a for a in typing.get_args(hint) if a is not type(None)), hint) if typing.get_args(hint) else hint
        flag = "--" + f.name.replace("_", "-")
        help_text = f.metadata.get("help", "")
        if kind is bool:
            parser.add_argument(flag, dest=f.name, action=argparse.BooleanOptionalAction, default=None, help=help_text)
        else:
            parser.add_argument(flag, dest=f.name, type=kind, default=None, help=f"{help_text} (default: {f.default})")


def _overrides(args: argparse.Namespace, cls: type) -> dict[str, Any]:
    return {f.name: getattr(args, f.name) for f in dataclasses.fields(cls) if getattr(args, f.name, None) is not None}


def _export(args: argparse.Namespace) -> int:
    from rich.progress import track

    from evoharness_bpe.exceptions import UserError

    from .datasets import export_dataset, load_traces, traces_to_sft_dataset

    traces = [t for t in track(load_traces(args.traces), description="reading traces", transient=True)]
    if not traces:
        raise UserError(f"{args.traces} holds no traces")
    dataset = traces_to_sft_dataset(traces, successful_only=not args.all, eval_fraction=args.eval_fraction, seed=args.seed)
    files = export_dataset(dataset, args.out, fmt=args.format)
    for split, ds in dataset.items():
        print(f"{split}: {len(ds)} rows")
    print("wrote " + ", ".join(str(f) for f in files))
    return 0


def _train_sft(args: argparse.Namespace) -> int:
    from .presets import get_preset
    from .sft import SFTRecipeConfig, run_sft

    config = get_preset(args.preset).sft_config(**_overrides(args, SFTRecipeConfig))
    if args.dry_run:
        return _print_dry_run(config, config.sft_config(), config.lora_config(), get_preset(args.preset))
    result = run_sft(config)
    print(f"adapter: {result.adapter_dir}\nmetrics: {result.output_dir / 'metrics.json'}")
    return 0


def _train_grpo(args: argparse.Namespace) -> int:
    from .grpo import CostAwareGRPOConfig, run_grpo
    from .presets import get_preset

    config = get_preset(args.preset).grpo_config(**_overrides(args, CostAwareGRPOConfig))
    if args.dry_run:
        return _print_dry_run(config, config.grpo_config(), config.lora_config(), get_preset(args.preset))
    result = run_grpo(config)
    overall = result.metrics["harness"]["overall"] or {}
    print(
        f"adapter: {result.adapter_dir}\nmetrics: {result.output_dir / 'metrics.json'}\n"
        f"success {overall.get('success_rate', 0):.2f}, meta-action calls per episode "
        f"{overall.get('meta_calls_per_episode', 0):.2f}"
    )
    return 0


def _print_dry_run(recipe: Any, trainer_args: Any, lora: Any, preset: Any) -> int:
    print(json.dumps(
        {
            "recipe": dataclasses.asdict(recipe),
            "trainer": {k: v for k, v in trainer_args.to_dict().items() if not k.startswith("_")},
            "lora": {"r": lora.r, "lora_alpha": lora.lora_alpha, "target_modules": sorted(lora.target_modules) if isinstance(lora.target_modules, set) else lora.target_modules},
            "accelerate_config": preset.accelerate_config,
            "launch": preset.launch,
        },
        indent=2,
        default=str,
    ))
    return 0


def register(commands: Any) -> None:
    """Add ``export`` and ``train sft|grpo`` to the `evoharness` command."""
    from .grpo import CostAwareGRPOConfig
    from .sft import SFTRecipeConfig

    export = commands.add_parser("export", help="turn traces into an SFT dataset (parquet or JSONL)")
    export.add_argument("traces", help="a JSONL trace file or a folder of them")
    export.add_argument("--out", required=True, help="output folder (train and eval files)")
    export.add_argument("--format", choices=("parquet", "jsonl"), default="parquet", help="file format")
    export.add_argument("--all", action="store_true", help="keep failed episodes too")
    export.add_argument("--eval-fraction", type=float, default=0.1, help="share of episodes held out")
    export.add_argument("--seed", type=int, default=0, help="seed of the train/eval split")
    export.set_defaults(handler=_export)

    train = commands.add_parser("train", help="harness fine-tuning (sft) and cost-aware RL (grpo)")
    phases = train.add_subparsers(dest="phase", metavar="PHASE", required=True)
    for phase, cls, handler, text in (
        ("sft", SFTRecipeConfig, _train_sft, "phase 1: LoRA fine-tuning on expert traces"),
        ("grpo", CostAwareGRPOConfig, _train_grpo, "phase 2: cost-aware GRPO in an environment"),
    ):
        sub = phases.add_parser(phase, help=text, description=text)
        sub.add_argument("--preset", default="tiny", help="tiny, smollm2-135m or qwen3-8b (fields below override it)")
        sub.add_argument("--dry-run", action="store_true", help="print the resolved configs and the launch command; train nothing")
        add_dataclass_arguments(sub, cls)
        sub.set_defaults(handler=handler)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the core `evoharness` command line (with these commands registered)."""
    from evoharness_bpe.lab.cli import main as core_main

    return core_main(argv)


if __name__ == "__main__":
    sys.exit(main())
