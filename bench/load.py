"""Load: N concurrent agents (scripted, one process each) on one shared experience store.

    python bench/load.py [--agents 8] [--steps 150] [--postgres DSN]

For SQLite (and PostgreSQL when a DSN is given), prints throughput and p50/p95 latency of each
meta-action with N agents, against one agent on the same store in the same run (the ratio
shows what contention costs). Start a throwaway server with scripts/postgres-test-server.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import tempfile
import time
import uuid
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from evoharness_bpe.testing.workloads import agent_session, open_store


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run(spec: tuple[str, ...], agents: int, steps: int) -> tuple[float, dict[str, list[float]]]:
    started = time.perf_counter()
    with ProcessPoolExecutor(agents, mp_context=mp.get_context("spawn")) as pool:
        results = list(pool.map(agent_session, [spec] * agents, [("load",)] * agents, range(agents), [steps] * agents))
    wall = time.perf_counter() - started
    merged: dict[str, list[float]] = {}
    for result in results:
        for name, values in result.items():
            merged.setdefault(name, []).extend(values)
    return wall, merged


def report(label: str, spec: tuple[str, ...], agents: int, steps: int) -> None:
    open_store(spec).close()
    base_wall, base = run(spec, 1, steps)
    wall, many = run(spec, agents, steps)
    calls = sum(len(v) for v in many.values())
    base_calls = sum(len(v) for v in base.values())
    print(f"\n{label}: {agents} agents × {steps} steps ({calls} meta-actions)")
    print(f"  throughput {calls / wall:,.0f} actions/s (1 agent: {base_calls / base_wall:,.0f}/s, "
          f"{(calls / wall) / (base_calls / base_wall):.2f}×)")
    for name in ("track", "commit", "recall", "note"):
        p50, p95 = percentile(many[name], 0.5) * 1000, percentile(many[name], 0.95) * 1000
        b95 = percentile(base[name], 0.95) * 1000
        print(f"  {name:<7} p50 {p50:7.2f} ms   p95 {p95:7.2f} ms   (1 agent p95 {b95:6.2f} ms, {p95 / b95:5.1f}×)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--agents", type=int, default=8)
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--postgres", metavar="DSN", help="also run against this PostgreSQL server")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        report("SQLite", ("sqlite", str(Path(tmp) / "load.db")), args.agents, args.steps)
    if args.postgres:
        table = "load_" + uuid.uuid4().hex[:8]
        report("PostgreSQL", ("postgres", args.postgres, table), args.agents, args.steps)
        store = open_store(("postgres", args.postgres, table))
        store._conn().execute(f"DROP TABLE {table}")
        store.close()


if __name__ == "__main__":
    main()
