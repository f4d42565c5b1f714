"""A LlamaIndex FunctionAgent with the BPE harness: a workspace per run, experience, one trace per run.

    python examples/llamaindex_function_agent.py                      # offline, a scripted model
    OPENAI_BASE_URL=http://localhost:8000/v1 OPENAI_MODEL=Qwen/Qwen3-8B \
        python examples/llamaindex_function_agent.py                  # any OpenAI-compatible server

The real-model path needs ``pip install "evoharness-bpe-llamaindex[openai]"``; it sends at most
``OPENAI_MAX_TOKENS`` (512) tokens per reply, waits at most ``OPENAI_TIMEOUT`` (60) seconds per
call, sends ``tool_choice="auto"`` and does not stream (several local servers refuse streaming
with tools); see `evoharness_bpe.endpoint.EndpointSettings` for the other settings. A run whose model
call fails or returns nothing, or that does not reserve the units, exits with status 1. Run it
twice: the lesson the agent notes in the first run is shown to it as a hint in the second.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

from evoharness_bpe import SQLiteExperienceStore, Trace
from evoharness_bpe.endpoint import EndpointSettings
from evoharness_bpe.exceptions import EvoHarnessError, UserError
from evoharness_bpe_llamaindex import BPETraceHandler, with_bpe
from evoharness_bpe_llamaindex.testing import ScriptedLLM
from llama_index.core.agent.workflow import FunctionAgent

TASK = "Reserve 3 units of SKU-42 for order 1001"
STOCK = {"SKU-42": 5}
RESERVED: dict[str, int] = {}


async def check_stock(sku: str) -> str:
    """How many units of a SKU are in stock."""
    if sku not in STOCK:
        raise KeyError(f"unknown SKU {sku!r}")
    return f"{STOCK[sku]} units of {sku} in stock"


async def reserve(sku: str, quantity: int, order: str) -> str:
    """Reserve units of a SKU for an order."""
    if quantity > STOCK.get(sku, 0):
        raise ValueError(f"only {STOCK.get(sku, 0)} units of {sku} left")
    STOCK[sku] -= quantity
    RESERVED[order] = RESERVED.get(order, 0) + quantity
    return f"reserved {quantity} x {sku} for order {order}"


SCRIPT: list[Any] = [
    [("recall", {"query": "reserve stock order"}), ("commit", {"subgoal": "check stock", "status": "doing"})],
    [("check_stock", {"sku": "SKU-42"})],
    [("track", {"key": "stock.SKU-42", "value": "5 units", "source": "check_stock"}),
     ("commit", {"subgoal": "check stock", "status": "done"})],
    [("reserve", {"sku": "SKU-42", "quantity": 3, "order": "1001"})],
    [("commit", {"subgoal": "reserve units", "status": "done", "note": "3 reserved"}),
     ("note", {"text": "Check stock before reserving: reserve fails when the quantity exceeds stock",
               "kind": "procedure", "tags": ["inventory"]})],
    "Reserved 3 units of SKU-42 for order 1001.",
]


def make_llm() -> Any:
    """A real model when OPENAI_BASE_URL is set, otherwise the scripted one."""
    base_url = os.environ.get("OPENAI_BASE_URL")
    if not base_url:
        return ScriptedLLM(SCRIPT)
    try:
        from llama_index.llms.openai_like import OpenAILike
    except ImportError as exc:
        raise UserError('a real model needs: pip install "evoharness-bpe-llamaindex[openai]"') from exc
    return OpenAILike(**EndpointSettings.from_env().llamaindex_kwargs())


async def run(out_dir: Path) -> Trace:
    """One run of the task; returns its trace (also appended to ``out_dir/traces.jsonl``)."""
    STOCK.update({"SKU-42": 5})
    RESERVED.clear()
    out_dir.mkdir(parents=True, exist_ok=True)
    store = SQLiteExperienceStore(out_dir / "experience.db")
    traces = BPETraceHandler(out_dir / "traces.jsonl", env="inventory")
    try:
        agent = with_bpe(
            FunctionAgent(
                tools=[check_stock, reserve],
                llm=make_llm(),
                system_prompt="You are an inventory assistant.",
                streaming=False,
            ),
            store=store,
            namespace=("example", "inventory"),
            subgoals=["check stock", "reserve units"],
            trace=traces,
        )
        try:
            result = await agent.run(user_msg=TASK, max_iterations=20)
        finally:
            traces.close()
        trace = traces.last
        assert trace is not None  # every run that started hands over its trace
        print(f"agent: {result}\n")
        final = trace.dashboards[-1].text if trace.dashboards else ""
        print(final)
        print(f"\n{len(trace.model_calls)} model calls, {trace.ledger.meta_action_calls} meta-actions, "
              f"{trace.ledger.harness_tokens} harness tokens. Trace: {traces.path}")
        if not str(result).strip():
            raise EvoHarnessError("the agent finished without an answer")
        if RESERVED.get("1001") != 3:
            raise EvoHarnessError("the units were not reserved")
        return trace
    finally:
        store.close()


def main(argv: list[str] | None = None) -> Path:
    """Run once; returns the traces file. A failed run raises."""
    args = sys.argv[1:] if argv is None else argv
    out_dir = Path(args[0]) if args else Path("runs/llamaindex-example")
    asyncio.run(run(out_dir))
    return out_dir / "traces.jsonl"


def cli(argv: list[str] | None = None) -> int:
    """`main` as a command: status 0 on success, 1 (and the reason on stderr) on failure."""
    try:
        main(argv)
    except Exception as exc:  # a model call that failed or returned nothing lands here too
        print(f"run failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(cli())
