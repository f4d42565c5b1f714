"""`with_bpe` spans nest under the OpenInference LlamaIndex instrumentation's own spans."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("openinference.instrumentation.llama_index", reason="the otel extra is not installed")

from evoharness_bpe import MemoryExperienceStore
from evoharness_bpe.testing.otlp import OTLPReceiver, tracing_to
from evoharness_bpe_llamaindex import with_bpe
from evoharness_bpe_llamaindex.testing import TaskScriptedLLM
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.tools import FunctionTool
from openinference.instrumentation.llama_index import LlamaIndexInstrumentor


async def fetch(city: str) -> str:
    """Fetch today's weather of a city."""
    return f"{city}: sunny"


SCRIPT = {"Paris": [[("track", {"key": "paris.weather", "value": "sunny"})], [("fetch", {"city": "Paris"})],
                    [("note", {"text": "Fetch the city weather before reporting it"})], "Paris is sunny."]}


def test_spans_nest_under_openinference_spans() -> None:
    agent = with_bpe(FunctionAgent(tools=[FunctionTool.from_defaults(async_fn=fetch)], llm=TaskScriptedLLM(SCRIPT),
                                   system_prompt="You report the weather."), store=MemoryExperienceStore())
    with OTLPReceiver() as receiver, tracing_to(receiver) as provider:
        instrumentor = LlamaIndexInstrumentor()
        instrumentor.instrument(tracer_provider=provider)
        try:
            async def run() -> str:
                return str(await agent.run(user_msg="Weather in Paris?"))

            assert asyncio.run(run()) == "Paris is sunny."
        finally:
            instrumentor.uninstrument()
        spans = receiver.spans()
    ours = [s for s in spans if s["scope"] == "evoharness_bpe"]
    theirs = {s["span_id"]: s for s in spans if s["scope"].startswith("openinference")}
    assert len({s["trace_id"] for s in spans}) == 1
    assert sorted(s["name"] for s in ours) == ["create_memory", "execute_tool fetch", "invoke_agent evoharness", "upsert_memory"]
    for span in ours:
        assert span["parent"] in theirs, span["name"]
    for name in ("upsert_memory", "create_memory"):
        (span,) = [s for s in ours if s["name"] == name]
        assert theirs[span["parent"]]["name"] == "FunctionTool.acall"  # the tool call's own span
    events = [e for s in spans for e in s["events"] if e["name"] == "evoharness.dashboard"]
    assert len(events) == 4 and all(e["attributes"]["evoharness.dashboard.tokens"] > 0 for e in events)
    agent_span = next(s for s in ours if s["name"] == "invoke_agent evoharness")
    assert agent_span["attributes"]["evoharness.outcome.success"] is True
