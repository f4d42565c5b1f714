"""`evoharness mcp` sends its episodes' GenAI spans over OTLP when OTEL_EXPORTER_OTLP_ENDPOINT is set."""

from __future__ import annotations

import asyncio
import time

import pytest

pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="the otel extra is not installed")

from evoharness_bpe.testing.otlp import OTLPReceiver

from evoharness_bpe_mcp.testing import stdio_session, text


def test_an_episode_over_stdio_reaches_an_otlp_receiver(monkeypatch: pytest.MonkeyPatch) -> None:
    with OTLPReceiver() as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer collector-token-1234")
        monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)

        async def main() -> None:
            async with stdio_session("--store", "memory", "--namespace", "acme/agent") as session:
                await session.call_tool("start_episode", {"goal": "Migrate 40 records", "subgoals": ["batch 1"]})
                for name, args in (("track", {"key": "api.rate_limit", "value": "5 requests/s"}),
                                   ("commit", {"subgoal": "batch 1", "status": "done"}),
                                   ("note", {"text": "The CRM API refuses phone numbers without a country code"}),
                                   ("recall", {"query": "phone country code"})):
                    assert not (await session.call_tool(name, args)).isError
                finished = await session.call_tool("finish_episode", {"success": True})
                assert not finished.isError, text(finished)

        asyncio.run(main())  # the server exits with the session and flushes its spans
        deadline = time.monotonic() + 10
        while not any(s["name"] == "invoke_agent evoharness" for s in receiver.spans()) and time.monotonic() < deadline:
            time.sleep(0.1)
        spans = receiver.spans()
    assert receiver.headers[0]["authorization"] == "Bearer collector-token-1234"
    names = sorted(s["name"] for s in spans)
    assert names == ["create_memory", "invoke_agent evoharness", "search_memory", "upsert_memory", "upsert_memory"]
    (agent,) = [s for s in spans if s["name"] == "invoke_agent evoharness"]
    assert all(s["parent"] == agent["span_id"] for s in spans if s is not agent)
    assert agent["attributes"]["evoharness.namespace"] == ["acme", "agent"]
    assert agent["attributes"]["evoharness.outcome.success"] is True
    stores = {s["attributes"]["gen_ai.memory.store.id"] for s in spans if s is not agent}
    assert stores == {"belief", "progress", "experience/acme/agent"}
    assert "country code" not in str(spans)  # content stays off by default
