"""The async paths never block the event loop on store I/O.

The store is wrapped in `LoopGuardStore`, which refuses any call made on a thread that runs an
event loop; the agents run through the real `create_agent(...).ainvoke` and a hand-built
`StateGraph` under ``ainvoke``, with recall and note (store reads and writes), dashboards with
experience hints (a store search per model call), a malformed recall answered by the middleware,
and the episode's end (crediting recalled lessons).
"""

from __future__ import annotations

import asyncio

from evoharness_bpe import ExperienceEntry, SQLiteExperienceStore
from evoharness_bpe.testing.loop import LoopGuardStore
from evoharness_bpe_langgraph import BPEGraphState, BPEMiddleware, BPENode, bpe_tools, with_dashboard
from evoharness_bpe_langgraph.testing import ScriptedChatModel, ai_tool_call
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

NS = ("acme", "weather")


def _guarded_store(tmp_path) -> tuple[LoopGuardStore, ExperienceEntry]:
    store = LoopGuardStore(SQLiteExperienceStore(tmp_path / "exp.db"))
    lesson = store.store.add(NS, ExperienceEntry(text="Report the weather with the city's forecast"))
    return store, lesson


def _script() -> list:
    broken_recall = AIMessage(
        "", invalid_tool_calls=[{"name": "recall", "args": '{"query": ', "id": "bad1", "error": "bad json", "type": "invalid_tool_call"}]
    )
    return [
        ai_tool_call("recall", {"query": "weather forecast"}),
        broken_recall,
        ai_tool_call("note", {"text": "The lookup tool answers with the sky only"}),
        ai_tool_call("lookup", {"city": "Paris"}),
        "All done.",
    ]


def test_create_agent_ainvoke_keeps_store_io_off_the_loop(tmp_path, lookup_tool) -> None:
    store, lesson = _guarded_store(tmp_path)
    model = ScriptedChatModel(responses=_script())
    mw = BPEMiddleware(store=store, namespace=NS)
    agent = create_agent(model, [lookup_tool], system_prompt="You report weather.", middleware=[mw])

    out = asyncio.run(agent.ainvoke({"messages": [HumanMessage("Report the weather forecast in Paris")]}))

    assert out["messages"][-1].content == "All done."
    assert store.violations == [] and store.calls > 0
    assert "forecast" in model.calls[0][0].text  # the dashboard's hint came from the store
    recalled = store.store.get(NS, lesson.id)
    assert recalled.uses == 1 and recalled.wins == 1  # finished off the loop, credited
    assert store.store.count(NS) == 2  # the note was written
    errors = [m for m in out["messages"] if getattr(m, "tool_call_id", None) == "bad1"]
    assert errors and errors[0].status == "error"


def test_create_agent_sync_hooks_would_be_caught(tmp_path, lookup_tool) -> None:
    """The guard is not vacuous: the sync hooks called on the loop trip it."""
    store, _ = _guarded_store(tmp_path)
    mw = BPEMiddleware(store=store, namespace=NS)

    async def on_the_loop() -> None:
        state = {"messages": [HumanMessage("Report the weather forecast")]}
        state.update(mw.before_agent(state, None))
        try:
            mw.adapter.dashboard(state, None)
        except Exception:
            pass

    asyncio.run(on_the_loop())
    assert store.violations == ["search"]


class State(MessagesState, BPEGraphState):
    pass


def test_bpe_node_graph_ainvoke_keeps_store_io_off_the_loop(tmp_path, lookup_tool) -> None:
    store, lesson = _guarded_store(tmp_path)
    model = ScriptedChatModel(
        responses=[
            ai_tool_call("recall", {"query": "weather forecast"}),
            ai_tool_call("note", {"text": "The lookup tool answers with the sky only"}),
            ai_tool_call("lookup", {"city": "Paris"}),
            "Done.",
        ]
    )
    node = BPENode(store=store, namespace=NS)
    tools = [lookup_tool]
    bound = model.bind_tools(bpe_tools(node) + tools)

    async def call_model(state: State) -> dict:
        return {"messages": [await bound.ainvoke(with_dashboard(state, state["messages"], "You report weather."))]}

    graph = StateGraph(State)
    graph.add_node("bpe", node)
    graph.add_node("model", call_model)
    graph.add_node("tools", ToolNode(bpe_tools(node) + tools, awrap_tool_call=node.awrap_tool_call))
    graph.add_node("finish", node.finish_node)
    graph.add_edge(START, "bpe")
    graph.add_edge("bpe", "model")
    graph.add_conditional_edges("model", tools_condition, {"tools": "tools", END: "finish"})
    graph.add_edge("tools", "bpe")
    graph.add_edge("finish", END)
    app = graph.compile(checkpointer=InMemorySaver())

    out = asyncio.run(
        app.ainvoke({"messages": [HumanMessage("Report the weather forecast")]}, {"configurable": {"thread_id": "t"}})
    )
    assert out["messages"][-1].content == "Done."
    assert store.violations == [] and store.calls > 0
    credited = store.store.get(NS, lesson.id)
    assert credited.uses == 1 and credited.wins == 1
    assert store.store.count(NS) == 2
