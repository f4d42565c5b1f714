"""The model consolidator's decisions dataset trains the policy with run_sft (tiny model).

Both modes write it: the background worker and the offline batch over traces (whose rows carry
an ``episode_id`` column too).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evoharness_bpe import MemoryExperienceStore, ModelConsolidator, Workspace
from evoharness_bpe.consolidator import consolidate_traces

TOPICS = ("phone formats", "rate limits", "weekend maintenance")


def teacher(messages: list[dict[str, str]]) -> str:
    notes = json.loads(messages[-1]["content"])["notes"]
    return json.dumps({"decisions": [{"op": "keep", "id": n["id"]} for n in notes]})


def _live(tmp_path: Path) -> Path:
    store, path = MemoryExperienceStore(), tmp_path / "decisions.jsonl"
    with ModelConsolidator(teacher, store, dataset=path) as consolidator:
        for topic in TOPICS:
            ws = Workspace(f"Migrate ({topic})", store=store, namespace=("acme",), consolidator=consolidator)
            ws.act("note", {"text": f"Check {topic} before the upload"})
            ws.finish(success=True)
        assert consolidator.flush(timeout=60)
    return path


def _batch(tmp_path: Path) -> Path:
    traces = []
    for topic in TOPICS:
        ws = Workspace(f"Migrate ({topic})")
        ws.act("note", {"text": f"Check {topic} before the upload"})
        ws.finish(success=True)
        traces.append(ws.trace())
    return consolidate_traces(traces, teacher, tmp_path / "batch").dataset


@pytest.mark.parametrize("write", [_live, _batch], ids=["background", "batch"])
def test_the_consolidation_dataset_trains_with_run_sft(write, tmp_path: Path, tiny_dir: Path) -> None:
    from datasets import load_dataset

    from evoharness_bpe_training.models import load_model_and_tokenizer
    from evoharness_bpe_training.presets import get_preset
    from evoharness_bpe_training.sft import run_sft

    path = write(tmp_path)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(rows) == 3 and all(r["completion"][0]["role"] == "assistant" for r in rows)

    dataset = load_dataset("json", data_files=str(path))["train"]
    config = get_preset("tiny").sft_config(output_dir=str(tmp_path / "sft"), max_steps=1, max_length=4096)
    model, tokenizer = load_model_and_tokenizer("tiny", cache_dir=tiny_dir)
    result = run_sft(config, dataset=dataset, model=model, tokenizer=tokenizer)
    assert (result.adapter_dir / "adapter_config.json").exists()
    assert json.loads((result.output_dir / "metrics.json").read_text())["train_loss"] > 0
