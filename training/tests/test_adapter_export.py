"""`evoharness export-adapter`: a reproduction's adapter copied with a card that names no local path."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pytest

from evoharness_bpe.exceptions import UserError


def _run_folder(root: Path, save_tiny_adapter, **settings) -> Path:
    """A run folder as `evoharness reproduce` leaves it after SFT: config, marker, the SFT adapter."""
    from evoharness_bpe_training.reproduce_config import load_reproduce_preset

    config = load_reproduce_preset("cpu", out=str(root), **settings)
    root.mkdir(parents=True)
    (root / "config.json").write_text(json.dumps(asdict(config)))
    (root / "stages").mkdir()
    (root / "stages" / "sft-train.json").write_text(json.dumps({"result": {}, "wall_s": 1.0}))
    save_tiny_adapter(root / "sft" / "model", config, "sft")
    return root


def test_export_copies_the_weights_names_the_hub_base_and_no_local_path(tmp_path: Path, save_tiny_adapter) -> None:
    from evoharness_bpe.lab.policies.adapter import read_adapter_card
    from evoharness_bpe_training.adapter_export import export_adapter
    from evoharness_bpe_training.reproduce_config import load_reproduce_preset, reproduce_command

    run = _run_folder(tmp_path / "machine" / "run7", save_tiny_adapter, lam=0.1)
    dest = export_adapter(run, tmp_path / "shared", stage="sft", name="runs/mine")
    assert sorted(p.name for p in dest.iterdir()) == ["adapter_config.json", "adapter_model.safetensors", "evoharness.json"]
    source = run / "sft" / "model"
    assert (dest / "adapter_model.safetensors").read_bytes() == (source / "adapter_model.safetensors").read_bytes()
    lora, saved = (json.loads((folder / "adapter_config.json").read_text()) for folder in (dest, source))
    assert lora["base_model_name_or_path"] == "HuggingFaceTB/SmolLM2-135M-Instruct" != saved["base_model_name_or_path"]
    assert lora["target_modules"] == sorted(saved["target_modules"])
    assert {k: v for k, v in lora.items() if k not in ("base_model_name_or_path", "target_modules")} == \
        {k: v for k, v in saved.items() if k not in ("base_model_name_or_path", "target_modules")}
    card, run_card = read_adapter_card(dest), read_adapter_card(source)
    assert (card["episode"], card["policy"], card["base"]) == (run_card["episode"], run_card["policy"], run_card["base"])
    produced = card["produced_by"]
    assert str(tmp_path) not in json.dumps(card) and produced["config"]["out"] == "runs/mine"
    assert produced["stage"] == "sft" and produced["config"]["lam"] == 0.1  # the run's own config
    assert produced["command"] == reproduce_command(load_reproduce_preset("cpu", out="runs/mine", lam=0.1))


def test_a_preset_card_needs_the_stage_trained_with_the_presets_settings(tmp_path: Path, save_tiny_adapter) -> None:
    from evoharness_bpe_training.adapter_export import export_adapter
    from evoharness_bpe_training.reproduce_config import load_reproduce_preset, reproduce_command

    grpo_only = _run_folder(tmp_path / "a", save_tiny_adapter, lam=0.1)  # the SFT stage is the preset's
    card = json.loads((export_adapter(grpo_only, tmp_path / "out-a", stage="sft", preset="cpu") / "evoharness.json").read_text())
    preset = load_reproduce_preset("cpu", out="runs/miniature")
    assert card["produced_by"]["config"] == asdict(preset) and card["produced_by"]["command"] == reproduce_command(preset)
    other_sft = _run_folder(tmp_path / "b", save_tiny_adapter, sft_learning_rate=0.001)
    with pytest.raises(UserError, match="trained sft-train with other settings"):
        export_adapter(other_sft, tmp_path / "out-b", stage="sft", preset="cpu")
    assert not (tmp_path / "out-b").exists()


def test_export_refuses_an_unfinished_stage_and_a_folder_of_other_files(tmp_path: Path, save_tiny_adapter) -> None:
    from evoharness_bpe_training.adapter_export import export_adapter

    run = _run_folder(tmp_path / "run", save_tiny_adapter)
    with pytest.raises(UserError, match="grpo-train stage has not finished"):
        export_adapter(run, tmp_path / "out")
    with pytest.raises(UserError, match="no run there"):
        export_adapter(tmp_path / "nothing", tmp_path / "out", stage="sft")
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine")
    with pytest.raises(UserError, match=r"holds other files \(notes.txt\)"):
        export_adapter(run, busy, stage="sft")
    assert sorted(p.name for p in busy.iterdir()) == ["notes.txt"]
    again = export_adapter(run, tmp_path / "out", stage="sft")
    (again / "README.md").write_text("# my adapter\n")
    export_adapter(run, again, stage="sft")  # an earlier export is written over, its README kept
    assert (again / "README.md").read_text() == "# my adapter\n"


def test_the_command_exports_and_says_how_to_play_it(tmp_path: Path, save_tiny_adapter, capsys) -> None:
    from evoharness_bpe_training.cli import main

    run = _run_folder(tmp_path / "run", save_tiny_adapter)
    assert main(["export-adapter", str(run), str(tmp_path / "out"), "--stage", "sft"]) == 0
    printed = capsys.readouterr().out
    assert f"--adapter {tmp_path / 'out'}" in printed and (tmp_path / "out" / "evoharness.json").exists()
    assert main(["export-adapter", str(run), str(tmp_path / "out2")]) != 0  # no GRPO stage: an error, not a traceback
    assert "grpo-train stage has not finished" in capsys.readouterr().err
