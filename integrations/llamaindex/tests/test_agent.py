"""with_bpe on real LlamaIndex workflow agents: meta-action tools, one system message, observation."""

from __future__ import annotations

import asyncio

import pytest
from evoharness_bpe import Workspace
from evoharness_bpe.exceptions import UserError
from evoharness_bpe_llamaindex import BPEFunctionAgent, BPEMemoryBlock, BPEReActAgent, get_binding, with_bpe
from evoharness_bpe_llamaindex.testing import ScriptedLLM, react_action, react_answer
from llama_index.core.agent.workflow import AgentWorkflow, FunctionAgent, ReActAgent
from llama_index.core.llms import ChatMessage
from llama_index.core.memory import Memory
from llama_index.core.tools import FunctionTool

TRACK = ("track", {"key": "weather.paris", "value": "sunny, 21 C", "source": "lookup"})
COMMIT = ("commit", {"subgoal": "check paris", "status": "doing"})


async def lookup(city: str) -> str:
    """Look up the weather of a city."""
    if city == "Atlantis":
        raise LookupError("no such city")
    return f"sunny in {city}"


def run(agent: object, **kwargs: object) -> object:
    """``await agent.run(**kwargs)`` from synchronous test code (run() needs a running loop)."""

    async def go() -> object:
        return await agent.run(**kwargs)  # type: ignore[attr-defined]

    return asyncio.run(go())


def systems(messages: list[ChatMessage]) -> list[str]:
    return [m.content or "" for m in messages if m.role.value == "system"]


def new_workspace() -> Workspace:
    return Workspace("Report the weather", subgoals=["check paris", "write report"])


@pytest.mark.parametrize("streaming", [True, False])
def test_function_agent_gets_one_system_message_with_tracked_fact_and_subgoal(streaming: bool) -> None:
    llm = ScriptedLLM([[TRACK, COMMIT], [("lookup", {"city": "Paris"})], "It is sunny in Paris."])
    ws = new_workspace()
    lookup_tool = FunctionTool.from_defaults(async_fn=lookup)
    agent = with_bpe(FunctionAgent(tools=[lookup_tool], llm=llm, system_prompt="You report weather.", streaming=streaming), ws)

    result = run(agent, user_msg="Weather in Paris?")

    assert str(result) == "It is sunny in Paris."
    assert len(llm.calls) == 3
    for call in llm.calls:
        assert len(systems(call)) == 1 and call[0].role.value == "system"
    first, second, third = (systems(c)[0] for c in llm.calls)
    assert first.startswith("You report weather.") and "<bpe-dashboard" in first
    assert "weather.paris" not in first
    # the call after track + commit sees both, in the one system message
    assert "weather.paris" in second and "sunny, 21 C" in second
    assert "[doing] check-paris" in second
    # the ordinary tool's result is observed into Belief
    assert "sunny in Paris" in third
    assert ws.state.belief.facts["weather.paris"].value == "sunny, 21 C"
    assert ws.state.progress.subgoals["check-paris"].status == "doing"
    assert ws.state.belief.facts["tool:lookup:last"].value == "sunny in Paris"
    # the agent's own tool is the same object, the meta-actions were added after it
    assert agent.tools[0] is lookup_tool
    assert [t.metadata.name for t in agent.tools] == ["lookup", "track", "commit", "recall", "note"]
    assert len(ws.snapshots) == 3  # a dashboard before every model call


def test_tool_errors_become_exceptions_and_clear_on_success() -> None:
    llm = ScriptedLLM([[("lookup", {"city": "Atlantis"})], [("lookup", {"city": "Rome"})], "done"])
    ws = new_workspace()
    agent = with_bpe(FunctionAgent(tools=[lookup], llm=llm), ws)
    run(agent, user_msg="go")
    second = systems(llm.calls[1])[0]
    assert "no such city" in second
    assert "tool:lookup" not in ws.state.progress.exceptions  # resolved by the later success
    assert ws.state.belief.facts["tool:lookup:last"].value == "sunny in Rome"


def test_memory_block_and_system_prompt_are_merged_into_one_system_message() -> None:
    llm = ScriptedLLM([[TRACK], "ok"])
    ws = new_workspace()
    notes = Workspace("Unrelated notes", subgoals=["remember this"])
    memory = Memory.from_defaults(memory_blocks=[BPEMemoryBlock(name="notes", workspace=notes)])
    agent = with_bpe(FunctionAgent(tools=[lookup], llm=llm, system_prompt="SYS PROMPT"), ws)
    run(agent, user_msg="go", memory=memory)
    for call in llm.calls:
        (text,) = systems(call)
        assert text.startswith("SYS PROMPT")
        assert "remember this" in text  # the memory block's own dashboard
        assert "Report the weather" in text  # the injected one
    assert "weather.paris" in systems(llm.calls[1])[0]


@pytest.mark.parametrize("system_prompt", ["Be brief.", None])
def test_react_agent_single_system_message_with_injection(system_prompt: str | None) -> None:
    llm = ScriptedLLM(
        [
            react_action("track", {"key": "weather.rome", "value": "rain"}),
            react_action("lookup", {"city": "Rome"}),
            react_answer("Rain in Rome."),
        ]
    )
    ws = new_workspace()
    notes = Workspace("Side notes", subgoals=["memory block text"])
    memory = Memory.from_defaults(memory_blocks=[BPEMemoryBlock(name="notes", workspace=notes)])
    agent = with_bpe(ReActAgent(tools=[lookup], llm=llm, system_prompt=system_prompt), ws)
    result = run(agent, user_msg="Weather in Rome?", memory=memory)
    assert "Rain in Rome." in str(result)
    assert len(llm.calls) == 3
    for call in llm.calls:
        (text,) = systems(call)
        assert "<bpe-dashboard" in text
        assert "memory block text" in text  # ReAct would drop this without a system prompt
        if system_prompt:
            assert system_prompt in text
    assert "weather.rome" in systems(llm.calls[1])[0]
    assert "sunny in Rome" in systems(llm.calls[2])[0]
    assert ws.state.belief.facts["weather.rome"].value == "rain"


def test_agent_workflow_wraps_every_agent_with_one_shared_workspace() -> None:
    research_llm = ScriptedLLM(
        [[TRACK], [("handoff", {"to_agent": "writer", "reason": "facts gathered"})]]
    )
    writer_llm = ScriptedLLM([[("commit", {"subgoal": "write report", "status": "done"})], "Report: sunny."])
    researcher = FunctionAgent(
        name="researcher", description="Finds facts.", tools=[lookup], llm=research_llm, system_prompt="RESEARCH",
        can_handoff_to=["writer"],
    )
    writer = FunctionAgent(name="writer", description="Writes reports.", tools=[], llm=writer_llm, system_prompt="WRITE")
    ws = new_workspace()
    workflow = with_bpe(AgentWorkflow(agents=[researcher, writer], root_agent="researcher"), ws)
    result = run(workflow, user_msg="Report the weather in Paris")
    assert "Report: sunny." in str(result)
    assert get_binding(workflow) is get_binding(researcher) is get_binding(writer)
    for call in [*research_llm.calls, *writer_llm.calls]:
        assert len(systems(call)) == 1
    # the writer's first call already sees what the researcher tracked
    first_writer = systems(writer_llm.calls[0])[0]
    assert first_writer.startswith("WRITE") and "weather.paris" in first_writer
    assert ws.state.progress.subgoals["write-report"].status == "done"


def test_bpe_function_agent_and_react_subclasses() -> None:
    ws = new_workspace()
    llm = ScriptedLLM([[COMMIT], "ok"])
    agent = BPEFunctionAgent(workspace=ws, tools=[lookup], llm=llm, system_prompt="SYS")
    run(agent, user_msg="go")
    assert agent.workspace is ws
    assert "[doing] check-paris" in systems(llm.calls[1])[0]
    react = BPEReActAgent(workspace=new_workspace(), tools=[lookup], llm=ScriptedLLM([react_answer("fine")]))
    assert "fine" in str(run(react, user_msg="go"))
    assert len(react.workspace.snapshots) == 1


def test_window_keeps_system_first_user_and_recent_messages() -> None:
    script = [[("lookup", {"city": f"City{i}"})] for i in range(6)] + ["done"]
    llm = ScriptedLLM(script)
    agent = with_bpe(FunctionAgent(tools=[lookup], llm=llm), new_workspace(), window=4)
    run(agent, user_msg="tour")
    last = llm.calls[-1]
    roles = [m.role.value for m in last]
    assert roles[:2] == ["system", "user"] and last[1].content == "tour"
    assert len(last) <= 2 + 4 and roles[2] == "assistant"  # never starts on an orphan tool result
    assert "City5" in (last[-1].content or "")


def test_misuse_is_refused_with_a_clear_error() -> None:
    ws = new_workspace()
    agent = with_bpe(FunctionAgent(tools=[lookup], llm=ScriptedLLM([])), ws)
    with pytest.raises(UserError, match="already has a BPE workspace"):
        with_bpe(agent, ws)

    async def track(key: str) -> str:
        """A tool of the agent's own named like a meta-action."""
        return key

    with pytest.raises(UserError, match="already has tools named track"):
        with_bpe(FunctionAgent(tools=[track], llm=ScriptedLLM([])), ws)
    with pytest.raises(UserError, match="supports FunctionAgent"):
        with_bpe(object(), ws)  # type: ignore[type-var]
    with pytest.raises(UserError, match="window"):
        with_bpe(FunctionAgent(tools=[], llm=ScriptedLLM([])), ws, window=1)
    with pytest.raises(UserError, match="Workspace"):
        with_bpe(FunctionAgent(tools=[], llm=ScriptedLLM([])), "not a workspace")  # type: ignore[arg-type]
