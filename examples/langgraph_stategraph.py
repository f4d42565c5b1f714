"""A hand-built LangGraph `StateGraph` with `BPENode`, the meta-action tools and a `ToolNode`.

    python examples/langgraph_stategraph.py                   # offline, scripted model
    OPENAI_BASE_URL=http://localhost:8000/v1 OPENAI_MODEL=qwen3 python examples/langgraph_stategraph.py

The graph runs bpe → model → tools → bpe …; `BPENode` renders the dashboard into the state
before each model call, and the model node puts it into its system message. The real-model path
caps replies and calls as `evoharness_bpe.endpoint.EndpointSettings.from_env` says
(``OPENAI_MAX_TOKENS``, ``OPENAI_TIMEOUT``); a run whose model call fails or returns nothing exits
with status 1.
"""

from __future__ import annotations

import os
import sys

from evoharness_bpe.endpoint import EndpointSettings
from evoharness_bpe.exceptions import ModelCallError
from evoharness_bpe_langgraph import BPEGraphState, BPENode, bpe_tools, with_dashboard
from evoharness_bpe_langgraph.testing import ScriptedChatModel, ai_tool_call
from langchain_core.messages import HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

PRICES = {"flight": 420, "hotel": 310}


@tool
def quote(item: str) -> str:
    """Get the price of a flight or a hotel in EUR."""
    return f"{item}: {PRICES[item]} EUR" if item in PRICES else f"error: unknown item {item}"


class State(MessagesState, BPEGraphState):
    pass


def model_for_this_run():
    if os.environ.get("OPENAI_BASE_URL"):
        try:
            from langchain_openai import ChatOpenAI
        except ImportError as exc:  # pragma: no cover - optional
            raise SystemExit("a real model needs: pip install 'evoharness-bpe-langgraph[openai]'") from exc
        return ChatOpenAI(**EndpointSettings.from_env().langchain_kwargs())
    return ScriptedChatModel(
        responses=[
            ai_tool_call("quote", {"item": "flight"}),
            ai_tool_call("track", {"key": "budget.left", "value": "380 EUR after the flight"}),
            ai_tool_call("commit", {"subgoal": "price flight", "status": "done"}),
            ai_tool_call("quote", {"item": "hotel"}),
            ai_tool_call("commit", {"subgoal": "price hotel", "status": "done"}),
            "Flight 420 EUR and hotel 310 EUR: 730 EUR, within the 800 EUR budget.",
        ]
    )


def build(model, bpe: BPENode):
    tools = [quote]
    bound = model.bind_tools(bpe_tools(bpe) + tools)

    def call_model(state: State) -> dict:
        return {"messages": [bound.invoke(with_dashboard(state, state["messages"], "You plan trips on a budget."))]}

    graph = StateGraph(State)
    graph.add_node("bpe", bpe)
    graph.add_node("model", call_model)
    graph.add_node("tools", ToolNode(bpe_tools(bpe) + tools, wrap_tool_call=bpe.wrap_tool_call))
    graph.add_edge(START, "bpe")
    graph.add_edge("bpe", "model")
    graph.add_conditional_edges("model", tools_condition)
    graph.add_edge("tools", "bpe")
    return graph.compile(checkpointer=InMemorySaver())


def main() -> int:
    bpe = BPENode(subgoals=["price flight", "price hotel"])
    app = build(model_for_this_run(), bpe)
    out = app.invoke({"messages": [HumanMessage("Price a Lisbon trip within 800 EUR")]}, {"configurable": {"thread_id": "trip"}})
    last = out["messages"][-1]
    if not (str(last.content).strip() or getattr(last, "tool_calls", None)):
        raise ModelCallError("the model returned an empty reply (no text, no tool call)")
    print("--- answer:", last.content)
    print("--- last dashboard:")
    print(out["bpe_dashboard"])
    progress = out["bpe"]["progress"]["subgoals"]
    print("--- subgoals:", ", ".join(f"{k}={v['status']}" for k, v in progress.items()))
    return 0


def cli() -> int:
    """`main` as a command: status 1, and the reason on stderr, when a model call failed."""
    try:
        return main()
    except Exception as exc:  # a refused, timed-out or empty model call lands here
        print(f"run failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(cli())
