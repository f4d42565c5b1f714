"""MCP sessions over HTTP: owned by their tenant for every method, and bounded in number and time.

A real `evoharness mcp --transport http` on loopback, driven with raw HTTP so that each method
(POST, the GET notification stream, DELETE) is tried with another tenant's token.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from evoharness_bpe_mcp.testing import start_http_server

TOKENS = {"token-acme-123456": ["acme", "agent"], "token-globex-123456": ["globex", "agent"]}
ACME, GLOBEX = list(TOKENS)
VERSION = "2025-06-18"
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": VERSION, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}


def _server(tmp_path: Path, *flags: str) -> tuple[subprocess.Popen[str], str]:
    tenants = tmp_path / "tenants.json"
    tenants.write_text(json.dumps({"tokens": TOKENS}))
    return start_http_server("--store", str(tmp_path / "experience.db"), "--tenants", str(tenants), *flags)


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Any]:
    procs: list[subprocess.Popen[str]] = []

    def start(*flags: str) -> str:
        folder = tmp_path / f"server{len(procs)}"
        folder.mkdir()
        proc, url = _server(folder, *flags)
        procs.append(proc)
        return url

    yield start
    for proc in procs:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


def _headers(token: str, sid: str | None = None) -> dict[str, str]:
    headers = {**ACCEPT, "Authorization": f"Bearer {token}", "mcp-protocol-version": VERSION}
    if sid:
        headers["mcp-session-id"] = sid
    return headers


def _open(client: httpx.Client, url: str, token: str) -> httpx.Response:
    """Initialize a session; the response carries its id when it was admitted."""
    first = client.post(url, json=INIT, headers=_headers(token))
    if first.status_code == 200:
        sid = first.headers["mcp-session-id"]
        client.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=_headers(token, sid))
    return first


def _call(client: httpx.Client, url: str, token: str, sid: str, name: str, args: dict[str, Any], rid: int = 2) -> httpx.Response:
    body = {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": {"name": name, "arguments": args}}
    return client.post(url, json=body, headers=_headers(token, sid))


def _eventually(check: Any, seconds: float = 10.0) -> bool:
    """Whether `check()` comes true within `seconds` (a session ends a moment after its DELETE)."""
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def test_a_session_answers_only_its_tenant_for_every_method(serve: Any) -> None:
    url = serve()
    with httpx.Client(timeout=10) as client:
        sid = _open(client, url, ACME).headers["mcp-session-id"]
        assert "started" in _call(client, url, ACME, sid, "start_episode", {"goal": "Upload invoices"}).text

        stolen_post = _call(client, url, GLOBEX, sid, "recall", {"query": "invoices"}, rid=3)
        with client.stream("GET", url, headers={**_headers(GLOBEX, sid), "Accept": "text/event-stream"}) as stolen_get:
            get_status = stolen_get.status_code
            get_body = stolen_get.read()
        stolen_delete = client.delete(url, headers=_headers(GLOBEX, sid))
        unknown = client.delete(url, headers=_headers(GLOBEX, "0" * 32))

        assert stolen_post.status_code == 404 and get_status == 404 and stolen_delete.status_code == 404
        # refused exactly as an id that does not exist: nothing tells the attacker it is live
        assert stolen_delete.text == unknown.text == get_body.decode() and unknown.status_code == 404

        # the victim's session is untouched: its next call works, and only its owner may end it
        again = _call(client, url, ACME, sid, "track", {"key": "batch", "value": "1"}, rid=4)
        assert again.status_code == 200 and '"isError":false' in again.text.replace(" ", "")
        assert client.delete(url, headers=_headers(ACME, sid)).status_code == 200
        assert _call(client, url, ACME, sid, "track", {"key": "batch", "value": "2"}, rid=5).status_code == 404


def test_sessions_are_capped_per_tenant_and_in_all(serve: Any) -> None:
    url = serve("--max-sessions", "3", "--max-sessions-per-tenant", "2")
    with httpx.Client(timeout=10) as client:
        a1, a2 = (_open(client, url, ACME) for _ in range(2))
        assert a1.status_code == a2.status_code == 200
        refused = _open(client, url, ACME)
        assert refused.status_code == 503 and "this tenant" in refused.text
        assert _open(client, url, GLOBEX).status_code == 200          # another tenant still gets one
        assert _open(client, url, GLOBEX).status_code == 503          # the server holds 3 in all
        assert client.delete(url, headers=_headers(ACME, a1.headers["mcp-session-id"])).status_code == 200
        assert _eventually(lambda: _open(client, url, ACME).status_code == 200)  # a closed session frees its slot


def test_idle_sessions_expire_and_free_their_slots(serve: Any) -> None:
    url = serve("--max-sessions-per-tenant", "1", "--session-idle", "1")
    with httpx.Client(timeout=10) as client:
        sid = _open(client, url, ACME).headers["mcp-session-id"]
        assert _open(client, url, ACME).status_code == 503
        deadline = time.monotonic() + 15
        while _call(client, url, ACME, sid, "track", {"key": "k", "value": "v"}).status_code != 404:
            assert time.monotonic() < deadline, "the idle session was not closed"
            time.sleep(1.5)
        assert _open(client, url, ACME).status_code == 200


def test_a_huge_subgoal_is_refused_briefly_and_nothing_is_kept(serve: Any) -> None:
    url = serve()
    with httpx.Client(timeout=30) as client:
        sid = _open(client, url, ACME).headers["mcp-session-id"]
        huge = _call(client, url, ACME, sid, "start_episode", {"goal": "Upload", "subgoals": ["batch 1", "x" * 3_800_000]})
        assert huge.status_code == 200 and '"isError":true' in huge.text.replace(" ", "")
        assert len(huge.text) < 2_000                                    # the error echoes a prefix, not the title
        fine = _call(client, url, ACME, sid, "start_episode", {"goal": "Upload", "subgoals": ["batch 1"]}, rid=3)
        assert "episode 1 started" in fine.text                           # the refused one opened nothing
