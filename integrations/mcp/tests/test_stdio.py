"""The server over stdio, driven by the SDK's client: tools, an episode, the dashboard, errors."""

from __future__ import annotations

import asyncio
from pathlib import Path

from evoharness_bpe import Workspace, read_traces
from pydantic import AnyUrl

from evoharness_bpe_mcp.testing import Notifications, stdio_session, text

DASHBOARD = AnyUrl("bpe://dashboard")


def test_tools_are_the_workspace_meta_actions_and_the_episode_tools(tmp_path: Path) -> None:
    async def main() -> None:
        async with stdio_session("--store", "memory") as session:
            tools = {t.name: t for t in (await session.list_tools()).tools}
            assert list(tools) == ["track", "commit", "recall", "note", "start_episode", "finish_episode"]
            for spec in Workspace("g").tools:
                assert tools[spec.name].inputSchema == spec.parameters
                assert tools[spec.name].description == spec.description
            assert tools["finish_episode"].inputSchema["required"] == ["success"]

    asyncio.run(main())


def test_an_episode_over_stdio_updates_the_dashboard_and_writes_a_trace(tmp_path: Path) -> None:
    traces = tmp_path / "traces.jsonl"
    notes = Notifications()

    async def main() -> None:
        async with stdio_session("--store", str(tmp_path / "x.db"), "--namespace", "acme/agent",
                                 "--traces", str(traces), notifications=notes) as session:
            started = await session.call_tool("start_episode", {"goal": "Migrate 40 records", "subgoals": ["batch 1", "batch 2"]})
            assert not started.isError, text(started)
            await session.subscribe_resource(DASHBOARD)
            before = text(await session.read_resource(DASHBOARD))
            assert "Migrate 40 records" in before and "batch 1" in before

            tracked = await session.call_tool("track", {"key": "api.rate_limit", "value": "5 requests/s"})
            assert not tracked.isError, text(tracked)
            after_track = text(await session.read_resource(DASHBOARD))
            assert "api.rate_limit" in after_track and "5 requests/s" in after_track

            committed = await session.call_tool("commit", {"subgoal": "batch 1", "status": "done"})
            assert not committed.isError and "todo → done" in text(committed)
            noted = await session.call_tool("note", {"text": "The CRM API refuses phone numbers without a country code"})
            assert not noted.isError, text(noted)
            recalled = await session.call_tool("recall", {"query": "phone country code"})
            assert "country code" in text(recalled)

            prompt = await session.get_prompt("dashboard")
            assert "api.rate_limit" in prompt.messages[0].content.text

            finished = await session.call_tool("finish_episode", {"success": True})
            assert not finished.isError and "finished (success)" in text(finished)
            # the client is notified after each call that changed the workspace
            assert notes.updated.count("bpe://dashboard") >= 5

    asyncio.run(main())
    [trace] = list(read_traces(traces))
    assert trace.framework == "mcp" and trace.outcome.success is True
    assert [e.name for e in trace.meta_actions] == ["track", "commit", "note", "recall"]
    assert trace.metadata["namespace"] == ["acme", "agent"]


def test_a_malformed_call_returns_a_readable_error_and_changes_nothing(tmp_path: Path) -> None:
    async def main() -> None:
        async with stdio_session("--store", "memory") as session:
            await session.call_tool("start_episode", {"goal": "Review Q3", "subgoals": ["flagged"]})
            await session.call_tool("track", {"key": "rules", "value": "v2"})
            before = state_lines(text(await session.read_resource(DASHBOARD)))
            bad = [
                ("commit", {"subgoal": "flagged", "status": "finished"}),
                ("track", {"key": 42}),
                ("commit", {"status": "done"}),
                ("note", {}),
                ("teleport", {"to": "mars"}),
                ("start_episode", {"goal": "another"}),       # one is open
                ("finish_episode", {"success": "yes"}),
            ]
            for name, args in bad:
                result = await session.call_tool(name, args)
                assert result.isError, (name, text(result))
                assert text(result).startswith("Error:"), text(result)
                # the state is exactly as before; only the cost line counts the refused call
                assert state_lines(text(await session.read_resource(DASHBOARD))) == before, name
            status = await session.call_tool("commit", {"subgoal": "flagged", "status": "finished"})
            assert "status" in text(status)  # the error names the field

    asyncio.run(main())


def state_lines(dashboard: str) -> list[str]:
    return [line for line in dashboard.splitlines() if not line.startswith("COST:")]


def test_a_meta_action_before_start_episode_opens_one_with_the_default_goal() -> None:
    async def main() -> None:
        async with stdio_session("--store", "memory", "--goal", "Answer the user's question") as session:
            assert "No open episode" in text(await session.read_resource(DASHBOARD))
            assert not (await session.call_tool("track", {"key": "user.lang", "value": "fr"})).isError
            dashboard = text(await session.read_resource(DASHBOARD))
            assert "Answer the user's question" in dashboard and "user.lang" in dashboard

    asyncio.run(main())
