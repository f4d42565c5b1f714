"""LlamaIndex integration benchmark: the harness's cost per agent step, and import time.

    python bench/llamaindex.py [--steps 30] [--repeat 15]

A FunctionAgent driven by a scripted LLM calls an ordinary tool `--steps` times; the same run is
timed plain (the baseline) and with `with_bpe`, each without and with a `TraceRecorder` (which
also consumes the event stream). The figures are CPU time of the process per model call (wall time on a shared
2-core machine swings by 2x between runs); read the ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time
from typing import Any

from evoharness_bpe import Workspace
from evoharness_bpe_llamaindex import TraceRecorder, with_bpe
from evoharness_bpe_llamaindex.testing import ScriptedLLM
from llama_index.core.agent.workflow import FunctionAgent


async def fetch(page: int) -> str:
    """Fetch one page of results."""
    return f"page {page}: 20 records"


def script(steps: int) -> list[Any]:
    return [[("fetch", {"page": i})] for i in range(steps)] + ["done"]


async def one_run(kind: str, steps: int) -> float:
    llm = ScriptedLLM(script(steps))
    agent = FunctionAgent(tools=[fetch], llm=llm, streaming=False)
    workspace = Workspace("Fetch every page", subgoals=["fetch pages"])
    if kind.startswith("bpe"):
        with_bpe(agent, workspace, window=12)
    started = time.process_time()
    if kind.endswith("+recorder"):
        recorder = TraceRecorder(workspace if kind.startswith("bpe") else None)
        await recorder.run(agent, user_msg="go", max_iterations=steps + 5)
    else:
        await agent.run(user_msg="go", max_iterations=steps + 5)
    return (time.process_time() - started) * 1000 / (steps + 1)


def import_ms(module: str) -> float:
    code = f"import time; t = time.perf_counter(); import {module}; print((time.perf_counter() - t) * 1000)"
    runs = [float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout) for _ in range(5)]
    return statistics.median(runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()

    asyncio.run(one_run("bpe+recorder", 3))  # warm up imports and caches
    kinds = ("plain", "bpe", "plain+recorder", "bpe+recorder")
    samples: dict[str, list[float]] = {kind: [] for kind in kinds}
    for _ in range(args.repeat):  # interleaved, so drift in machine load hits every variant alike
        for kind in kinds:
            samples[kind].append(asyncio.run(one_run(kind, args.steps)))
    results = {kind: statistics.median(values) for kind, values in samples.items()}
    base = results["plain"]
    print(f"{args.steps} tool steps, median of {args.repeat} interleaved runs, CPU time per model call:")
    for kind, ms in results.items():
        print(f"  {kind:<14} {ms:6.2f} ms   {ms / base:4.2f}x")
    lib = import_ms("llama_index.core.agent.workflow")
    ours = import_ms("evoharness_bpe_llamaindex")
    print(f"import llama_index.core.agent.workflow {lib:.0f} ms; import evoharness_bpe_llamaindex {ours:.0f} ms ({ours / lib:.2f}x)")


if __name__ == "__main__":
    main()
