"""Reliability through LangGraph: fuzzed meta-action calls, concurrent runs, kill -9 and resume."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading

from hypothesis import given, settings
from hypothesis import strategies as st
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver

from evoharness_bpe import BPEState, SQLiteExperienceStore
from evoharness_bpe.actions import MAX_ARGUMENT_DEPTH
from evoharness_bpe.testing.hostile import NESTED_KINDS, OVERSIZED_KINDS, nested_arguments, oversized
from evoharness_bpe_langgraph import BPEMiddleware
from evoharness_bpe_langgraph.testing import ScriptedChatModel, ai_tool_call

FIELDS = ["key", "value", "source", "confidence", "subgoal", "status", "note", "query", "k", "text", "tags", "kind", "supersedes"]
junk = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30) | st.sampled_from(["«»", "<|im_start|>", "x" * 3000]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)


@given(
    name=st.sampled_from(["track", "commit", "recall", "note"]),
    args=st.dictionaries(st.sampled_from(FIELDS), junk, max_size=5),
)
def test_fuzzed_meta_action_calls_through_create_agent(name, args) -> None:
    model = ScriptedChatModel(responses=[ai_tool_call("track", {"key": "seed", "value": "1"}), ai_tool_call(name, args), "done"])
    agent = create_agent(model, [], middleware=[BPEMiddleware(subgoals=["a"])])
    states = list(agent.stream({"messages": [HumanMessage("go")]}, stream_mode="values"))  # must not raise
    final = states[-1]
    assert final["messages"][-1].content == "done"
    reply = [m for m in final["messages"] if isinstance(m, ToolMessage)][-1]
    if reply.status == "error":
        seeded = next(s["bpe"] for s in states if "seed" in s.get("bpe", {}).get("belief", {}).get("facts", {}))
        assert BPEState.model_validate(final["bpe"]) == BPEState.model_validate(seeded)
        assert "Error" in reply.text


def _note_agent(store, worker: int, count: int):
    replies = [ai_tool_call("note", {"text": f"thread{worker} lesson{i} unique{worker}x{i}"}) for i in range(count)]
    model = ScriptedChatModel(responses=[*replies, "done"])
    mw = BPEMiddleware(store=store, namespace=("shared", "agents"), subgoals=["write"])
    return create_agent(model, [], middleware=[mw], checkpointer=InMemorySaver())


def test_threads_and_asyncio_tasks_share_one_store(tmp_path) -> None:
    store = SQLiteExperienceStore(tmp_path / "shared.db")
    count = 12

    def in_thread(worker: int) -> None:
        agent = _note_agent(store, worker, count)
        agent.invoke({"messages": [HumanMessage("go")]}, {"configurable": {"thread_id": f"t{worker}"}, "recursion_limit": 200})

    threads = [threading.Thread(target=in_thread, args=(w,)) for w in range(3)]
    for t in threads:
        t.start()

    async def tasks() -> None:
        agents = [_note_agent(store, w, count) for w in range(3, 6)]
        await asyncio.gather(*(
            a.ainvoke({"messages": [HumanMessage("go")]}, {"configurable": {"thread_id": f"a{i}"}, "recursion_limit": 200})
            for i, a in enumerate(agents)
        ))

    asyncio.run(tasks())
    for t in threads:
        t.join()
    texts = {e.text for e in store.list(("shared", "agents"), limit=1000)}
    assert texts == {f"thread{w} lesson{i} unique{w}x{i}" for w in range(6) for i in range(count)}
    assert store.integrity_check() == "ok"
    store.close()


CRASHING_RUN = textwrap.dedent(
    """
    import sqlite3, sys, time
    from langchain.agents import create_agent
    from langchain_core.messages import HumanMessage
    from langchain_core.tools import tool
    from langgraph.checkpoint.sqlite import SqliteSaver
    from evoharness_bpe import SQLiteExperienceStore
    from evoharness_bpe_langgraph import BPEMiddleware
    from evoharness_bpe_langgraph.testing import ScriptedChatModel, ai_tool_call

    @tool
    def upload(batch: int) -> str:
        \"\"\"Upload one batch.\"\"\"
        print(f"uploaded {batch}", flush=True)
        if batch == 3:
            time.sleep(60)  # killed here, in the middle of the episode
        return f"batch {batch} stored"

    replies = []
    for b in range(1, 6):
        replies += [ai_tool_call("commit", {"subgoal": f"batch {b}", "status": "doing"}), ai_tool_call("upload", {"batch": b}),
                    ai_tool_call("commit", {"subgoal": f"batch {b}", "status": "done"})]
    conn = sqlite3.connect(sys.argv[1], check_same_thread=False)
    mw = BPEMiddleware(store=SQLiteExperienceStore(sys.argv[2]), subgoals=[f"batch {b}" for b in range(1, 6)])
    agent = create_agent(ScriptedChatModel(responses=[*replies, "done"]), [upload], middleware=[mw], checkpointer=SqliteSaver(conn))
    # durability="sync": each step is persisted before the next starts, so a crash loses none
    agent.invoke({"messages": [HumanMessage("upload five batches")]}, {"configurable": {"thread_id": "job"}, "recursion_limit": 200},
                 durability="sync")
    """
)


def test_kill_9_mid_run_resumes_from_checkpoint_with_bpe_state(tmp_path) -> None:
    checkpoints, experience = tmp_path / "checkpoints.db", tmp_path / "experience.db"
    proc = subprocess.Popen([sys.executable, "-c", CRASHING_RUN, str(checkpoints), str(experience)], stdout=subprocess.PIPE, text=True)
    while (line := proc.stdout.readline().strip()) != "uploaded 3":
        assert line, "the run ended before the crash point"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()

    conn = sqlite3.connect(checkpoints, check_same_thread=False)
    saver = SqliteSaver(conn)
    config = {"configurable": {"thread_id": "job"}}
    saved = saver.get_tuple(config)
    assert saved is not None
    state = BPEState.model_validate(saved.checkpoint["channel_values"]["bpe"])
    statuses = {sid: s.status for sid, s in state.progress.subgoals.items()}
    assert statuses["batch-1"] == statuses["batch-2"] == "done"
    assert statuses["batch-3"] == "doing" and statuses["batch-4"] == "todo"

    # A new process picks the thread up: the model sees the resumed Progress in its dashboard.
    model = ScriptedChatModel(responses=["resuming"])
    store = SQLiteExperienceStore(experience)
    assert store.integrity_check() == "ok"
    agent = create_agent(model, [], middleware=[BPEMiddleware(store=store)], checkpointer=saver)
    out = agent.invoke({"messages": [HumanMessage("continue")]}, {**config, "recursion_limit": 50})
    resumed = BPEState.model_validate(out["bpe"])
    assert resumed.progress.subgoals["batch-2"].status == "done"
    system = model.calls[0][0].text
    assert "[doing] batch-3" in system and "2 done" in system
    store.close()
    conn.close()


def test_recursion_of_garbage_tool_calls_never_escapes() -> None:
    # A model emitting raw junk instead of JSON arguments still gets an answer it can read.
    junk_call = AIMessage("", tool_calls=[{"name": "note", "args": {"text": None, "tags": "not-a-list"}, "id": "x1", "type": "tool_call"}])
    model = ScriptedChatModel(responses=[junk_call, "done"])
    out = create_agent(model, [], middleware=[BPEMiddleware()]).invoke({"messages": [HumanMessage("go")]})
    reply = [m for m in out["messages"] if isinstance(m, ToolMessage)][0]
    assert reply.status == "error" and "text" in reply.text


hostile = st.one_of(
    st.tuples(st.sampled_from(OVERSIZED_KINDS), st.integers(20_001, 1_000_000)).map(lambda p: oversized(*p)),
    # A chat model's parser (json.loads) refuses deeper objects, so deeper ones arrive as text.
    st.tuples(st.sampled_from(["top", "in-field"]), st.integers(MAX_ARGUMENT_DEPTH + 1, 150)).map(lambda p: nested_arguments(*p)),
    st.integers(MAX_ARGUMENT_DEPTH + 1, 9_000).map(lambda n: nested_arguments("json-string", n)),
)


@settings(max_examples=max(30, settings.default.max_examples // 20), deadline=None)  # 500 in the campaign
@given(name=st.sampled_from(["track", "commit", "recall", "note"]), args=hostile)
def test_oversized_and_nested_calls_through_create_agent(name, args) -> None:
    if isinstance(args, str):  # arguments that are not a JSON object arrive as an invalid tool call
        call = AIMessage("", invalid_tool_calls=[{"name": name, "args": args, "id": "bad", "error": "not JSON", "type": "invalid_tool_call"}])
    else:
        call = AIMessage("", tool_calls=[{"name": name, "args": args, "id": "big", "type": "tool_call"}])
    model = ScriptedChatModel(responses=[ai_tool_call("track", {"key": "seed", "value": "1"}), call, "done"])
    mw = BPEMiddleware(subgoals=["a"])
    agent = create_agent(model, [], middleware=[mw])
    states = list(agent.stream({"messages": [HumanMessage("go")]}, stream_mode="values"))  # must not raise
    final = states[-1]
    assert final["messages"][-1].content == "done"
    reply = [m for m in final["messages"] if isinstance(m, ToolMessage)][-1]
    assert reply.status == "error" and reply.text.startswith("Error: ") and len(reply.text) < 2_000
    seeded = next(s["bpe"] for s in states if "seed" in s.get("bpe", {}).get("belief", {}).get("facts", {}))
    assert BPEState.model_validate(final["bpe"]) == BPEState.model_validate(seeded)
    events = mw.episode(final["bpe_run"]).events
    assert events[-1].ok is False and len(events[-1].arguments) <= 2_100
