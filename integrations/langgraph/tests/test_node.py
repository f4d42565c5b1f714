"""`BPENode` and `bpe_tools` in a hand-built `StateGraph` over `MessagesState`."""

from __future__ import annotations

from evoharness_bpe import BPEState, MemoryExperienceStore
from evoharness_bpe_langgraph import BPEGraphState, BPENode, bpe_tools, with_dashboard
from evoharness_bpe_langgraph.testing import ScriptedChatModel, ai_tool_call
from langchain_core.messages import HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition


class State(MessagesState, BPEGraphState):
    pass


def _graph(model, lookup_tool, node: BPENode):
    tools = [lookup_tool]
    bound = model.bind_tools(bpe_tools(node) + tools)

    def call_model(state: State) -> dict:
        return {"messages": [bound.invoke(with_dashboard(state, state["messages"], "You plan trips."))]}

    graph = StateGraph(State)
    graph.add_node("bpe", node)
    graph.add_node("model", call_model)
    graph.add_node("tools", ToolNode(bpe_tools(node) + tools, wrap_tool_call=node.wrap_tool_call))
    graph.add_node("finish", node.finish)
    graph.add_edge(START, "bpe")
    graph.add_edge("bpe", "model")
    graph.add_conditional_edges("model", tools_condition, {"tools": "tools", END: "finish"})
    graph.add_edge("tools", "bpe")
    graph.add_edge("finish", END)
    return graph.compile(checkpointer=InMemorySaver())


def test_node_renders_dashboard_and_tools_update_state(lookup_tool) -> None:
    model = ScriptedChatModel(
        responses=[
            ai_tool_call("track", {"key": "budget", "value": "800 EUR"}),
            ai_tool_call("commit", {"subgoal": "book flight", "status": "done"}),
            ai_tool_call("commit", {"subgoal": "book flight", "status": "maybe"}),
            ai_tool_call("lookup", {"city": "Lisbon"}),
            "Trip planned.",
        ]
    )
    node = BPENode(subgoals=["book flight", "book hotel"], store=MemoryExperienceStore())
    app = _graph(model, lookup_tool, node)
    cfg = {"configurable": {"thread_id": "trip"}}
    out = app.invoke({"messages": [HumanMessage("Plan a trip to Lisbon")]}, cfg)

    assert model.calls[0][0].text.startswith("You plan trips.\n\n<bpe-dashboard")
    assert "800 EUR" in model.calls[1][0].text and "800 EUR" not in model.calls[0][0].text
    assert "1 done" in model.calls[2][0].text
    errors = [m for m in out["messages"] if isinstance(m, ToolMessage) and m.status == "error"]
    assert len(errors) == 1 and errors[0].name == "commit"
    assert "sunny in Lisbon" in model.calls[4][0].text
    state = BPEState.model_validate(out["bpe"])
    assert state.progress.goal == "Plan a trip to Lisbon"
    assert state.progress.subgoals["book-flight"].status == "done"
    assert state.belief.facts["tool:lookup:last"].value == "sunny in Lisbon"
    assert out["bpe_dashboard"].startswith("<bpe-dashboard")
    assert out["bpe_run"] == "trip"
    # checkpointed: the graph state holds the same BPE state
    assert app.get_state(cfg).values["bpe"] == out["bpe"]


def test_node_graph_runs_async(lookup_tool) -> None:
    import asyncio

    model = ScriptedChatModel(responses=[ai_tool_call("track", {"key": "k", "value": "v"}), ai_tool_call("lookup", {"city": "Rome"}), "ok"])
    node = BPENode()
    app = _graph(model, lookup_tool, node)
    out = asyncio.run(app.ainvoke({"messages": [HumanMessage("go")]}, {"configurable": {"thread_id": "a"}}))
    state = BPEState.model_validate(out["bpe"])
    assert set(state.belief.facts) == {"k", "tool:lookup:last"}
    assert "«k» = «v»" in model.calls[1][0].text


def test_node_graph_observes_a_raising_tool_in_the_trace(lookup_tool) -> None:
    import pytest
    from evoharness_bpe_langgraph import TraceCallbackHandler

    model = ScriptedChatModel(responses=[ai_tool_call("lookup", {"city": "Atlantis"}), "ok"])
    node = BPENode()
    app = _graph(model, lookup_tool, node)
    handler = TraceCallbackHandler(middleware=node)
    cfg = {"configurable": {"thread_id": "sunk"}, "callbacks": [handler]}
    with pytest.raises(ValueError, match="no such city"):
        app.invoke({"messages": [HumanMessage("Visit Atlantis")]}, cfg)
    (trace,) = handler.traces
    state = BPEState.model_validate(trace.metadata["bpe_state"])
    assert state.progress.goal == "Visit Atlantis"
    assert state.belief.facts["tool:lookup:error"].value == "ValueError: no such city"
    assert list(state.progress.exceptions) == ["tool:lookup"]
    # the checkpoint holds the state before the failed node: LangGraph drops a raising node's writes
    assert "tool:lookup:error" not in app.get_state(cfg).values["bpe"]["belief"]["facts"]
