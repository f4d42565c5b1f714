"""`evoharness mcp`: serve the workspace to any MCP client.

    evoharness mcp --store experience.db --namespace acme/crm-agent              # stdio
    evoharness mcp --transport http --port 8765 --tenants tenants.json           # HTTP, per tenant

Registered through the ``evoharness.commands`` entry-point group; ``evoharness-mcp`` is the
same command on its own.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from evoharness_bpe import TraceWriter, telemetry
from evoharness_bpe.exceptions import EvoHarnessError, UserError
from evoharness_bpe.stores.base import ExperienceStore, Namespace, validate_namespace

__all__ = ["register", "main", "open_store", "parse_namespace", "default_store_path"]


def default_store_path() -> Path:
    """Where Experience lives when ``--store`` is not given: the user's data folder."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "evoharness" / "experience.db"


def open_store(spec: str) -> ExperienceStore:
    """A PostgreSQL DSN (``postgresql://…``), ``memory``, or an SQLite file path."""
    if spec.startswith(("postgresql://", "postgres://")) or "dbname=" in spec:
        from evoharness_bpe import PostgresExperienceStore

        return PostgresExperienceStore(spec)
    if spec == "memory":
        from evoharness_bpe import MemoryExperienceStore

        return MemoryExperienceStore()
    from evoharness_bpe import SQLiteExperienceStore

    return SQLiteExperienceStore(spec)


def parse_namespace(text: str) -> Namespace:
    """``acme/crm-agent`` → ``("acme", "crm-agent")``."""
    return validate_namespace([part for part in text.split("/")])


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of `evoharness mcp`."""
    parser.add_argument("--transport", choices=["stdio", "http"], default="stdio",
                        help="stdio for desktop clients, http for streamable HTTP at /mcp (default: %(default)s)")
    parser.add_argument("--host", default="127.0.0.1", help="HTTP address to bind (default: %(default)s, loopback)")
    parser.add_argument("--port", type=int, default=8765, help="HTTP port (default: %(default)s)")
    parser.add_argument("--store", default=None,
                        help=f"SQLite file, PostgreSQL DSN or 'memory' (default: {default_store_path()})")
    parser.add_argument("--namespace", default="default",
                        help="Experience namespace of every session, segments joined by '/' (default: %(default)s)")
    parser.add_argument("--tenants", default=None,
                        help='HTTP only: JSON file {"tokens": {"TOKEN": ["tenant", "agent"]}}; each request\'s '
                        "bearer token picks the session's namespace")
    parser.add_argument("--tenant-header", default="authorization",
                        help="header carrying the tenant token (default: %(default)s, as 'Bearer TOKEN')")
    parser.add_argument("--max-sessions", type=int, default=100,
                        help="HTTP only: MCP sessions open at once, all tenants together (default: %(default)s)")
    parser.add_argument("--max-sessions-per-tenant", type=int, default=20,
                        help="HTTP only, with --tenants: sessions one tenant may hold open (default: %(default)s)")
    parser.add_argument("--session-idle", type=float, default=300.0,
                        help="HTTP only: seconds without a request after which a session is closed (default: %(default)s)")
    parser.add_argument("--traces", default=None, help="append each finished episode's trace to this JSONL file")
    parser.add_argument("--goal", default="the user's current task",
                        help="goal of an episode opened by a meta-action before start_episode (default: %(default)r)")
    parser.add_argument("--dashboard-tokens", type=int, default=600, help="dashboard token budget (default: %(default)s)")
    parser.add_argument("--ablate", nargs="+", choices=["belief", "progress", "experience"], default=[],
                        help="switch workspace parts off: they leave the tools and the dashboard, and their meta-actions are refused")
    parser.add_argument("--max-meta-actions", type=int, default=None,
                        help="meta-action calls an episode may make (default: no cap)")


def run(args: argparse.Namespace) -> int:
    """Start the server the flags describe; return when it stops."""
    from .serve import HTTPLimits, serve_http, serve_stdio
    from .server import BPEServer
    from .session import SessionSettings
    from .tenants import TenantMap

    if args.tenants and args.transport != "http":
        raise UserError("--tenants needs --transport http: over stdio the operator fixes --namespace")
    if not 1 <= args.port <= 65535:
        raise UserError(f"--port must be in 1..65535, not {args.port}")
    limits = HTTPLimits(max_sessions=args.max_sessions, max_sessions_per_tenant=args.max_sessions_per_tenant,
                        idle_seconds=args.session_idle)
    store = open_store(args.store or str(default_store_path()))
    traces = TraceWriter(args.traces) if args.traces else None
    tenants = TenantMap.load(args.tenants, header=args.tenant_header) if args.tenants else None
    parts = tuple(p for p in ("belief", "progress", "experience") if p not in (getattr(args, "ablate", None) or ()))
    settings = SessionSettings(store=store, default_goal=args.goal, dashboard_tokens=args.dashboard_tokens, traces=traces,
                               parts=parts, max_meta_actions=getattr(args, "max_meta_actions", None))
    bpe = BPEServer(settings, namespace=parse_namespace(args.namespace), tenants=tenants)
    stop_tracing = telemetry.configure_from_env("evoharness-mcp")  # spans over OTLP when OTEL_EXPORTER_OTLP_* asks
    try:
        if args.transport == "stdio":
            asyncio.run(serve_stdio(bpe))
        else:
            print(f"evoharness mcp: serving http://{args.host}:{args.port}/mcp", file=sys.stderr, flush=True)
            serve_http(bpe, host=args.host, port=args.port, limits=limits)
    except KeyboardInterrupt:
        pass
    finally:
        if stop_tracing is not None:
            stop_tracing()
        if traces is not None:
            traces.close()
        store.close()
    return 0


def register(commands: Any) -> None:
    """Add `mcp` to the `evoharness` command line."""
    parser = commands.add_parser("mcp", help="serve the workspace as a Model Context Protocol server")
    add_arguments(parser)
    parser.set_defaults(handler=run)


def main(argv: Sequence[str] | None = None) -> int:
    """`evoharness-mcp`: the same command outside the `evoharness` CLI."""
    parser = argparse.ArgumentParser(prog="evoharness-mcp", description="Serve the BPE workspace over MCP.")
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run(args)
    except EvoHarnessError as exc:
        print(f"evoharness mcp: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
