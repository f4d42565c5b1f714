"""What refusing hostile input costs: 50 MB arguments, 10,000-level nesting, 50 MB tool results.

    python bench/hardening.py [--mb 50] [--repeat 5]

Each case is timed (best of `--repeat`) and its peak extra memory measured with tracemalloc
(in a separate call, since tracing slows Python down), next to a baseline in the same process:
one ordinary ``track`` call. Targets (docs/reliability.md): refusing a 50 MB argument takes
under 50 ms and under 100 MB; the recorded copy and the trace line stay small.
"""

from __future__ import annotations

import argparse
import json
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

from evoharness_bpe import MemoryExperienceStore, Workspace


def _nested(levels: int) -> Any:
    value: Any = "x"
    for i in range(levels):
        value = {"a": value} if i % 2 else [value]
    return value


def _cases(mb: int) -> list[tuple[str, str, Callable[[], Any]]]:
    size = mb * 1_000_000
    return [
        ("baseline: track, small dict", "track", lambda: {"key": "k", "value": "v"}),
        (f"note, {mb} MB JSON string", "note", lambda: json.dumps({"text": "A" * size})),
        (f"note, {mb} MB string in a dict", "note", lambda: {"text": "A" * size}),
        (f"note, {mb // 10}M tags in a dict", "note", lambda: {"text": "t", "tags": ["t"] * (size // 10)}),
        ("track, 10,000 levels deep dict", "track", lambda: {"key": "k", "value": _nested(10_000)}),
        ("recall, 9,000 levels deep JSON", "recall", lambda: '{"query":' + "[" * 9_000 + "]" * 9_000 + "}"),
        (f"observe, {mb} MB tool result", "observe", lambda: {"rows": "r" * size}),
    ]


def _call(ws: Workspace, name: str, args: Any) -> None:
    if name == "observe":
        ws.observe("export", result=args)
    else:
        ws.act(name, args)


def measure(name: str, make: Callable[[], Any], repeat: int) -> tuple[float, float, int]:
    """Best wall time (ms), peak extra memory (MB), recorded size (characters)."""
    best = float("inf")
    recorded = 0
    for _ in range(repeat):
        ws = Workspace("bench", store=MemoryExperienceStore())
        args = make()
        started = time.perf_counter()
        _call(ws, name, args)
        best = min(best, (time.perf_counter() - started) * 1000)
        recorded = len(ws.trace().model_dump_json())
        del args
    ws = Workspace("bench", store=MemoryExperienceStore())
    args = make()
    tracemalloc.start()
    _call(ws, name, args)
    peak = tracemalloc.get_traced_memory()[1] / 1e6
    tracemalloc.stop()
    return best, peak, recorded


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=50, help="size of the oversized inputs in MB")
    parser.add_argument("--repeat", type=int, default=5, help="timed runs per case (best is kept)")
    options = parser.parse_args()
    rows = []
    for label, name, make in _cases(options.mb):
        rows.append((label, *measure(name, make, options.repeat)))
    base_ms = rows[0][1]
    print(f"{'case':36} {'time ms':>9} {'× baseline':>11} {'peak MB':>9} {'trace chars':>12}")
    for label, ms, peak, recorded in rows:
        print(f"{label:36} {ms:9.2f} {ms / base_ms:11.1f} {peak:9.2f} {recorded:12,}")


if __name__ == "__main__":
    main()
