"""Transports: stdio for desktop clients, streamable HTTP (loopback by default) for services.

Over HTTP an MCP session belongs to the tenant whose token opened it, for every method: each
request carries its tenant to the SDK's transport as the authenticated user, and the transport
answers a request for a session opened by another tenant exactly as one for an unknown session
(404 ``Session not found``) — for ``POST``, the ``GET`` notification stream and ``DELETE``
alike. `HTTPLimits` bounds the sessions a server keeps: in all, per tenant, and how long an
idle one lives.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from evoharness_bpe.exceptions import UserError

from .server import BPEServer
from .tenants import TenantError

__all__ = ["serve_stdio", "http_app", "serve_http", "HTTPLimits"]


@dataclass(frozen=True)
class HTTPLimits:
    """How many MCP sessions an HTTP server keeps, and how long an idle one lives.

    A request that would open a session beyond `max_sessions` (all tenants) or
    `max_sessions_per_tenant` gets 503; open sessions are unaffected, and room frees up as they
    end (``DELETE``) or expire after `idle_seconds` without a request (an open ``GET`` stream
    counts as one in flight).
    """

    max_sessions: int = 100
    """Sessions open at once, all tenants together (the SDK's default is 10,000)."""
    max_sessions_per_tenant: int = 20
    """Sessions one tenant (one namespace) may hold open at once."""
    idle_seconds: float = 300.0
    """A session with no request for this long is closed (the SDK's default is 30 minutes)."""

    def __post_init__(self) -> None:
        if not isinstance(self.max_sessions, int) or self.max_sessions < 1:
            raise UserError("max_sessions must be a positive number of sessions")
        if not isinstance(self.max_sessions_per_tenant, int) or self.max_sessions_per_tenant < 1:
            raise UserError("max_sessions_per_tenant must be a positive number of sessions")
        if not isinstance(self.idle_seconds, (int, float)) or not 0 < self.idle_seconds < float("inf"):
            raise UserError("idle_seconds must be a positive, finite number of seconds")


class _Ticket:
    """One tenant's claim on a session slot, held from the opening request until the session ends."""

    def __init__(self, live: dict[str, int], tenant: str) -> None:
        self.live, self.tenant = live, tenant
        self.running = False
        self._released = False
        live[tenant] = live.get(tenant, 0) + 1

    def release(self) -> None:
        if not self._released:
            self._released = True
            left = self.live[self.tenant] - 1
            if left:
                self.live[self.tenant] = left
            else:
                del self.live[self.tenant]


# The ticket of the request being served; the session's server task inherits it when the
# transport starts that task on the opening request.
_TICKET: contextvars.ContextVar[_Ticket | None] = contextvars.ContextVar("evoharness_mcp_ticket", default=None)


class _CountedServer:
    """The MCP server as the session manager sees it: a session's run releases its ticket when it ends."""

    def __init__(self, server: Any) -> None:
        self._server = server

    async def run(self, *args: Any, **kwargs: Any) -> Any:
        ticket = _TICKET.get()
        if ticket is not None:
            ticket.running = True
        try:
            return await self._server.run(*args, **kwargs)
        finally:
            if ticket is not None:  # however the session ended: DELETE, idle expiry, a crash
                ticket.release()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._server, name)


async def serve_stdio(bpe: BPEServer) -> None:
    """Serve one session over standard input and output until the client closes it."""
    from mcp.server.stdio import stdio_server

    try:
        async with stdio_server() as (read, write):
            await bpe.server.run(read, write, bpe.initialization_options())
    finally:
        bpe.close()


def http_app(bpe: BPEServer, *, host: str = "127.0.0.1", port: int = 8765, limits: HTTPLimits | None = None) -> Any:
    """A Starlette app serving MCP at ``/mcp``; requests without a valid tenant token get 401."""
    from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
    from mcp.server.auth.provider import AccessToken
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
    from mcp.server.transport_security import TransportSecuritySettings
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    limits = limits or HTTPLimits()

    loopback = host in ("127.0.0.1", "localhost", "::1")
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=loopback,
        allowed_hosts=[f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}"] if loopback else [],
        allowed_origins=[f"http://127.0.0.1:{port}", f"http://localhost:{port}"] if loopback else [],
    )
    manager = StreamableHTTPSessionManager(
        app=_CountedServer(bpe.server),  # type: ignore[arg-type]  # the server, with session ends counted
        security_settings=security,
        session_idle_timeout=limits.idle_seconds,
        max_sessions=limits.max_sessions,
    )
    live: dict[str, int] = {}  # open sessions per tenant

    class Endpoint:  # a class instance, so Starlette's Route treats it as an ASGI app
        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            await handle(scope, receive, send)

    async def handle(scope: Any, receive: Any, send: Any) -> None:
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        try:
            namespace = bpe.namespace_for(headers)
        except TenantError as exc:
            await JSONResponse({"error": str(exc)}, status_code=401)(scope, receive, send)
            return
        tenant = json.dumps(list(namespace))
        # The transport binds each session to the user that opened it and checks every later
        # request (POST, GET, DELETE) against it: the tenant is that user (no secret kept).
        scope = {**scope, "user": AuthenticatedUser(AccessToken(token="", client_id=tenant, scopes=[]))}
        ticket = None
        if bpe.tenants is not None and "mcp-session-id" not in headers:  # a request that may open a session
            if live.get(tenant, 0) >= limits.max_sessions_per_tenant:
                await _too_many(f"Too many open sessions for this tenant ({limits.max_sessions_per_tenant})")(scope, receive, send)
                return
            ticket = _Ticket(live, tenant)
        token = _TICKET.set(ticket)
        try:
            await manager.handle_request(scope, receive, send)
        finally:
            _TICKET.reset(token)
            if ticket is not None and not ticket.running:  # no session was started for it
                ticket.release()

    @contextlib.asynccontextmanager
    async def lifespan(_app: Any) -> AsyncIterator[None]:
        async with manager.run():
            try:
                yield
            finally:
                bpe.close()

    return Starlette(routes=[Route("/mcp", endpoint=Endpoint())], lifespan=lifespan)


def _too_many(message: str) -> Any:
    """A 503 with a JSON-RPC error body, as the SDK answers at its own session limit."""
    from starlette.responses import JSONResponse

    body = {"jsonrpc": "2.0", "id": "server-error", "error": {"code": -32603, "message": message}}
    return JSONResponse(body, status_code=503)


def serve_http(bpe: BPEServer, *, host: str = "127.0.0.1", port: int = 8765, limits: HTTPLimits | None = None) -> None:
    """Serve streamable HTTP at ``http://HOST:PORT/mcp`` until interrupted."""
    import uvicorn

    uvicorn.run(http_app(bpe, host=host, port=port, limits=limits), host=host, port=port, log_level="warning")
