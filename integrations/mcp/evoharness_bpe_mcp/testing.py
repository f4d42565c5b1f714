"""Test helpers shipped with the package: start `evoharness mcp` as a subprocess and drive it
with the SDK's own client."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client
import httpx
from mcp.client.streamable_http import streamable_http_client

__all__ = ["Notifications", "stdio_session", "http_session", "start_http_server", "text"]


class Notifications:
    """Collects the server's notifications (resource updates) for a client session."""

    def __init__(self) -> None:
        self.updated: list[str] = []

    async def __call__(self, message: Any) -> None:
        if isinstance(message, types.ServerNotification) and isinstance(message.root, types.ResourceUpdatedNotification):
            self.updated.append(str(message.root.params.uri))


@contextlib.asynccontextmanager
async def stdio_session(*args: str, notifications: Notifications | None = None) -> AsyncIterator[ClientSession]:
    """An initialised client session with a server started over stdio with `args`."""
    params = StdioServerParameters(command=sys.executable, args=["-m", "evoharness_bpe_mcp", *args], env=dict(os.environ))
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write, message_handler=notifications) as session:
            await session.initialize()
            yield session


@contextlib.asynccontextmanager
async def http_session(url: str, token: str | None, notifications: Notifications | None = None) -> AsyncIterator[ClientSession]:
    """An initialised client session over streamable HTTP, presenting `token` as a bearer token."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx.AsyncClient(headers=headers, timeout=30) as client:
        async with streamable_http_client(url, http_client=client) as (read, write, _session_id):
            async with ClientSession(read, write, message_handler=notifications) as session:
                await session.initialize()
                yield session


def start_http_server(*args: str, timeout: float = 30.0) -> tuple[subprocess.Popen[str], str]:
    """`evoharness mcp --transport http ARGS` on a free loopback port; returns it and its URL."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "evoharness_bpe_mcp", "--transport", "http", "--port", str(port), *args],
        stderr=subprocess.PIPE, text=True, env=dict(os.environ),
    )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return proc, f"http://127.0.0.1:{port}/mcp"
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited: {proc.stderr.read() if proc.stderr else ''}")
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"the server did not listen within {timeout} s")


def text(result: types.CallToolResult | types.ReadResourceResult) -> str:
    """The text of a tool result or a resource."""
    items = result.content if isinstance(result, types.CallToolResult) else result.contents
    return "\n".join(getattr(item, "text", "") for item in items)
