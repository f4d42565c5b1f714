"""The server over streamable HTTP: per-tenant sessions chosen by token, never by tool arguments."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
from evoharness_bpe import read_traces
from pydantic import AnyUrl

from evoharness_bpe_mcp.testing import Notifications, http_session, text

DASHBOARD = AnyUrl("bpe://dashboard")
LESSON = "Invoices from the Zurich office need the VAT id before upload"


def test_two_tenants_never_see_each_other_s_experience(http_server: dict[str, Any]) -> None:
    url, (acme, globex) = http_server["url"], http_server["tokens"]

    async def main() -> None:
        notes = Notifications()
        async with http_session(url, acme, notes) as a:
            await a.call_tool("start_episode", {"goal": "Upload invoices"})
            await a.subscribe_resource(DASHBOARD)
            assert not (await a.call_tool("note", {"text": LESSON, "tags": ["invoices"]})).isError
            assert not (await a.call_tool("finish_episode", {"success": True})).isError
            assert "bpe://dashboard" in notes.updated

        async with http_session(url, globex) as b:
            await b.call_tool("start_episode", {"goal": "Upload invoices"})
            found = text(await b.call_tool("recall", {"query": "Zurich VAT invoices upload"}))
            assert "Zurich office" not in found
            # a namespace in the arguments is refused, not honoured
            forged = await b.call_tool("recall", {"query": "Zurich VAT", "namespace": ["acme", "agent"]})
            assert forged.isError and "Zurich office" not in text(forged)
            await b.call_tool("finish_episode", {"success": False})

        async with http_session(url, acme) as a2:  # the same tenant, a new session: it recalls
            await a2.call_tool("start_episode", {"goal": "Upload invoices"})
            assert "Zurich office" in text(await a2.call_tool("recall", {"query": "Zurich VAT invoices upload"}))
            await a2.call_tool("finish_episode", {"success": True})

    asyncio.run(main())
    namespaces = [t.metadata["namespace"] for t in read_traces(http_server["traces"])]
    assert namespaces == [["acme", "agent"], ["globex", "agent"], ["acme", "agent"]]


def test_requests_without_a_known_token_are_refused(http_server: dict[str, Any]) -> None:
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
    accept = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    with httpx.Client(timeout=10) as client:
        assert client.post(http_server["url"], json=init, headers=accept).status_code == 401
        wrong = {**accept, "Authorization": "Bearer not-a-tenant-token"}
        assert client.post(http_server["url"], json=init, headers=wrong).status_code == 401
        ok = {**accept, "Authorization": f"Bearer {http_server['tokens'][0]}"}
        assert client.post(http_server["url"], json=init, headers=ok).status_code == 200


def test_a_session_cannot_change_tenant_midway(http_server: dict[str, Any]) -> None:
    url, (acme, globex) = http_server["url"], http_server["tokens"]
    accept = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}

    def call(client: httpx.Client, token: str, sid: str, rid: int, name: str, args: dict[str, Any]) -> str:
        body = {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": {"name": name, "arguments": args}}
        headers = {**accept, "Authorization": f"Bearer {token}", "mcp-session-id": sid, "mcp-protocol-version": "2025-06-18"}
        return client.post(url, json=body, headers=headers).text

    with httpx.Client(timeout=10) as client:
        first = client.post(url, json=init, headers={**accept, "Authorization": f"Bearer {acme}"})
        sid = first.headers["mcp-session-id"]
        client.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"},
                    headers={**accept, "Authorization": f"Bearer {acme}", "mcp-session-id": sid, "mcp-protocol-version": "2025-06-18"})
        assert "started" in call(client, acme, sid, 2, "start_episode", {"goal": "Upload invoices"})
        assert '"isError":false' in call(client, acme, sid, 3, "note", {"text": LESSON}).replace(" ", "")
        assert "Zurich office" in call(client, acme, sid, 4, "recall", {"query": "Zurich VAT"})
        hijack = call(client, globex, sid, 5, "recall", {"query": "Zurich VAT"})
        # refused at the transport, as an unknown session would be (test_http_sessions.py: every method)
        assert "Session not found" in hijack and "Zurich office" not in hijack
