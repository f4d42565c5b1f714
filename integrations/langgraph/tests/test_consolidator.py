"""`BPEMiddleware(consolidator=...)`: a real `create_agent` run hands its notes to a teacher in the background."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import pytest
from evoharness_bpe import BPEState, ExperienceEntry, MemoryExperienceStore, ModelConsolidator
from evoharness_bpe.consolidator.testing import ScriptedTeacher as Teacher
from evoharness_bpe.exceptions import UserError
from evoharness_bpe_langgraph import BPEMiddleware
from evoharness_bpe_langgraph.testing import ScriptedChatModel, ai_tool_call
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

NS = ("acme", "crm")


def _agent(store, consolidator, notes: list[str], **options: Any):
    model = ScriptedChatModel(responses=[*(ai_tool_call("note", {"text": t}) for t in notes), "Done."])
    mw = BPEMiddleware(store=store, namespace=NS, consolidator=consolidator, **options)
    return create_agent(model, [], middleware=[mw], checkpointer=InMemorySaver()), mw


def _procedures(store) -> list[str]:
    return sorted(e.text for e in store.list(NS, limit=100) if e.kind == "procedure")


def test_each_run_hands_its_notes_over_once_when_it_ends() -> None:
    store, teacher = MemoryExperienceStore(), Teacher()
    with ModelConsolidator(teacher, store) as consolidator:
        agent, _ = _agent(store, consolidator, ["Phone numbers need a country code"])
        config = {"configurable": {"thread_id": "t1"}}
        out = agent.invoke({"messages": [HumanMessage("Migrate the contacts")]}, config)
        assert BPEState.model_validate(out["bpe"]).experience.noted == []   # handed over: cleared for the next run
        assert consolidator.flush(timeout=30)
        agent.invoke({"messages": [HumanMessage("Once more, nothing new")]}, config)   # the script is played out
        assert consolidator.flush(timeout=30)
    assert teacher.requests == [["Phone numbers need a country code"]]
    assert _procedures(store) == ["Procedure: Phone numbers need a country code"]


def test_the_answer_does_not_wait_for_the_teacher() -> None:
    store, gate = MemoryExperienceStore(), threading.Event()
    teacher = Teacher(gate=gate)
    with ModelConsolidator(teacher, store) as consolidator:
        agent, _ = _agent(store, consolidator, ["Uploads fail on weekends"])
        out = agent.invoke({"messages": [HumanMessage("Upload")]}, {"configurable": {"thread_id": "a"}})
        assert out["messages"][-1].content == "Done." and consolidator.pending() == 1 and not teacher.requests
        nxt, _ = _agent(store, consolidator, ["Retry a 503 after two seconds"])   # the next episode starts at once
        asyncio.run(nxt.ainvoke({"messages": [HumanMessage("Next")]}, {"configurable": {"thread_id": "b"}}))
        gate.set()
        assert consolidator.flush(timeout=30)
    assert sorted(map(tuple, teacher.requests)) == [("Retry a 503 after two seconds",), ("Uploads fail on weekends",)]
    assert len(_procedures(store)) == 2


@pytest.mark.parametrize("background", [False, True])
def test_every_n_notes_during_the_run_and_the_rest_at_its_end(background: bool) -> None:
    store, teacher = MemoryExperienceStore(), Teacher()
    notes = ["Phone numbers need a country code", "The CRM API allows 5 requests a second", "Emails are unique per account"]
    with ModelConsolidator(teacher, store, every_notes=2) as consolidator:
        agent, mw = _agent(store, consolidator, notes, finish_in_background=background)
        agent.invoke({"messages": [HumanMessage("Migrate")]}, {"configurable": {"thread_id": "n"}})
        mw.flush()
        assert consolidator.flush(timeout=30)
    assert teacher.requests == [notes[:2], notes[2:]]
    assert len(_procedures(store)) == 3


def test_decisions_about_another_tenants_entries_change_nothing() -> None:
    store = MemoryExperienceStore()
    secret = ExperienceEntry(text="Globex invoices need the VAT id")
    store.add(("globex", "crm"), secret)

    def hostile(messages: list[dict[str, str]]) -> str:
        note = json.loads(messages[-1]["content"])["notes"][0]["id"]
        return json.dumps({"decisions": [{"op": "delete", "id": secret.id}, {"op": "merge", "id": note, "into": secret.id}]})

    with ModelConsolidator(hostile, store) as consolidator:
        agent, _ = _agent(store, consolidator, ["Invoices need a VAT id"])
        agent.invoke({"messages": [HumanMessage("Invoice")]}, {"configurable": {"thread_id": "h"}})
        assert consolidator.flush(timeout=30)
        assert consolidator.journal.counts() == {"fallback": 1}
    assert [e.text for e in store.list(("globex", "crm"))] == ["Globex invoices need the VAT id"]
    assert [e.text for e in store.list(NS)] == ["Invoices need a VAT id"]


def test_a_langchain_chat_model_is_a_teacher() -> None:
    store = MemoryExperienceStore()

    def answer(messages: list[Any]) -> str:
        notes = json.loads(messages[-1].content)["notes"]
        return json.dumps({"decisions": [{"op": "add", "text": f"Procedure: {n['text']}", "kind": "procedure"} for n in notes]})

    chat_teacher = ScriptedChatModel(responses=[answer])
    with ModelConsolidator(chat_teacher, store) as consolidator:
        agent, _ = _agent(store, consolidator, ["Dates are day-first in the export"])
        agent.invoke({"messages": [HumanMessage("Export")]}, {"configurable": {"thread_id": "lc"}})
        assert consolidator.flush(timeout=30)
    assert chat_teacher.calls[0][0].type == "system" and _procedures(store) == ["Procedure: Dates are day-first in the export"]


def test_a_consolidator_that_is_not_one_is_refused() -> None:
    with pytest.raises(UserError, match="ModelConsolidator"):
        BPEMiddleware(consolidator="teacher")


def test_the_agent_uses_the_consolidators_store_and_refuses_another() -> None:
    store, teacher = MemoryExperienceStore(), Teacher()
    with ModelConsolidator(teacher, store) as consolidator:
        model = ScriptedChatModel(responses=[ai_tool_call("note", {"text": "Totals are in cents"}), "Done."])
        agent = create_agent(model, [], middleware=[BPEMiddleware(namespace=NS, consolidator=consolidator)])
        agent.invoke({"messages": [HumanMessage("Sum up")]})     # no store=: the consolidator's
        assert consolidator.flush(timeout=30)
        with pytest.raises(UserError, match="same store"):
            BPEMiddleware(store=MemoryExperienceStore(), consolidator=consolidator)
    assert _procedures(store) == ["Procedure: Totals are in cents"]


def test_a_hand_built_state_graph_with_bpe_node(lookup_tool) -> None:
    from evoharness_bpe_langgraph import BPEGraphState, BPENode, bpe_tools, with_dashboard
    from langgraph.graph import END, START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    class State(MessagesState, BPEGraphState):
        pass

    store, teacher = MemoryExperienceStore(), Teacher()
    with ModelConsolidator(teacher, store) as consolidator:
        node = BPENode(namespace=NS, consolidator=consolidator)
        model = ScriptedChatModel(responses=[ai_tool_call("note", {"text": "Hotels need a passport number"}), "Booked."])
        bound = model.bind_tools(bpe_tools(node) + [lookup_tool])
        graph = StateGraph(State)
        graph.add_node("bpe", node)
        graph.add_node("model", lambda state: {"messages": [bound.invoke(with_dashboard(state, state["messages"], "Book."))]})
        graph.add_node("tools", ToolNode(bpe_tools(node) + [lookup_tool], wrap_tool_call=node.wrap_tool_call))
        graph.add_node("finish", node.finish)
        graph.add_edge(START, "bpe")
        graph.add_edge("bpe", "model")
        graph.add_conditional_edges("model", tools_condition, {"tools": "tools", END: "finish"})
        graph.add_edge("tools", "bpe")
        graph.add_edge("finish", END)
        graph.compile(checkpointer=InMemorySaver()).invoke({"messages": [HumanMessage("Book a hotel")]},
                                                           {"configurable": {"thread_id": "g"}})
        assert consolidator.flush(timeout=30)
    assert teacher.requests == [["Hotels need a passport number"]]
    assert _procedures(store) == ["Procedure: Hotels need a passport number"]
