"""The ``bpe`` channel persists through LangGraph checkpointers, per thread."""

from __future__ import annotations

import asyncio
import sqlite3

import pytest
from evoharness_bpe import BPEState
from evoharness_bpe_langgraph import BPEMiddleware
from evoharness_bpe_langgraph.testing import ScriptedChatModel, ai_tool_call
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver


def _first_run():
    return [
        ai_tool_call("track", {"key": "customer.id", "value": "C-42"}),
        ai_tool_call("commit", {"subgoal": "find customer", "status": "done"}),
        "Found the customer.",
    ]


def _second_run(seen: list[str]):
    def look(messages):
        seen.append(messages[0].text)
        return "Resumed."

    return [look]


def _run_two_threads(checkpointer) -> tuple[list[str], list[str], dict]:
    mw = BPEMiddleware(subgoals=["find customer", "update address"])
    model = ScriptedChatModel(responses=_first_run())
    agent = create_agent(model, [], middleware=[mw], checkpointer=checkpointer)
    cfg = {"configurable": {"thread_id": "T1"}}
    agent.invoke({"messages": [HumanMessage("Update the customer's address")]}, cfg)

    same, other = [], []
    agent = create_agent(ScriptedChatModel(responses=_second_run(same)), [], middleware=[mw], checkpointer=checkpointer)
    resumed = agent.invoke({"messages": [HumanMessage("continue")]}, cfg)
    agent = create_agent(ScriptedChatModel(responses=_second_run(other)), [], middleware=[mw], checkpointer=checkpointer)
    agent.invoke({"messages": [HumanMessage("continue")]}, {"configurable": {"thread_id": "T2"}})
    return same, other, resumed


def _check(same: list[str], other: list[str], resumed: dict) -> None:
    assert "customer.id" in same[0] and "C-42" in same[0]
    assert "1 done" in same[0] and "GOAL: «Update the customer's address»" in same[0]
    assert "C-42" not in other[0] and "0 done" in other[0] and "GOAL: «continue»" in other[0]
    state = BPEState.model_validate(resumed["bpe"])
    assert state.progress.subgoals["find-customer"].status == "done"
    assert len(resumed["messages"]) == 8  # both runs' messages in one thread


def test_in_memory_saver_resumes_a_thread() -> None:
    _check(*_run_two_threads(InMemorySaver()))


def test_sqlite_saver_resumes_a_thread_across_connections(tmp_path) -> None:
    path = tmp_path / "checkpoints.db"
    first = SqliteSaver(sqlite3.connect(path, check_same_thread=False))
    mw = BPEMiddleware(subgoals=["find customer", "update address"])
    agent = create_agent(ScriptedChatModel(responses=_first_run()), [], middleware=[mw], checkpointer=first)
    cfg = {"configurable": {"thread_id": "T1"}}
    agent.invoke({"messages": [HumanMessage("Update the customer's address")]}, cfg)
    first.conn.close()

    with SqliteSaver.from_conn_string(str(path)) as saver:
        same, other = [], []
        fresh = BPEMiddleware(subgoals=["find customer", "update address"])  # a new process would build a new one
        agent = create_agent(ScriptedChatModel(responses=_second_run(same)), [], middleware=[fresh], checkpointer=saver)
        resumed = agent.invoke({"messages": [HumanMessage("continue")]}, cfg)
        agent = create_agent(ScriptedChatModel(responses=_second_run(other)), [], middleware=[fresh], checkpointer=saver)
        agent.invoke({"messages": [HumanMessage("continue")]}, {"configurable": {"thread_id": "T2"}})
        assert BPEState.model_validate(agent.get_state(cfg).values["bpe"]).belief.facts["customer.id"].value == "C-42"
    _check(same, other, resumed)


def test_async_sqlite_saver_resumes_a_thread(tmp_path) -> None:
    from langgraph.checkpoint.sqlite import aio  # langgraph-checkpoint-sqlite needs aiosqlite for this

    async def run() -> tuple[list[str], list[str], dict]:
        async with aio.AsyncSqliteSaver.from_conn_string(str(tmp_path / "a.db")) as saver:
            mw = BPEMiddleware(subgoals=["find customer", "update address"])
            cfg = {"configurable": {"thread_id": "T1"}}
            agent = create_agent(ScriptedChatModel(responses=_first_run()), [], middleware=[mw], checkpointer=saver)
            await agent.ainvoke({"messages": [HumanMessage("Update the customer's address")]}, cfg)
            same, other = [], []
            agent = create_agent(ScriptedChatModel(responses=_second_run(same)), [], middleware=[mw], checkpointer=saver)
            resumed = await agent.ainvoke({"messages": [HumanMessage("continue")]}, cfg)
            agent = create_agent(ScriptedChatModel(responses=_second_run(other)), [], middleware=[mw], checkpointer=saver)
            await agent.ainvoke({"messages": [HumanMessage("continue")]}, {"configurable": {"thread_id": "T2"}})
            return same, other, resumed

    _check(*asyncio.run(run()))
