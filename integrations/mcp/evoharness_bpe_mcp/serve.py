"""Transports: stdio for desktop clients, streamable HTTP (loopback by default) for services."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from .server import BPEServer
from .tenants import TenantError

__all__ = ["serve_stdio", "http_app", "serve_http"]


async def serve_stdio(bpe: BPEServer) -> None:
    """Serve one session over standard input and output until the client closes it."""
    from mcp.server.stdio import stdio_server

    try:
        async with stdio_server() as (read, write):
            await bpe.server.run(read, write, bpe.initialization_options())
    finally:
        bpe.close()


def http_app(bpe: BPEServer, *, host: str = "127.0.0.1", port: int = 8765) -> Any:
    """A Starlette app serving MCP at ``/mcp``; requests without a valid tenant token get 401."""
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
    from mcp.server.transport_security import TransportSecuritySettings
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    loopback = host in ("127.0.0.1", "localhost", "::1")
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=loopback,
        allowed_hosts=[f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}"] if loopback else [],
        allowed_origins=[f"http://127.0.0.1:{port}", f"http://localhost:{port}"] if loopback else [],
    )
    manager = StreamableHTTPSessionManager(app=bpe.server, security_settings=security)

    class Endpoint:  # a class instance, so Starlette's Route treats it as an ASGI app
        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            await handle(scope, receive, send)

    async def handle(scope: Any, receive: Any, send: Any) -> None:
        if bpe.tenants is not None:
            headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope.get("headers", [])}
            try:
                bpe.tenants.resolve(headers)
            except TenantError as exc:
                await JSONResponse({"error": str(exc)}, status_code=401)(scope, receive, send)
                return
        await manager.handle_request(scope, receive, send)

    @contextlib.asynccontextmanager
    async def lifespan(_app: Any) -> AsyncIterator[None]:
        async with manager.run():
            try:
                yield
            finally:
                bpe.close()

    return Starlette(routes=[Route("/mcp", endpoint=Endpoint())], lifespan=lifespan)


def serve_http(bpe: BPEServer, *, host: str = "127.0.0.1", port: int = 8765) -> None:
    """Serve streamable HTTP at ``http://HOST:PORT/mcp`` until interrupted."""
    import uvicorn

    uvicorn.run(http_app(bpe, host=host, port=port), host=host, port=port, log_level="warning")
