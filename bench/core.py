"""Core benchmark: act(), dashboard(), recall at 100k lessons, import time.

    python bench/core.py [--lessons 100000]

Each figure is printed with its target; recall is also compared with a naive linear scan of the
same lessons measured in the same run (timings on shared machines are noisy: read the ratios).
"""

from __future__ import annotations

import argparse
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from evoharness_bpe import ExperienceEntry, SQLiteExperienceStore, Workspace
from evoharness_bpe.experience import recall
from evoharness_bpe.text import terms

# Content words after stop-word removal follow Zipf's law: the word of rank r has weight 1/r,
# starting at rank 100 because the ranks above are stop words, which are never indexed.
VOCAB = [f"w{i}" for i in range(5000)]
WEIGHTS = [1 / (r + 100) for r in range(len(VOCAB))]


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def timed(fn, repeat: int) -> list[float]:
    out = []
    for i in range(repeat):
        t = time.perf_counter()
        fn(i)
        out.append((time.perf_counter() - t) * 1e6)
    return out


def sentence(rng: random.Random, n: int = 12) -> str:
    return " ".join(rng.choices(VOCAB, weights=WEIGHTS, k=n))


def bench_act() -> tuple[float, float]:
    ws = Workspace("benchmark", subgoals=[f"batch {i}" for i in range(50)])
    calls = [
        ("track", {"key": "api.rate_limit", "value": "5/s"}),
        ("commit", {"subgoal": "batch 3", "status": "doing"}),
        ("track", {"key": "page.next", "value": "17", "source": "legacy_export"}),
        ("commit", {"subgoal": "batch 3", "status": "todo"}),
    ]
    for i in range(2000):
        ws.act(*calls[i % 4])
    samples = timed(lambda i: ws.act(*calls[i % 4]), 20_000)
    return percentile(samples, 0.5), percentile(samples, 0.95)


def bench_dashboard(store: SQLiteExperienceStore) -> tuple[float, float]:
    ws = Workspace("Migrate the legacy CRM", store=store, namespace=("bench", "dash"))
    for i in range(1000):
        ws.act("track", {"key": f"fact.{i}", "value": f"value {i}"})
    for i in range(200):
        ws.act("commit", {"subgoal": f"batch {i}", "status": ["todo", "done", "failed", "doing"][i % 4], "note": "n"})
    ws.dashboard()
    warm = timed(lambda i: ws.dashboard(record=False), 2000)

    def cold(i: int) -> None:  # the active subgoal changes, so the experience hints are queried again
        ws._hint_cache = None
        ws.dashboard(record=False)

    return percentile(warm, 0.5), percentile(timed(cold, 500), 0.5)


def bench_recall(store: SQLiteExperienceStore, texts: list[str], rng: random.Random) -> dict[str, float]:
    ns = ("bench", "recall")
    queries = [sentence(rng, 4) for _ in range(300)]
    store_samples = timed(lambda i: recall(store, ns, queries[i % len(queries)], k=3), 1000)
    doc_terms = [set(terms(t)) for t in texts]

    def naive(i: int) -> None:
        q = set(terms(queries[i % len(queries)]))
        scored = [(len(q & d), j) for j, d in enumerate(doc_terms) if q & d]
        scored.sort(reverse=True)
        return scored[:3]

    naive_samples = timed(naive, 30)
    pruned_top = [[h.entry.id for h in recall(store, ns, q, k=3)] for q in queries]
    fraction = store._common_fraction
    store._common_fraction = 1.0  # the same store, searching with every query term (exact BM25)
    full_samples = timed(lambda i: recall(store, ns, queries[i % len(queries)], k=3), 300)
    full_top = [[h.entry.id for h in recall(store, ns, q, k=3)] for q in queries]
    store._common_fraction = fraction
    agreement = sum(len(set(a) & set(b)) for a, b in zip(pruned_top, full_top)) / sum(len(b) for b in full_top)
    return {
        "p50": percentile(store_samples, 0.5),
        "p95": percentile(store_samples, 0.95),
        "full_p50": percentile(full_samples, 0.5),
        "full_p95": percentile(full_samples, 0.95),
        "agreement": agreement,
        "naive_p50": percentile(naive_samples, 0.5),
    }


def bench_import() -> tuple[float, float]:
    def run(stmt: str) -> float:
        code = f"import time; t = time.perf_counter(); {stmt}; print((time.perf_counter() - t) * 1000)"
        runs = [float(subprocess.check_output([sys.executable, "-c", code], text=True)) for _ in range(7)]
        return statistics.median(runs)

    return run("import evoharness_bpe"), run("import pydantic; from pydantic import BaseModel")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lessons", type=int, default=100_000)
    parser.add_argument("--common-term-fraction", type=float, default=0.02)
    args = parser.parse_args()
    rng = random.Random(7)
    with tempfile.TemporaryDirectory() as tmp:
        store = SQLiteExperienceStore(Path(tmp) / "bench.db", common_term_fraction=args.common_term_fraction)
        texts = [sentence(rng) for _ in range(args.lessons)]
        t = time.perf_counter()
        with store.transaction():
            for text in texts:
                store.add(("bench", "recall"), ExperienceEntry(text=text))
            for text in texts[:10_000]:
                store.add(("bench", "dash"), ExperienceEntry(text=text))
        load_s = time.perf_counter() - t

        act50, act95 = bench_act()
        dash_warm, dash_cold = bench_dashboard(store)
        rec = bench_recall(store, texts, rng)
        imp, pyd = bench_import()
        store.close()

    rows = [
        ("act() p50", f"{act50:.1f} µs", "≤ 50 µs"),
        ("act() p95", f"{act95:.1f} µs", ""),
        ("dashboard() p50 (1,000 beliefs, 200 subgoals, 10k lessons)", f"{dash_warm:.0f} µs", "≤ 1,000 µs"),
        ("dashboard() p50, hints re-queried each time", f"{dash_cold:.0f} µs", ""),
        (f"recall p50 ({args.lessons:,} lessons, SQLite FTS5)", f"{rec['p50'] / 1000:.2f} ms", ""),
        (f"recall p95 ({args.lessons:,} lessons, SQLite FTS5)", f"{rec['p95'] / 1000:.2f} ms", "≤ 2 ms"),
        ("recall p50 / p95 without common-term pruning", f"{rec['full_p50'] / 1000:.2f} / {rec['full_p95'] / 1000:.2f} ms",
         f"top-3 agreement with pruning: {rec['agreement']:.0%}"),
        ("naive linear scan p50 (same lessons)", f"{rec['naive_p50'] / 1000:.1f} ms",
         f"recall is {rec['naive_p50'] / rec['p50']:.0f}× faster"),
        ("import evoharness_bpe (median of 7)", f"{imp:.0f} ms", f"≤ 100 ms; pydantic alone {pyd:.0f} ms ({imp / pyd:.2f}×)"),
        ("loading the lessons (one transaction)", f"{load_s:.1f} s", ""),
    ]
    width = max(len(r[0]) for r in rows)
    for name, value, note in rows:
        print(f"{name:<{width}}  {value:>10}  {note}")


if __name__ == "__main__":
    main()
