"""One `FunctionAgent` wrapped once, many runs: a fresh episode per run, finished with a trace.

Real LlamaIndex workflow runs, real SQLite experience stores, a policy that answers from the
prompt it receives (`TaskScriptedLLM`: concurrent runs cannot take each other's turns).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from evoharness_bpe import ExperienceEntry, SQLiteExperienceStore, read_traces
from evoharness_bpe.exceptions import ModelCallError, UserError
from evoharness_bpe.testing.loop import LoopGuardStore
from evoharness_bpe_llamaindex import BPEFunctionAgent, BPETraceHandler, RunBinding, get_binding, with_bpe
from evoharness_bpe_llamaindex.llm import PolicyLLM
from evoharness_bpe_llamaindex.testing import TaskScriptedLLM
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.tools import FunctionTool
from llama_index.core.workflow import Context


async def fetch(city: str) -> str:
    """Fetch today's weather of a city."""
    await asyncio.sleep(0.01)
    return f"{city}: sunny"


SCRIPTS = {
    "Paris": [
        [("track", {"key": "paris.weather", "value": "sunny"})],
        [("fetch", {"city": "Paris"})],
        [("note", {"text": "Fetch the city weather before reporting it", "tags": ["weather"]})],
        "Paris is sunny.",
    ],
    "Oslo": [
        [("track", {"key": "oslo.weather", "value": "unknown"})],
        [("recall", {"query": "weather report"})],
        [("fetch", {"city": "Oslo"})],
        "Oslo is sunny.",
    ],
}


def new_agent(store: Any, trace: BPETraceHandler | None, llm: PolicyLLM, **options: Any) -> FunctionAgent:
    agent = FunctionAgent(
        tools=[FunctionTool.from_defaults(async_fn=fetch)],
        llm=llm,
        system_prompt="You report the weather.",
        streaming=options.pop("streaming", False),
    )
    return with_bpe(agent, store=store, namespace=options.pop("namespace", ("acme", "weather")), trace=trace, **options)


def _meta_names(trace: Any) -> list[str]:
    return [event.name for event in trace.meta_actions]


def _check_trace(trace: Any, city: str) -> None:
    other = "Oslo" if city == "Paris" else "Paris"
    assert trace.framework == "llamaindex"
    assert city in trace.task and other not in trace.task
    assert trace.outcome.success is True
    assert trace.messages[0]["role"] == "user" and city in trace.messages[0]["content"]
    assert trace.messages[-1] == {"role": "assistant", "content": f"{city} is sunny."}
    assert trace.model_calls and len(trace.model_calls) == 4
    for call in trace.model_calls:
        systems = [m for m in call.messages if m["role"] == "system"]
        assert len(systems) == 1 and "<bpe-dashboard" in systems[0]["content"]
        assert f"{other.lower()}.weather" not in systems[0]["content"]  # no state from the other run
    assert f"{city.lower()}.weather" in trace.model_calls[1].messages[0]["content"]
    assert {t["function"]["name"] for t in trace.tools} >= {"fetch", "track", "commit", "recall", "note"}
    assert all(event.tool_call_id for event in trace.meta_actions)


def test_one_agent_runs_two_tasks_back_to_back(tmp_path) -> None:
    store = SQLiteExperienceStore(tmp_path / "exp.db")
    traces = BPETraceHandler(tmp_path / "traces.jsonl")
    agent = new_agent(store, traces, TaskScriptedLLM(SCRIPTS))

    async def main() -> list[str]:
        return [str(await agent.run(user_msg="Weather in Paris?")), str(await agent.run(user_msg="Weather in Oslo?"))]

    assert asyncio.run(main()) == ["Paris is sunny.", "Oslo is sunny."]
    written = list(read_traces(tmp_path / "traces.jsonl"))
    assert [t.task for t in written] == ["Weather in Paris?", "Weather in Oslo?"]
    paris, oslo = written
    _check_trace(paris, "Paris")
    _check_trace(oslo, "Oslo")
    assert _meta_names(paris) == ["track", "note"] and _meta_names(oslo) == ["track", "recall"]
    # Each run was its own finished episode: the lesson noted in the first was recalled in the
    # second and credited with its success; the first run's Belief did not leak into the second.
    (lesson,) = store.list(("acme", "weather"))
    assert lesson.uses == 1 and lesson.wins == 1
    binding = get_binding(agent)
    assert isinstance(binding, RunBinding)
    episodes = [binding.episode(t.outcome.info["run_id"]) for t in written]
    assert all(e is not None and e.finished and e.summary.success for e in episodes)
    assert episodes[0].workspace is not episodes[1].workspace
    assert "paris.weather" not in episodes[1].workspace.state.belief.facts
    assert episodes[1].summary.credited == 1


@pytest.mark.parametrize("streaming", [False, True])
def test_one_agent_runs_two_tasks_concurrently(tmp_path, streaming: bool) -> None:
    store = LoopGuardStore(SQLiteExperienceStore(tmp_path / "exp.db"))
    traces = BPETraceHandler(tmp_path / "traces.jsonl")
    llm = TaskScriptedLLM(SCRIPTS, delay=0.02)
    agent = new_agent(store, traces, llm, streaming=streaming)

    async def main() -> tuple[Any, ...]:
        return await asyncio.gather(agent.run(user_msg="Weather in Paris?"), agent.run(user_msg="Weather in Oslo?"))

    answers = asyncio.run(main())
    assert [str(a) for a in answers] == ["Paris is sunny.", "Oslo is sunny."]
    written = {t.task: t for t in read_traces(tmp_path / "traces.jsonl")}
    assert set(written) == {"Weather in Paris?", "Weather in Oslo?"}
    _check_trace(written["Weather in Paris?"], "Paris")
    _check_trace(written["Weather in Oslo?"], "Oslo")
    assert _meta_names(written["Weather in Paris?"]) == ["track", "note"]
    assert _meta_names(written["Weather in Oslo?"]) == ["track", "recall"]
    run_ids = {t.outcome.info["run_id"] for t in written.values()}
    assert len(run_ids) == 2
    # The two runs really overlapped: prompts of both tasks alternate in the policy's log.
    order = ["Paris" if "Paris" in next(m["content"] for m in p if m["role"] == "user") else "Oslo" for p in llm.policy.calls]
    assert order != sorted(order) and order != sorted(order, reverse=True)
    # And no store call was made on the event loop's thread.
    assert store.calls > 0 and store.violations == []


def test_a_failed_run_is_finished_as_a_failure(tmp_path) -> None:
    store = SQLiteExperienceStore(tmp_path / "exp.db")
    lesson = store.add(("acme", "weather"), ExperienceEntry(text="Fetch the weather report before answering"))
    traces = BPETraceHandler(tmp_path / "traces.jsonl")

    def down(messages: Any, tools: Any) -> Any:
        raise ConnectionError("model server went away")

    agent = new_agent(store, traces, TaskScriptedLLM({"Lima": [[("recall", {"query": "weather report"})], down]}))

    async def main() -> None:
        await agent.run(user_msg="Weather in Lima?")

    with pytest.raises(ConnectionError):
        asyncio.run(main())
    (trace,) = read_traces(tmp_path / "traces.jsonl")
    assert trace.outcome.success is False
    assert "ConnectionError: model server went away" in trace.outcome.info["error"]
    assert _meta_names(trace) == ["recall"]
    debited = store.get(("acme", "weather"), lesson.id)
    assert debited.uses == 1 and debited.losses == 1 and debited.wins == 0


def test_success_comes_from_the_final_state(tmp_path) -> None:
    traces = BPETraceHandler()
    scripts = {"report": [[("commit", {"subgoal": "draft", "status": "done"})], "Reported."]}
    agent = new_agent(None, traces, TaskScriptedLLM(scripts), subgoals=["draft", "review"])

    async def main() -> None:
        await agent.run(user_msg="Write the report")

    asyncio.run(main())
    assert traces.last is not None and traces.last.outcome.success is False  # "review" is still open
    assert traces.last.task == "Write the report"


def test_empty_model_reply_fails_the_run_loudly(tmp_path) -> None:
    traces = BPETraceHandler(tmp_path / "t.jsonl")
    agent = new_agent(None, traces, TaskScriptedLLM({"Rome": [""]}))

    async def main() -> None:
        await agent.run(user_msg="Weather in Rome?")

    with pytest.raises(ModelCallError, match="empty reply"):
        asyncio.run(main())
    (trace,) = read_traces(tmp_path / "t.jsonl")
    assert trace.outcome.success is False and "ModelCallError" in trace.outcome.info["error"]


def test_empty_stream_fails_the_run_loudly() -> None:
    class EmptyStream(TaskScriptedLLM):
        async def astream_chat(self, messages: Any, **kwargs: Any) -> Any:
            async def gen() -> Any:
                return
                yield  # an async generator that yields nothing: what a refused stream looks like

            return gen()

    traces = BPETraceHandler()
    agent = FunctionAgent(tools=[], llm=EmptyStream({"Rome": ["unused"]}), streaming=True)
    with_bpe(agent, trace=traces)

    async def main() -> None:
        await agent.run(user_msg="Weather in Rome?")

    with pytest.raises(ModelCallError, match="stream ended without a reply"):
        asyncio.run(main())
    assert traces.last is not None and traces.last.outcome.success is False


def test_goal_option_and_bpe_function_agent_class(tmp_path) -> None:
    traces = BPETraceHandler()
    agent = BPEFunctionAgent(
        goal="Keep the weather desk answered",
        trace=traces,
        tools=[FunctionTool.from_defaults(async_fn=fetch)],
        llm=TaskScriptedLLM(SCRIPTS),
        streaming=False,
    )

    async def main() -> None:
        await agent.run(user_msg="Weather in Paris?")

    asyncio.run(main())
    assert traces.last.task == "Keep the weather desk answered"
    with pytest.raises(AttributeError, match="per run"):
        agent.workspace  # noqa: B018


def test_options_are_checked_when_wrapping() -> None:
    from evoharness_bpe import Workspace

    def agent() -> FunctionAgent:
        return FunctionAgent(tools=[], llm=TaskScriptedLLM({"x": ["y"]}))

    with pytest.raises(UserError, match="workspace's own settings"):
        with_bpe(agent(), Workspace("g"), store=SQLiteExperienceStore(":memory:"))
    with pytest.raises(UserError, match="inject"):
        with_bpe(agent(), inject="loud")
    with pytest.raises(UserError, match="namespace"):
        with_bpe(agent(), namespace="acme")
    wrapped = with_bpe(agent())
    with pytest.raises(UserError, match="wrap it once"):
        with_bpe(wrapped)


def test_a_context_continues_in_the_next_run(tmp_path) -> None:
    """A saved and restored context carries Belief/Progress into the next run (same tenant)."""
    scripts = {
        "Paris": [[("track", {"key": "paris.weather", "value": "sunny"})], "Noted."],
        "Rome": ["Rome is sunny too."],
    }
    llm = TaskScriptedLLM(scripts)
    traces = BPETraceHandler()
    agent = new_agent(None, traces, llm)

    async def main() -> int:
        handler = agent.run(user_msg="Weather in Paris?")
        await handler
        saved = json.loads(json.dumps(handler.ctx.to_dict()))
        before = len(llm.policy.calls)
        await agent.run(user_msg="Weather in Rome?", ctx=Context.from_dict(agent, saved))
        return before

    before = asyncio.run(main())
    (second_prompt,) = llm.policy.calls[before:]
    assert "paris.weather" in second_prompt[0]["content"]  # carried by the context, not re-tracked
    assert [t.task for t in traces.traces] == ["Weather in Paris?", "Weather in Paris?"]  # the episode's goal
    assert traces.traces[0].outcome.info["run_id"] != traces.traces[1].outcome.info["run_id"]


def test_agent_workflow_per_run_one_episode_across_handoffs() -> None:
    from llama_index.core.agent.workflow import AgentWorkflow

    traces = BPETraceHandler()
    researcher = FunctionAgent(
        name="researcher",
        description="Finds facts.",
        tools=[FunctionTool.from_defaults(async_fn=fetch)],
        llm=TaskScriptedLLM(
            {"Paris": [[("track", {"key": "paris.weather", "value": "sunny"})], [("handoff", {"to_agent": "writer", "reason": "done"})]]}
        ),
        can_handoff_to=["writer"],
        streaming=False,
    )
    writer_llm = TaskScriptedLLM({"Paris": ["Report: Paris is sunny."]})
    writer = FunctionAgent(name="writer", description="Writes reports.", tools=[], llm=writer_llm, streaming=False)
    workflow = with_bpe(AgentWorkflow(agents=[researcher, writer], root_agent="researcher"), trace=traces)

    async def main() -> list[str]:
        return [str(await workflow.run(user_msg="Weather in Paris?")) for _ in range(2)]

    assert all("Paris is sunny" in answer for answer in asyncio.run(main()))
    assert len(traces.traces) == 2  # one episode per run, not per agent or per handoff
    for trace in traces.traces:
        assert trace.outcome.success is True and _meta_names(trace) == ["track"]
    assert "paris.weather" in writer_llm.policy.calls[0][0]["content"]  # the writer sees the researcher's belief
    assert get_binding(workflow) is get_binding(researcher) is get_binding(writer)


def test_react_agent_per_run() -> None:
    from evoharness_bpe_llamaindex.testing import react_action, react_answer
    from llama_index.core.agent.workflow import ReActAgent

    traces = BPETraceHandler()
    llm = TaskScriptedLLM({"Paris": [react_action("track", {"key": "paris.weather", "value": "sunny"}), react_answer("Sunny.")]})
    agent = with_bpe(ReActAgent(tools=[], llm=llm, streaming=False), trace=traces)

    async def main() -> str:
        return str(await agent.run(user_msg="Weather in Paris?"))

    assert "Sunny." in asyncio.run(main())
    (trace,) = traces.traces
    assert trace.outcome.success is True and _meta_names(trace) == ["track"]
    assert len(trace.model_calls) == 2
    for call in trace.model_calls:
        assert sum(1 for m in call.messages if m["role"] == "system") == 1
