"""TraceRecorder: a LlamaIndex run as a framework-neutral Trace that reads back from JSONL."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from evoharness_bpe import Outcome, TraceWriter, Workspace, read_traces
from evoharness_bpe_llamaindex import TraceRecorder, with_bpe
from evoharness_bpe_llamaindex.testing import ScriptedLLM, react_action, react_answer
from llama_index.core.agent.workflow import FunctionAgent, ReActAgent
from llama_index.core.memory import ChatMemoryBuffer


async def lookup(city: str) -> str:
    """Look up the weather of a city."""
    return f"sunny in {city}"


SCRIPT = [
    [("track", {"key": "weather.paris", "value": "sunny"}), ("commit", {"subgoal": "paris", "status": "doing"})],
    [("lookup", {"city": "Paris"})],
    [("commit", {"subgoal": "paris", "status": "nope"})],
    "Sunny in Paris.",
]


def record(tmp_path: Path, streaming: bool = True) -> tuple[ScriptedLLM, Workspace, Path]:
    llm = ScriptedLLM(SCRIPT)
    ws = Workspace("Report the weather", subgoals=["paris"])
    agent = with_bpe(FunctionAgent(tools=[lookup], llm=llm, system_prompt="SYS", streaming=streaming), ws)
    recorder = TraceRecorder(ws)

    async def go() -> None:
        await recorder.run(agent, user_msg="Weather in Paris?")

    asyncio.run(go())
    path = tmp_path / "traces.jsonl"
    with TraceWriter(path) as writer:
        writer.write(recorder.trace(outcome=Outcome(success=True), env="weather"))
    return llm, ws, path


def test_trace_reads_back_in_openai_format(tmp_path: Path) -> None:
    llm, ws, path = record(tmp_path)
    (trace,) = list(read_traces(path))
    assert trace.framework == "llamaindex" and trace.harness == "bpe" and trace.env == "weather"
    assert trace.task == "Weather in Paris?" and trace.outcome.success is True
    roles = [m["role"] for m in trace.messages]
    assert roles == ["user", "assistant", "tool", "tool", "assistant", "tool", "assistant", "tool", "assistant"]
    call = trace.messages[1]["tool_calls"][0]
    assert call == {
        "id": "call_0_0",
        "type": "function",
        "function": {"name": "track", "arguments": json.dumps({"key": "weather.paris", "value": "sunny"})},
    }
    assert trace.messages[2] == {"role": "tool", "tool_call_id": "call_0_0", "content": "tracked weather.paris = 'sunny'"}
    assert trace.messages[7]["content"].startswith("Error:")
    assert trace.messages[-1] == {"role": "assistant", "content": "Sunny in Paris."}
    # every tool message answers a call made before it
    called = set()
    for message in trace.messages:
        called.update(c["id"] for c in message.get("tool_calls", []))
        if message["role"] == "tool":
            assert message["tool_call_id"] in called
    # each model call is exactly what the model received, and what it answered
    assert len(trace.model_calls) == 4
    for model_call, seen in zip(trace.model_calls, llm.policy.calls, strict=True):
        assert model_call.messages == seen
        assert [m["role"] for m in model_call.messages].count("system") == 1
        assert model_call.prompt_tokens > 0
    assert "weather.paris" in trace.model_calls[1].messages[0]["content"]
    assert trace.model_calls[1].response["tool_calls"][0]["function"]["name"] == "lookup"
    assert trace.model_calls[-1].response == {"role": "assistant", "content": "Sunny in Paris."}
    # the workspace's side: meta-actions with call ids, dashboards, ledger
    assert [(e.name, e.ok, e.tool_call_id) for e in trace.meta_actions] == [
        ("track", True, "call_0_0"),
        ("commit", True, "call_0_1"),
        ("commit", False, "call_2_0"),
    ]
    assert len(trace.dashboards) == 4 and trace.dashboards[1].text in trace.model_calls[1].messages[0]["content"]
    assert trace.ledger is not None and trace.ledger.invalid_calls == 1
    assert {t["function"]["name"] for t in trace.tools} == {"lookup", "track", "commit", "recall", "note"}


def test_streaming_and_non_streaming_runs_record_the_same_conversation(tmp_path: Path) -> None:
    (a,) = list(read_traces(record(tmp_path / "a", streaming=True)[2]))
    (b,) = list(read_traces(record(tmp_path / "b", streaming=False)[2]))
    assert a.messages == b.messages
    assert [c.messages for c in a.model_calls] == [c.messages for c in b.model_calls]


def test_react_trace_and_concurrent_runs_stay_apart() -> None:
    async def go() -> tuple[TraceRecorder, TraceRecorder]:
        one = TraceRecorder(Workspace("one"))
        two = TraceRecorder()
        agent_one = with_bpe(ReActAgent(tools=[lookup], llm=ScriptedLLM([react_action("lookup", {"city": "Oslo"}), react_answer("cold")])), one.workspace)
        agent_two = FunctionAgent(tools=[lookup], llm=ScriptedLLM(["plain"]))
        await asyncio.gather(one.run(agent_one, user_msg="Oslo?"), two.run(agent_two, user_msg="hi"))
        return one, two

    one, two = asyncio.run(go())
    assert len(one.model_calls) == 2 and len(two.model_calls) == 1
    trace = one.trace()
    assert trace.messages[1]["tool_calls"][0]["function"] == {"name": "lookup", "arguments": '{"city": "Oslo"}'}
    assert trace.messages[2]["tool_call_id"] == trace.messages[1]["tool_calls"][0]["id"]
    plain = two.trace()
    assert plain.harness == "none" and plain.messages == [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "plain"}]


def test_a_second_run_appends_only_the_new_user_message() -> None:
    llm = ScriptedLLM(["first answer", "second answer"])
    agent = FunctionAgent(tools=[], llm=llm)
    recorder = TraceRecorder()

    async def go() -> None:
        memory = ChatMemoryBuffer.from_defaults()  # the chat history both runs share
        await recorder.run(agent, user_msg="q1", memory=memory)
        await recorder.run(agent, user_msg="q2", memory=memory)

    asyncio.run(go())
    assert [m["content"] for m in recorder.messages] == ["q1", "first answer", "q2", "second answer"]
    assert len(recorder.model_calls[1].messages) == 3
