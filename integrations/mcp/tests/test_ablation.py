"""Part switches and the meta-action cap of the MCP server, over stdio with the SDK's client."""

from __future__ import annotations

import asyncio

from evoharness_bpe_mcp.testing import stdio_session, text


def test_a_part_switched_off_is_not_offered_and_its_verb_is_refused() -> None:
    async def main() -> None:
        async with stdio_session("--store", "memory", "--ablate", "experience", "--max-meta-actions", "3") as session:
            names = [t.name for t in (await session.list_tools()).tools]
            assert names == ["track", "commit", "start_episode", "finish_episode"]
            assert not (await session.call_tool("start_episode", {"goal": "Migrate 40 records"})).isError
            refused = await session.call_tool("recall", {"query": "rate limit"})
            assert refused.isError
            assert "recall is not available: Experience is switched off" in text(refused)
            dashboard = text(await session.read_resource("bpe://dashboard"))
            assert "HINTS" not in dashboard
            assert not (await session.call_tool("track", {"key": "a", "value": "1"})).isError
            assert not (await session.call_tool("track", {"key": "b", "value": "2"})).isError
            capped = await session.call_tool("track", {"key": "c", "value": "3"})  # the fourth call
            assert capped.isError and "meta-action budget of this episode is spent (3 calls)" in text(capped)
            assert "c =" not in text(await session.read_resource("bpe://dashboard"))

    asyncio.run(main())
