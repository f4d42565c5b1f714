"""Consolidation quality on labelled note streams: rule-based at `note` time, and the model path.

    python bench/consolidation.py

Each family of `bench/data/consolidation_streams.json` stores a base note, then writes its
variants, each labelled merge (the same lesson again), replace (other numbers, the opposite
claim) or add (new, even if it shares words). Reported per path: precision and recall of merge
and replace decisions, and the final store size against the labelled one.

Paths:
- ``rules``: `consolidate_note` alone (term overlap, numbers and negation as contradiction signals).
- ``model (scripted)``: the rules at `note` time, then `ModelConsolidator` with a scripted teacher
  that answers the labels; it measures what the pipeline (request, validation, idempotent apply)
  keeps of correct decisions, an upper bound for a real teacher. A real model runs the same way
  with ``ModelConsolidator(OpenAITeacher("MODEL", base_url), store)``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from evoharness_bpe import MemoryExperienceStore, ModelConsolidator, Workspace
from evoharness_bpe.experience import consolidate_note
from evoharness_bpe.stores.base import ExperienceEntry

DATA = json.loads((Path(__file__).parent / "data" / "consolidation_streams.json").read_text())
NS = ("bench",)


def _scores(pairs: list[tuple[str, str]], action: str) -> tuple[float, float]:
    predicted = [p for p in pairs if p[1] == action]
    labelled = [p for p in pairs if p[0] == action]
    hits = sum(1 for p in pairs if p == (action, action))
    precision = hits / len(predicted) if predicted else 1.0
    recall = hits / len(labelled) if labelled else 1.0
    return precision, recall


def _expected_size() -> int:
    return sum(1 + sum(1 for label, _ in f["variants"] if label == "add") for f in DATA["families"])


def rules() -> dict[str, Any]:
    store, pairs = MemoryExperienceStore(), []
    for family in DATA["families"]:
        base = ExperienceEntry(text=family["base"])
        store.add(NS, base)
        for label, text in family["variants"]:
            outcome = consolidate_note(store, NS, text)
            touched = outcome.action == "merged" and outcome.entry.id == base.id or base.id in outcome.replaced
            predicted = {"merged": "merge", "replaced": "replace", "added": "add"}[outcome.action]
            pairs.append((label, predicted if (predicted == "add" or touched) else f"{predicted}-wrong-target"))
            base = store.get(NS, outcome.entry.id) if base.id in outcome.replaced else base
    return {"pairs": pairs, "size": store.count(NS)}


def model_scripted() -> dict[str, Any]:
    store, pairs = MemoryExperienceStore(), []
    labels: dict[str, tuple[str, str]] = {}  # note text -> (label, base id)

    def teacher(messages: list[dict[str, str]]) -> str:
        payload = json.loads(messages[-1]["content"])
        decisions = []
        for note in payload["notes"]:
            label, base_id = labels.get(note["text"], ("add", ""))
            shown = {r["id"] for r in payload["related"]}
            if label == "merge" and base_id in shown:
                decisions.append({"op": "merge", "id": note["id"], "into": base_id})
            elif label == "replace" and base_id in shown:
                decisions.append({"op": "replace", "id": base_id, "by": note["id"]})
            else:
                decisions.append({"op": "keep", "id": note["id"]})
        return json.dumps({"decisions": decisions})

    with ModelConsolidator(teacher, store, related=8) as consolidator:
        for family in DATA["families"]:
            base = ExperienceEntry(text=family["base"])
            store.add(NS, base)
            for label, text in family["variants"]:
                labels[text] = (label, base.id)
                before = {e.id for e in store.list(NS, limit=10_000)}
                ws = Workspace("bench", store=store, namespace=NS, consolidator=consolidator)
                result = ws.act("note", {"text": text})
                ws.finish(success=True)
                consolidator.flush()
                after = {e.id for e in store.list(NS, limit=10_000)}
                if base.id not in after:
                    predicted = "replace"
                    base = next(e for e in store.list(NS, limit=10_000) if base.id in e.supersedes)
                elif after - before:
                    predicted = "add"
                else:
                    predicted = "merge"
                pairs.append((label, predicted))
                assert result.ok
    return {"pairs": pairs, "size": store.count(NS)}


def finish_latency(episodes: int = 20) -> None:
    """`finish` with a teacher that takes 2 s, against `finish` without a consolidator."""
    import statistics
    import time

    def slow(messages: list[dict[str, str]]) -> str:
        time.sleep(2.0)
        return '{"decisions": []}'

    def run(consolidator: ModelConsolidator | None) -> list[float]:
        store, times = MemoryExperienceStore(), []
        for i in range(episodes):
            ws = Workspace(f"task {i}", store=store, namespace=NS, consolidator=consolidator)
            ws.act("note", {"text": f"lesson {i}: check topic {i} before upload"})
            start = time.perf_counter()
            ws.finish(success=True)
            times.append((time.perf_counter() - start) * 1000)
        return times

    plain = run(None)
    with ModelConsolidator(slow, MemoryExperienceStore(), max_pending=10_000) as consolidator:
        with_teacher = run(consolidator)
        consolidator.close(wait=False)
    print(f"finish, {episodes} episodes: without consolidator p50 {statistics.median(plain):.2f} ms; "
          f"with a 2 s teacher p50 {statistics.median(with_teacher):.2f} ms, max {max(with_teacher):.2f} ms "
          f"({statistics.median(with_teacher) / max(statistics.median(plain), 1e-6):.2f}x)")


def main() -> None:
    expected = _expected_size()
    print(f"{len(DATA['families'])} families, {sum(len(f['variants']) for f in DATA['families'])} labelled notes, "
          f"labelled final size {expected}")
    print(f"{'path':<18} {'merge P':>8} {'merge R':>8} {'replace P':>10} {'replace R':>10} {'store size':>11}")
    for name, run in (("rules", rules), ("model (scripted)", model_scripted)):
        result = run()
        mp, mr = _scores(result["pairs"], "merge")
        rp, rr = _scores(result["pairs"], "replace")
        print(f"{name:<18} {mp:>8.2f} {mr:>8.2f} {rp:>10.2f} {rr:>10.2f} {result['size']:>11}")
        both = [p for p in result["pairs"] if p[1] in ("merge", "replace") or p[1].endswith("wrong-target")]
        precision = sum(1 for p in both if p[0] == p[1]) / len(both) if both else 1.0
        print(f"{'':<18} merge+replace precision {precision:.2f}")
    finish_latency()


if __name__ == "__main__":
    main()
