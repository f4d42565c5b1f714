"""Notes written in one thread are recalled in another thread of the same namespace only."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

import pytest
from evoharness_bpe_langgraph import BPEMiddleware, LangGraphExperienceStore
from evoharness_bpe_langgraph.testing import ScriptedChatModel, ai_tool_call
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore
from langgraph.store.sqlite import SqliteStore

LESSON = "Invoices over 10000 EUR need a second approver"


@dataclass
class Ctx:
    tenant: str


@pytest.fixture(params=["memory", "sqlite"])
def base_store(request, tmp_path):
    if request.param == "memory":
        yield InMemoryStore()
        return
    conn = sqlite3.connect(tmp_path / "store.db", check_same_thread=False, isolation_level=None)
    store = SqliteStore(conn)
    store.setup()
    yield store
    conn.close()


def _run(base_store, tenant: str, thread: str, script) -> tuple[dict, ScriptedChatModel]:
    model = ScriptedChatModel(responses=script)
    mw = BPEMiddleware(namespace=lambda rt: (rt.context.tenant, "invoices"))
    agent = create_agent(model, [], middleware=[mw], checkpointer=InMemorySaver(), store=base_store, context_schema=Ctx)
    out = agent.invoke(
        {"messages": [HumanMessage("Approve invoice 17 of 12500 EUR")]},
        {"configurable": {"thread_id": thread}},
        context=Ctx(tenant=tenant),
    )
    return out, model


def _recalled(out: dict) -> str:
    return next(m.text for m in out["messages"] if isinstance(m, ToolMessage) and m.name == "recall")


def test_note_is_recalled_across_threads_of_one_namespace(base_store) -> None:
    _run(base_store, "acme", "t1", [ai_tool_call("note", {"text": LESSON, "tags": ["approval"]}), "noted"])
    recall = [ai_tool_call("recall", {"query": "invoice approver"}), "ok"]

    out, model = _run(base_store, "acme", "t2", list(recall))
    assert LESSON in _recalled(out)
    assert "second approver" in model.calls[0][0].text  # also offered as a hint on the dashboard

    out, model = _run(base_store, "globex", "t3", list(recall))
    assert LESSON not in _recalled(out) and "no experience" in _recalled(out)
    assert "second approver" not in model.calls[0][0].text

    experience = LangGraphExperienceStore(base_store)
    assert [e.text for e in experience.list(("acme", "invoices"))] == [LESSON]
    assert experience.count(("globex", "invoices")) == 0
