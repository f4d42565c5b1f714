"""Red-team tests through real LangGraph runs: tenant isolation through framework state, and
observations that stay within the workspace's limits whatever the tools are called."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest
from evoharness_bpe import BPEState, SQLiteExperienceStore, Workspace
from evoharness_bpe.exceptions import UserError
from evoharness_bpe_langgraph import BPEGraphState, BPEMiddleware, BPENode, bpe_tools, with_dashboard
from evoharness_bpe_langgraph.testing import ScriptedChatModel, ai_tool_call
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

BOB = ("users", "bob")
ALICE = ("users", "alice")
SECRET = "Vaultcode 4711 opens the payroll vault"


@dataclass
class Ctx:
    user: str


@pytest.fixture
def store(tmp_path):
    store = SQLiteExperienceStore(tmp_path / "experience.db")
    bob = Workspace("seed", store=store, namespace=BOB)
    assert bob.act("note", {"text": SECRET, "tags": ["vault"]}).ok
    yield store
    store.close()


def _bob_entry(store):
    [entry] = store.list(BOB)
    return entry


def _attack_script():
    return [
        ai_tool_call("recall", {"query": "vaultcode payroll vault"}),
        ai_tool_call("note", {"text": "Alice prefers invoices in EUR"}),
        "Done.",
    ]


def _assert_no_leak(model: ScriptedChatModel, out: dict, store) -> None:
    prompts = " ".join(m.text for call in model.calls for m in call)
    assert "4711" not in prompts and "Vaultcode" not in prompts
    recalls = [m for m in out["messages"] if isinstance(m, ToolMessage) and m.name == "recall"]
    assert recalls and all("4711" not in m.text for m in recalls)
    state = BPEState.model_validate(out["bpe"])
    assert state.experience.namespace == ALICE
    assert store.count(BOB) == 1 and store.count(ALICE) == 1  # the note went to Alice
    bob = _bob_entry(store)
    assert (bob.uses, bob.wins, bob.losses) == (0, 0, 0)  # no credit reached Bob's entry


def _bob_state(store) -> dict:
    """A `bpe` value naming Bob's namespace, with his lesson as recalled (to be credited)."""
    state = Workspace("steal", namespace=BOB).state
    state.experience.recalled = [_bob_entry(store).id]
    return state.model_dump(mode="json")


def test_bpe_value_in_the_input_cannot_redirect_create_agent(store) -> None:
    model = ScriptedChatModel(responses=_attack_script())
    mw = BPEMiddleware(store=store, namespace=lambda rt: ("users", rt.context.user))
    agent = create_agent(model, [], middleware=[mw], context_schema=Ctx)
    out = agent.invoke({"messages": [HumanMessage("hi")], "bpe": _bob_state(store)}, context=Ctx(user="alice"))
    _assert_no_leak(model, out, store)


def test_restored_thread_of_another_user_cannot_redirect_create_agent(store) -> None:
    saver = InMemorySaver()
    bob_model = ScriptedChatModel(responses=[ai_tool_call("recall", {"query": "vaultcode"}), "ok"])
    mw = BPEMiddleware(store=store, namespace=lambda rt: ("users", rt.context.user), success=lambda s: False)
    bob_agent = create_agent(bob_model, [], middleware=[mw], context_schema=Ctx, checkpointer=saver)
    cfg = {"configurable": {"thread_id": "bob-thread"}}
    bob_agent.invoke({"messages": [HumanMessage("vault?")]}, cfg, context=Ctx(user="bob"))
    assert _bob_entry(store).losses == 1  # Bob's own run was credited in his namespace
    assert "4711" in " ".join(m.text for m in bob_model.calls[-1])

    model = ScriptedChatModel(responses=_attack_script())
    agent = create_agent(model, [], middleware=[BPEMiddleware(store=store, namespace=lambda rt: ("users", rt.context.user))],
                         context_schema=Ctx, checkpointer=saver)
    # Alice resumes Bob's thread, and also sends his state along with her message.
    out = agent.invoke({"messages": [HumanMessage("more")], "bpe": _bob_state(store)}, cfg, context=Ctx(user="alice"))
    assert "4711" not in [m.text for m in out["messages"] if isinstance(m, ToolMessage) and m.name == "recall"][-1]
    assert "Vaultcode" not in model.calls[0][0].text  # the dashboard hints come from Alice's namespace
    state = BPEState.model_validate(out["bpe"])
    assert state.experience.namespace == ALICE
    assert store.count(BOB) == 1 and store.count(ALICE) == 1
    bob = _bob_entry(store)
    assert (bob.wins, bob.losses) == (0, 1)  # unchanged by Alice's successful run


def test_junk_bpe_value_is_refused_clearly() -> None:
    model = ScriptedChatModel(responses=["Done."])
    agent = create_agent(model, [], middleware=[BPEMiddleware()])
    with pytest.raises(UserError, match="does not hold a BPEState"):
        agent.invoke({"messages": [HumanMessage("hi")], "bpe": {"progress": "nonsense"}})


class NodeState(MessagesState, BPEGraphState):
    pass


def test_bpe_node_keeps_this_runs_namespace(store) -> None:
    model = ScriptedChatModel(responses=_attack_script())
    node = BPENode(store=store, namespace=lambda rt: ("users", rt.context.user))
    bound = model.bind_tools(bpe_tools(node))

    def call_model(state: NodeState) -> dict:
        return {"messages": [bound.invoke(with_dashboard(state, state["messages"], "Be brief."))]}

    graph = StateGraph(NodeState, context_schema=Ctx)
    graph.add_node("bpe", node)
    graph.add_node("model", call_model)
    graph.add_node("tools", ToolNode(bpe_tools(node), wrap_tool_call=node.wrap_tool_call))
    graph.add_node("finish", node.finish)
    graph.add_edge(START, "bpe")
    graph.add_edge("bpe", "model")
    graph.add_conditional_edges("model", tools_condition, {"tools": "tools", END: "finish"})
    graph.add_edge("tools", "bpe")
    graph.add_edge("finish", END)
    app = graph.compile(checkpointer=InMemorySaver())
    out = app.invoke({"messages": [HumanMessage("hi")], "bpe": _bob_state(store)},
                     {"configurable": {"thread_id": "t"}}, context=Ctx(user="alice"))
    _assert_no_leak(model, out, store)


def test_calls_to_nonexistent_tools_keep_the_channel_bounded() -> None:
    names = [f"tool{i:03d}_" + "x" * 1_993 for i in range(300)]
    turns = [
        AIMessage("", tool_calls=[{"name": n, "args": {"q": "y" * 500}, "id": f"c{j}", "type": "tool_call"}
                                  for j, n in enumerate(names[i:i + 10])])
        for i in range(0, 300, 10)
    ]
    model = ScriptedChatModel(responses=[ai_tool_call("track", {"key": "mine", "value": "kept"}), *turns, "Done."])
    mw = BPEMiddleware(max_beliefs=50)
    agent = create_agent(model, [], middleware=[mw])
    out = agent.invoke({"messages": [HumanMessage("go")]}, {"recursion_limit": 500})
    state = BPEState.model_validate(out["bpe"])
    assert len(state.belief.facts) <= 50
    assert all(len(k) <= 200 for k in state.belief.facts)
    assert state.belief.facts["mine"].value == "kept"  # the model's own facts are never evicted
    assert 0 < len(state.progress.exceptions) <= 50
    assert all(len(e.id) <= 200 and len(e.message) <= 300 for e in state.progress.exceptions.values())
    assert all(len(f.key) <= 200 and len(f.value) <= 300 for f in state.belief.history)
    size = len(json.dumps(out["bpe"]))
    assert size < 200_000, size
    dashboard = model.calls[-1][0].text
    assert all(len(line) < 400 for line in dashboard.split("\n"))
