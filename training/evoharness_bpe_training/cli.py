"""The training commands of `evoharness`: ``export`` and ``train sft|grpo`` (``consolidate`` is a core command).

Registered through the ``evoharness.commands`` entry-point group: `register` receives the core
parser's sub-parsers object. ``train sft|grpo`` parse their flags with TRL's own `TrlParser`
over the recipe configs, so every TRL field is a flag, ``--config FILE.yaml`` reads a recipe,
and ``--preset NAME`` starts from a shipped one (``configs/recipes/NAME/``); flags override the
file, which overrides the preset. Also runnable as ``python -m evoharness_bpe_training.cli``
(what ``accelerate launch`` needs). Flags are checked before the heavy imports where they can be.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from evoharness_bpe.exceptions import UserError
from evoharness_bpe.lab.cli import DefaultsHelpFormatter, fraction_below_one

__all__ = ["register", "main", "out_dir_problem"]

_TRACES_HELP = "a JSONL trace file, a folder of them, or a folder written by `evoharness export`"


@dataclass
class CommandArguments:
    """The flags of ``train sft|grpo`` that are not config fields."""

    preset: str = field(default="tiny", metadata={"help": "Shipped recipe to start from: tiny, smollm2-135m, smollm2-135m-gpu or qwen3-8b."})
    dry_run: bool = field(default=False, metadata={"help": "Print the resolved config and the launch command; train nothing."})


class _PassThrough(argparse.ArgumentParser):
    """A sub-parser that hands its arguments on untouched (TRL's parser reads them later)."""

    def parse_known_args(self, args=None, namespace=None):  # noqa: ANN001 - argparse's signature
        namespace = namespace or argparse.Namespace()
        for key, value in self._defaults.items():
            setattr(namespace, key, value)
        namespace.argv = list(args or [])
        return namespace, []


def out_dir_problem(path: str | os.PathLike[str], *, create: bool) -> str | None:
    """Why `path` cannot be an output folder (None when it can); with `create`, make it."""
    target = Path(path)
    if target.exists() and not target.is_dir():
        return "is a file: pass a folder (it is created if missing)"
    existing = target
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return f"is under {existing}, which is a file: pass a folder path"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"cannot be written ({existing} is not writable): pass a folder you can write to"
    if create:
        try:
            target.mkdir(parents=True, exist_ok=True)
            probe = target / ".evoharness-write-test"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as exc:
            return f"cannot be written ({exc.strerror or exc}): pass a folder you can write to"
    return None


def _check_out(path: str | None, flag: str, *, create: bool) -> None:
    if path is None:
        return
    problem = out_dir_problem(path, create=create)
    if problem:
        raise UserError(f"{flag} {path} {problem}")


def _check_model(name: str | None) -> None:
    from .models import model_folder_problem

    problem = model_folder_problem(name) if name else "is empty"
    if problem:
        raise UserError(f"--model {name}: {problem}")


def _check_traces(path: str | None, phase: str) -> None:
    if phase != "sft":
        return
    if path is None:
        raise UserError(f"train sft needs --traces: {_TRACES_HELP}")
    if not Path(path).exists():
        raise UserError(f"--traces {path} does not exist: pass {_TRACES_HELP}")


def _check_config(path: str) -> None:
    """A ``--config`` file that exists and holds a YAML mapping (TRL's parser reads it later)."""
    import yaml

    file = Path(path)
    if not file.is_file():
        raise UserError(f"--config {path} {'is a folder' if file.is_dir() else 'does not exist'}: pass a recipe YAML file "
                        "(field: value lines, e.g. learning_rate: 1.0e-4)")
    try:
        data = yaml.safe_load(file.read_text("utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"--config {path} cannot be read ({getattr(exc, 'strerror', None) or exc})") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise UserError(f"--config {path} is not valid YAML ({problem}{where}): fix the file") from None
    if data is not None and not isinstance(data, dict):
        raise UserError(f"--config {path} must hold field: value lines (a YAML mapping), not a {type(data).__name__}")


def _flag_names(text: str) -> str:
    """The flags of a TRL "unknown arguments" message (``['--x', '3', '--y']``) as ``--x, --y``."""
    import re

    return ", ".join(re.findall(r"'(--?[^']+)'", text)) or text


def _prescan(argv: list[str]) -> argparse.Namespace:
    """The flags checked before TRL is imported (a typo there should not cost the import)."""
    scan = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    scan.add_argument("--preset", default="tiny")
    scan.add_argument("--output-dir", "--output_dir", dest="output_dir")
    scan.add_argument("--model", "--model_name_or_path", "--model-name-or-path", dest="model")
    scan.add_argument("--traces")
    scan.add_argument("--config")
    scan.add_argument("--dry-run", "--dry_run", dest="dry_run", nargs="?", const="true")
    scan.add_argument("-h", "--help", dest="help", action="store_true")
    known, _ = scan.parse_known_args(argv)
    return known


def _export(args: argparse.Namespace) -> int:
    from .datasets import NoTrainingRows, export_dataset, load_traces, traces_to_sft_dataset

    if not Path(args.traces).exists():
        raise UserError(f"{args.traces} does not exist: pass a JSONL trace file or a folder of them")
    _check_out(args.out, "--out", create=True)
    if sys.stdout.isatty():
        from rich.progress import track

        traces = list(track(load_traces(args.traces), description="reading traces", transient=True))
    else:  # logs: no progress output at all (rich would leave a blank line)
        traces = list(load_traces(args.traces))
    if not traces:
        raise UserError(f"{args.traces} holds no traces")
    try:
        dataset = traces_to_sft_dataset(traces, successful_only=not args.all, eval_fraction=args.eval_fraction,
                                        seed=args.seed, balance_positions=args.balance_positions)
    except NoTrainingRows:
        raise UserError(f"no rows: no episode in {args.traces} succeeded (add --all to keep failed episodes) "
                        "or its traces hold no model calls") from None
    files = export_dataset(dataset, args.out, fmt=args.format)
    for split, ds in dataset.items():
        print(f"{split}: {len(ds)} rows")
    print("wrote " + ", ".join(str(f) for f in files))
    return 0


def parse_train_args(phase: str, argv: Sequence[str]) -> tuple[CommandArguments, Any]:
    """``(command arguments, recipe config)`` of ``train <phase>`` from its flags, preset and ``--config`` file."""
    from evoharness_bpe.lab.cli import one_line_errors
    from trl import TrlParser

    from .config import CostAwareGRPOConfig, SFTRecipeConfig
    from .presets import get_preset

    cls = SFTRecipeConfig if phase == "sft" else CostAwareGRPOConfig
    argv = list(argv)
    preset = get_preset(_prescan(argv).preset)
    parser = TrlParser([CommandArguments, cls], prog=f"evoharness train {phase}",
                       description=f"{cls.__doc__} Flags override --config, which overrides --preset.")
    unknown = parser.set_defaults_with_config(**preset.recipe(phase))
    if unknown:
        raise UserError(f"preset {preset.name} sets fields that {cls.__name__} lacks: {' '.join(unknown[::2])}")
    parser.formatter_class = DefaultsHelpFormatter  # no "(default: None)" beside TRL's own "Defaults to …"
    one_line_errors(parser)
    try:
        command, config = parser.parse_args_and_config(argv)
    except ValueError as exc:  # TRL's validation, or keys a --config file has and the config lacks
        message = str(exc).splitlines()[0]
        if message.startswith("Unknown arguments from config file"):
            fields = _flag_names(message).replace("--", "")
            config_file = _prescan(argv).config
            message = f"--config {config_file} sets fields that train {phase} does not have: {fields} (see: evoharness train {phase} --help)"
        elif message.startswith("Some specified arguments are not used"):
            message = f"unknown flag(s) {_flag_names(message)} (see: evoharness train {phase} --help)"
        raise UserError(message) from None
    return command, config


def _train(phase: str, args: argparse.Namespace) -> int:
    from .presets import get_preset

    argv = list(args.argv)
    early = _prescan(argv)
    if not early.help:
        get_preset(early.preset)
        if early.config is not None:
            _check_config(early.config)
        if early.traces is not None:
            _check_traces(early.traces, phase)
        if early.model is not None:
            _check_model(early.model)
        dry = early.dry_run is not None and early.dry_run.lower() in ("true", "1", "yes", "y")
        _check_out(early.output_dir, "--output-dir", create=not dry)
    command, config = parse_train_args(phase, argv)
    preset = get_preset(command.preset)
    if command.dry_run:
        return _print_dry_run(config, preset)
    _check_model(config.model_name_or_path)
    _check_out(config.output_dir, "--output-dir", create=True)
    return _run_sft(config) if phase == "sft" else _run_grpo(config)


def _run_sft(config: Any) -> int:
    from .datasets import NoTrainingRows
    from .sft import run_sft

    _check_traces(config.traces, "sft")
    try:
        result = run_sft(config)
    except NoTrainingRows:
        raise UserError(f"no training rows: no episode in --traces {config.traces} succeeded (add "
                        "--no-successful-only to keep failed episodes) or its traces hold no model calls") from None
    for split, report in result.rows.items():
        print(f"{split}: {report['kept']} of {report['rows']} rows trained, {report['prompts_cut']} prompts cut "
              f"from the {config.truncation_side}, {report['completions_lost']} dropped for lost completion tokens")
    print(f"{result.adapter_dir.name}: {result.adapter_dir}\nmetrics: {result.output_dir / 'metrics.json'}")
    return 0


def _run_grpo(config: Any) -> int:
    from .grpo import run_grpo

    if not config.environment:
        raise UserError("train grpo needs --env: a built-in environment name (e.g. crm-migration) or package.module:Factory")
    if isinstance(config.environment, str):
        from evoharness_bpe.lab.registry import env_factory

        try:
            env_factory(config.environment)  # an unknown name fails here, before a model is loaded
        except UserError as exc:
            raise UserError(f"--env: {exc}") from None
    result = run_grpo(config)
    overall = result.metrics["harness"]["overall"] or {}
    print(
        f"{result.adapter_dir.name}: {result.adapter_dir}\nmetrics: {result.output_dir / 'metrics.json'}\n"
        f"success {overall.get('success_rate', 0):.2f}, meta-action calls per episode "
        f"{overall.get('meta_calls_per_episode', 0):.2f}"
    )
    return 0


def _print_dry_run(config: Any, preset: Any) -> int:
    from .config import recipe_dict

    peft = config.peft_config()
    print(json.dumps(
        {
            "preset": preset.name,
            "recipe": recipe_dict(config),
            "peft": None if peft is None else {k: v for k, v in peft.to_dict().items() if v not in (None, {}, [])},
            "accelerate_config": preset.accelerate_config,
            "launch": preset.launch,
        },
        indent=2,
        default=lambda v: sorted(v) if isinstance(v, set) else str(v),
    ))
    return 0


def register(commands: Any) -> None:
    """Add ``export`` and ``train sft|grpo`` to the `evoharness` command."""
    export = commands.add_parser("export", help="turn traces into an SFT dataset (parquet or JSONL)",
                                 formatter_class=DefaultsHelpFormatter)
    export.add_argument("traces", help="a JSONL trace file or a folder of them")
    export.add_argument("--out", required=True, default=argparse.SUPPRESS, help="output folder (train and eval files)")
    export.add_argument("--format", choices=("parquet", "jsonl"), default="parquet", help="file format")
    export.add_argument("--all", action="store_true", help="keep failed episodes too")
    export.add_argument("--balance-positions", action="store_true",
                        help="give every call position as many rows as episodes reaching it")
    export.add_argument("--eval-fraction", type=fraction_below_one, default=0.1, help="share of episodes held out, in [0, 1)")
    export.add_argument("--seed", type=int, default=0, help="seed of the train/eval split")
    export.set_defaults(handler=_export)

    train = commands.add_parser(
        "train", help="harness fine-tuning (sft) and cost-aware RL (grpo)",
        description="Flags are TRL's (see `evoharness train sft --help`); --config FILE.yaml reads a recipe.",
    )
    phases = train.add_subparsers(dest="phase", metavar="PHASE", required=True, parser_class=_PassThrough)
    for phase, text in (("sft", "phase 1: fine-tuning on expert traces"), ("grpo", "phase 2: cost-aware GRPO in an environment")):
        sub = phases.add_parser(phase, help=text, add_help=False)
        sub.set_defaults(handler=partial(_train, phase))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the core `evoharness` command line (with these commands registered)."""
    from evoharness_bpe.lab.cli import main as core_main

    return core_main(argv)


if __name__ == "__main__":
    sys.exit(main())
