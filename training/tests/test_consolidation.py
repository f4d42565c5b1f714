"""Consolidation pairs from the batch consolidator, split into a train/eval `DatasetDict`."""

from __future__ import annotations

import json

import pytest

from evoharness_bpe import Workspace
from evoharness_bpe.exceptions import UserError
from evoharness_bpe_training.consolidation import consolidation_dataset


def _trace_with_notes(n: int):
    ws = Workspace("Migrate records")
    for text in ["Batch uploads above 5 per second hit 429", "Phone numbers need a country code"][:n]:
        ws.act("note", {"text": text, "kind": "pitfall"})
    ws.finish(True)
    return ws.trace()


def _keep(messages):
    notes = json.loads(messages[-1]["content"])["notes"]
    return json.dumps({"decisions": [{"op": "keep", "id": n["id"]} for n in notes]})


def test_pairs_become_a_split_dataset(tmp_path, workspace_trace) -> None:
    traces = [_trace_with_notes(2), _trace_with_notes(1), workspace_trace]  # the last has no notes
    ds = consolidation_dataset(traces, _keep, out_dir=tmp_path, eval_fraction=0.5)
    rows = [*ds["train"], *ds["eval"]]
    assert len(rows) == 2 and len(ds["eval"]) == 1
    assert sorted(len(json.loads(r["completion"][0]["content"])["decisions"]) for r in rows) == [1, 2]
    assert rows[0]["prompt"][0]["role"] == "system" and '"notes"' in rows[0]["prompt"][1]["content"]
    assert {r["episode_id"] for r in rows} == {traces[0].episode_id, traces[1].episode_id}
    with pytest.raises(UserError, match="no trace wrote any note"):
        consolidation_dataset([workspace_trace], _keep, out_dir=tmp_path / "empty")
