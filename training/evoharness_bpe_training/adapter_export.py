"""Export a reproduction's LoRA adapter: the folder to share, or to ship with this package.

    evoharness export-adapter runs/miniature adapters/mine                 # its GRPO adapter
    evoharness export-adapter runs/miniature adapters/mine --stage sft     # its SFT adapter
    evoharness export-adapter runs/BI adapters/smollm2-crm --preset cpu    # the card states the cpu preset

The export holds the adapter's weights, its LoRA config with the base model named by its hub id
(a run's names the local folder it loaded), and the adapter card (``evoharness.json``: base model,
episode settings, prompt format, and the command and config that made it, with ``out`` set to
`--name`, not the machine's path). With ``--preset`` the card states that preset's config and
command, and the export is refused unless the run trained the stage with the preset's settings
(`shared_stages`): a fork chain of the preset's own runs qualifies, a run with another learning
rate does not.
"""

from __future__ import annotations

import argparse
import json
import shutil
from dataclasses import asdict
from pathlib import Path
from typing import Any

from evoharness_bpe.exceptions import UserError

from .reproduce import adapter_provenance
from .reproduce_config import PRESETS, ReproduceConfig, fork_config, load_reproduce_preset, shared_stages

__all__ = ["export_adapter", "HUB_IDS", "STAGE_MODELS", "register"]

HUB_IDS: dict[str, str] = {"smollm2-135m": "HuggingFaceTB/SmolLM2-135M-Instruct", "smollm2": "HuggingFaceTB/SmolLM2-135M-Instruct"}
"""The hub id of each base model the reproduction loads from a local copy."""

STAGE_MODELS: dict[str, tuple[str, str]] = {"sft": ("sft-train", "sft/model"), "grpo": ("grpo-train", "grpo/model")}
"""Stage name on the card → (the training stage that saves it, its folder in the run)."""

_KEPT = {"adapter_model.safetensors", "adapter_config.json", "evoharness.json", "README.md"}
"""What a folder exported before may hold (its README.md is left as it is)."""


def export_adapter(run: str | Path, dest: str | Path, *, stage: str = "grpo", preset: str | None = None,
                   name: str = "runs/miniature") -> Path:
    """Copy `stage`'s adapter of the reproduction in `run` to `dest` with its card; returns `dest`."""
    from evoharness_bpe.lab.policies.adapter import ADAPTER_CARD, read_adapter_card  # the policies package: 0.25 s to import

    if stage not in STAGE_MODELS:
        raise UserError(f"--stage takes {' or '.join(STAGE_MODELS)}, not {stage!r}")
    run, dest = Path(run), Path(dest)
    trained_by, model = STAGE_MODELS[stage]
    config = ReproduceConfig(**{**fork_config(run), "out": name})
    if not (run / "stages" / f"{trained_by}.json").exists():
        raise UserError(f"{run}: its {trained_by} stage has not finished (no stages/{trained_by}.json); nothing to export")
    source = run / model
    card = read_adapter_card(source)
    if preset is not None:
        wanted = load_reproduce_preset(preset, out=name)
        if trained_by not in shared_stages(asdict(config), asdict(wanted)):
            raise UserError(f"--preset {preset}: {run} trained {trained_by} with other settings than the preset; "
                            "export it without --preset (its card then states the run's own config)")
        config = wanted
    if dest.exists():
        strangers = sorted(p.name for p in dest.iterdir() if p.name not in _KEPT)
        if strangers:
            raise UserError(f"{dest} holds other files ({', '.join(strangers[:5])}): export into an empty or new folder")
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source / "adapter_model.safetensors", dest / "adapter_model.safetensors")
    lora = json.loads((source / "adapter_config.json").read_text("utf-8"))
    lora["base_model_name_or_path"] = HUB_IDS.get(str(card.get("base")), lora.get("base_model_name_or_path"))
    if isinstance(lora.get("target_modules"), list):  # PEFT saves a set, in no fixed order: sorted, an export is repeatable
        lora["target_modules"] = sorted(lora["target_modules"])
    (dest / "adapter_config.json").write_text(json.dumps(lora, indent=2, sort_keys=True) + "\n", "utf-8")
    card["produced_by"] = adapter_provenance(config, stage)
    (dest / ADAPTER_CARD).write_text(json.dumps(card, indent=2), "utf-8")
    return dest


# -- command line ---------------------------------------------------------------------------
def register(commands: Any) -> None:
    """Add ``evoharness export-adapter`` to the CLI's sub-parsers."""
    parser = commands.add_parser("export-adapter", help="copy a reproduction's LoRA adapter and its card to a folder to share",
                                 description="Copies the adapter's weights, its LoRA config with the base model named by its hub id, "
                                             "and its card, whose command and config name --name as the run's --out.")
    parser.add_argument("run", help="the run folder of `evoharness reproduce --out`")
    parser.add_argument("dest", help="the folder to write (new, or an earlier export)")
    parser.add_argument("--stage", choices=tuple(STAGE_MODELS), default="grpo", help="which stage's adapter (default: grpo)")
    parser.add_argument("--preset", choices=PRESETS, default=None,
                        help="state this preset's config and command on the card (refused unless the run trained the stage with its settings)")
    parser.add_argument("--name", default="runs/miniature", help="the --out the card's command names (default: runs/miniature)")
    parser.set_defaults(handler=_main)


def _main(args: argparse.Namespace) -> int:
    dest = export_adapter(args.run, args.dest, stage=args.stage, preset=args.preset, name=args.name)
    size = sum(p.stat().st_size for p in dest.iterdir() if p.is_file())
    print(f"{dest}: {args.stage} adapter of {args.run} ({size / 2**20:.1f} MB); play it with "
          f"evoharness run --policy trained --adapter {dest}")
    return 0
