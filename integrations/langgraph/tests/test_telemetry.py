"""`BPEMiddleware` spans nest under the OpenInference LangChain instrumentation's own spans."""

from __future__ import annotations

import pytest

pytest.importorskip("openinference.instrumentation.langchain", reason="the otel extra is not installed")

from evoharness_bpe.testing.otlp import OTLPReceiver, tracing_to
from evoharness_bpe_langgraph import BPEMiddleware
from evoharness_bpe_langgraph.testing import ScriptedChatModel, ai_tool_call
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from openinference.instrumentation.langchain import LangChainInstrumentor


def test_spans_nest_under_openinference_spans(lookup_tool) -> None:
    model = ScriptedChatModel(responses=[
        ai_tool_call("track", {"key": "api.rate_limit", "value": "5 requests/s"}),
        ai_tool_call("note", {"text": "The weather API allows five requests per second"}),
        ai_tool_call("lookup", {"city": "Paris"}),
        "All done.",
    ])
    agent = create_agent(model, [lookup_tool], middleware=[BPEMiddleware(subgoals=["fetch data"])])
    with OTLPReceiver() as receiver, tracing_to(receiver) as provider:
        instrumentor = LangChainInstrumentor()
        instrumentor.instrument(tracer_provider=provider)
        try:
            agent.invoke({"messages": [HumanMessage("Report the weather")]})
        finally:
            instrumentor.uninstrument()
        spans = receiver.spans()
    ours = [s for s in spans if s["scope"] == "evoharness_bpe"]
    theirs = {s["span_id"]: s for s in spans if s["scope"].startswith("openinference")}
    assert theirs and ours
    assert len({s["trace_id"] for s in spans}) == 1  # one trace: the framework's
    names = sorted(s["name"] for s in ours)
    assert names == ["create_memory", "execute_tool lookup", "invoke_agent evoharness", "upsert_memory"]
    agent_span = next(s for s in ours if s["name"] == "invoke_agent evoharness")
    assert agent_span["parent"] in theirs
    for span in ours:
        if span["name"] in ("upsert_memory", "create_memory"):
            assert span["parent"] in theirs, span["name"]  # inside the tool's OpenInference span
            assert theirs[span["parent"]]["name"] == span["attributes"]["evoharness.meta_action.name"]
    events = [e for s in spans for e in s["events"] if e["name"] == "evoharness.dashboard"]
    assert len(events) == len(model.calls) == 4
    assert agent_span["attributes"]["evoharness.ledger.meta_action_calls"] == 2
