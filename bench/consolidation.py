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

    slow = _slow_teacher

    def run(consolidator: ModelConsolidator | None) -> list[float]:
        store, times = consolidator.store if consolidator else MemoryExperienceStore(), []
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


def _slow_teacher(messages: list[dict[str, str]]) -> str:
    import time

    time.sleep(2.0)
    return '{"decisions": []}'


def agent_latency(runs: int = 10) -> None:
    """A whole agent run (three model calls, one note) with and without a 2 s teacher, both frameworks."""
    import asyncio
    import statistics
    import time

    def timed(run_once: Any) -> float:
        times = []
        for i in range(runs):
            start = time.perf_counter()
            run_once(i)
            times.append((time.perf_counter() - start) * 1000)
        return statistics.median(times)

    def langgraph(consolidator: ModelConsolidator | None, store: MemoryExperienceStore) -> float:
        from evoharness_bpe_langgraph import BPEMiddleware
        from evoharness_bpe_langgraph.testing import ScriptedChatModel, ai_tool_call
        from langchain.agents import create_agent
        from langchain_core.messages import HumanMessage


        def once(i: int) -> None:
            model = ScriptedChatModel(responses=[ai_tool_call("track", {"key": "k", "value": "v"}),
                                                 ai_tool_call("note", {"text": f"lesson {i}: check topic {i} first"}), "done"])
            mw = BPEMiddleware(store=store, namespace=NS, consolidator=consolidator)
            create_agent(model, [], middleware=[mw]).invoke({"messages": [HumanMessage(f"task {i}")]})

        return timed(once)

    def llamaindex(consolidator: ModelConsolidator | None, store: MemoryExperienceStore) -> float:
        from evoharness_bpe_llamaindex import with_bpe
        from evoharness_bpe_llamaindex.testing import ScriptedLLM
        from llama_index.core.agent.workflow import FunctionAgent


        def once(i: int) -> None:
            llm = ScriptedLLM([[("track", {"key": "k", "value": "v"})],
                               [("note", {"text": f"lesson {i}: check topic {i} first"})], "done"])
            agent = with_bpe(FunctionAgent(tools=[], llm=llm), store=store, namespace=NS, consolidator=consolidator)

            async def run() -> None:
                await agent.run(user_msg=f"task {i}")

            asyncio.run(run())

        return timed(once)

    for name, bench in (("create_agent + BPEMiddleware", langgraph), ("FunctionAgent + with_bpe", llamaindex)):
        try:
            bench(None, MemoryExperienceStore())  # warm-up: imports, first graph compile
        except ImportError:
            print(f"{name}: not installed, skipped")
            continue
        plain = bench(None, MemoryExperienceStore())
        store = MemoryExperienceStore()
        with ModelConsolidator(_slow_teacher, store, max_pending=10_000) as consolidator:
            teacher = bench(consolidator, store)
            pending = consolidator.pending()
            consolidator.close(wait=False)
        print(f"{name}, {runs} runs: p50 {plain:.1f} ms without a consolidator, {teacher:.1f} ms with a 2 s teacher "
              f"({teacher / plain:.2f}x; {pending} jobs still pending when the runs were done)")


def request_size() -> None:
    """Prompt tokens of one teacher request (approximate counter), by notes and related entries."""
    from evoharness_bpe.consolidator import build_request
    from evoharness_bpe.text import approx_tokens

    store = MemoryExperienceStore()
    for family in DATA["families"]:
        store.add(NS, ExperienceEntry(text=family["base"]))
    texts = [text for f in DATA["families"] for _, text in f["variants"]]
    for n in (1, 3, 10):
        ids = []
        for text in texts[:n]:
            entry = ExperienceEntry(text=text)
            store.add(("bench", "notes"), entry)
            ids.append(entry.id)
        messages, _, shown = build_request(_Joined(store), ("bench", "notes"), ids, related=5)
        tokens = sum(approx_tokens(m["content"]) for m in messages)
        print(f"request with {n} note(s) and {len(shown) - n} related entries: ~{tokens} prompt tokens (approximate counter)")
        for entry_id in ids:
            store.delete(("bench", "notes"), entry_id)


class _Joined:
    """The notes' namespace, searched in the stored lessons' namespace (request sizes only)."""

    def __init__(self, store: MemoryExperienceStore) -> None:
        self.store = store

    def get(self, ns: Any, entry_id: str) -> Any:
        return self.store.get(ns, entry_id)

    def search(self, ns: Any, text: str, k: int) -> Any:
        return self.store.search(NS, text, k=k)


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
    agent_latency()
    request_size()


if __name__ == "__main__":
    main()
