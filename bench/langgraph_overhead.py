"""Overhead of `BPEMiddleware` on a LangChain `create_agent` run, against plain and TodoList.

    python bench/langgraph_overhead.py [--steps 30] [--rounds 40]

The same scripted agent (one ordinary tool call per step, then a final answer) runs plain, with
LangChain's `TodoListMiddleware`, and with `BPEMiddleware`, interleaved round by round in one
process; each variant's agent is compiled once. Prints per-step times (median over rounds) and
the ratios to plain: wall-clock median and minimum, and process CPU time (all threads), which
other processes on a shared machine disturb least. Target: BPE ≤ 1.10× plain.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time

from evoharness_bpe_langgraph import BPEMiddleware
from evoharness_bpe_langgraph.testing import ScriptedChatModel, ai_tool_call
from langchain.agents import create_agent
from langchain.agents.middleware import TodoListMiddleware
from langchain_core.messages import HumanMessage
from langchain_core.tools import tool


@tool
def fetch(page: int) -> str:
    """Fetch one page of records."""
    return f"page {page}: 50 records, next page {page + 1}"


def build(variant: str, steps: int):
    model = ScriptedChatModel(responses=[ai_tool_call("fetch", {"page": i}) for i in range(steps)], final="All pages fetched.")
    middleware = {"plain": [], "todo": [TodoListMiddleware()], "bpe": [BPEMiddleware(subgoals=["fetch pages", "report"])]}[variant]
    return create_agent(model, [fetch], system_prompt="You fetch records page by page.", middleware=middleware), model


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=40)
    args = parser.parse_args()
    variants = ["plain", "todo", "bpe"]
    agents = {v: build(v, args.steps) for v in variants}
    inputs = {"messages": [HumanMessage("Fetch every page of the customer export")]}
    limit = {"recursion_limit": 4 * args.steps + 20}
    for agent, model in agents.values():  # warm-up
        model.reset()
        agent.invoke(inputs, limit)
    per_step: dict[str, list[float]] = {v: [] for v in variants}
    cpu_step: dict[str, list[float]] = {v: [] for v in variants}
    for r in range(args.rounds):
        order = variants[r % 3 :] + variants[: r % 3]
        for variant in order:
            agent, model = agents[variant]
            model.reset()
            gc.collect()
            started, cpu = time.perf_counter(), time.process_time()
            out = agent.invoke(inputs, limit)
            per_step[variant].append((time.perf_counter() - started) * 1000 / args.steps)
            cpu_step[variant].append((time.process_time() - cpu) * 1000 / args.steps)
            assert len(model.calls) == args.steps + 1 and out["messages"][-1].content == "All pages fetched."
    print(f"{args.steps}-step scripted agent, {args.rounds} interleaved rounds, ms per step")
    print("  variant   wall median  wall min  ratio(median)  ratio(min)  cpu median  ratio(cpu)")
    plain = statistics.median(per_step["plain"])
    plain_min = min(per_step["plain"])
    plain_cpu = statistics.median(cpu_step["plain"])
    for variant in variants:
        med, low, cpu = statistics.median(per_step[variant]), min(per_step[variant]), statistics.median(cpu_step[variant])
        print(
            f"  {variant:7s} {med:11.3f} {low:9.3f} {med / plain:13.2f}x {low / plain_min:10.2f}x"
            f" {cpu:11.3f} {cpu / plain_cpu:10.2f}x"
        )


if __name__ == "__main__":
    main()
