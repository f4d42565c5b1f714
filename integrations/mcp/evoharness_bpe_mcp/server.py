"""The workspace as an MCP server: four meta-actions and two episode tools, the dashboard as a
resource and as a prompt, one workspace per MCP session.

Built on the official SDK's low-level `Server`, so the tools keep the exact JSON schemas and
error texts of `Workspace.act` (the SDK's own argument validation is off: a malformed call gets
the workspace's readable error and changes nothing).
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib import resources
from typing import Any
from weakref import WeakKeyDictionary

from mcp import types
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.models import InitializationOptions
from pydantic import AnyUrl

from evoharness_bpe import ActionResult, __version__
from evoharness_bpe.actions import tool_specs
from evoharness_bpe.stores.base import Namespace, validate_namespace

from .session import EpisodeSession, FinishEpisodeArgs, SessionSettings, StartEpisodeArgs
from .tenants import TenantError, TenantMap

__all__ = ["BPEServer", "DASHBOARD_URI", "EPISODE_TOOLS"]

DASHBOARD_URI = "bpe://dashboard"
DASHBOARD_PROMPT = "dashboard"
INSTRUCTIONS = resources.files(__package__).joinpath("prompts/instructions.txt").read_text("utf-8")
EPISODE_TOOLS = ("start_episode", "finish_episode")


def _episode_tools() -> list[types.Tool]:
    start = StartEpisodeArgs.model_json_schema()
    finish = FinishEpisodeArgs.model_json_schema()
    return [
        types.Tool(
            name="start_episode",
            description="Open an episode for a new task: its goal and, optionally, the subgoals to track.",
            inputSchema={
                "type": "object",
                "properties": {
                    "goal": {"type": "string", "description": start["properties"]["goal"]["description"]},
                    "subgoals": {"type": "array", "items": {"type": "string"},
                                 "description": start["properties"]["subgoals"]["description"]},
                },
                "required": ["goal"],
                "additionalProperties": False,
            },
        ),
        types.Tool(
            name="finish_episode",
            description="Close the episode: say whether the task succeeded; recalled lessons are credited.",
            inputSchema={
                "type": "object",
                "properties": {"success": {"type": "boolean", "description": finish["properties"]["success"]["description"]}},
                "required": ["success"],
                "additionalProperties": False,
            },
        ),
    ]


class _SubscribableServer(Server[Any, Any]):
    """The SDK's server announcing resource subscriptions, which it implements but leaves off."""

    def create_initialization_options(
        self, notification_options: NotificationOptions | None = None, experimental_capabilities: dict[str, dict[str, Any]] | None = None
    ) -> InitializationOptions:
        options = super().create_initialization_options(notification_options, experimental_capabilities)
        if options.capabilities.resources is not None:
            options.capabilities.resources.subscribe = True
        return options


class BPEServer:
    """One MCP server; a `EpisodeSession` per connected MCP session.

    `namespace` is the Experience namespace of every session, unless `tenants` maps each HTTP
    request's token to one; a session stays in the tenant of its first request.
    """

    def __init__(
        self,
        settings: SessionSettings,
        *,
        namespace: Namespace = ("default",),
        tenants: TenantMap | None = None,
    ) -> None:
        self.settings = settings
        self.namespace = validate_namespace(namespace)
        self.tenants = tenants
        self._sessions: WeakKeyDictionary[Any, EpisodeSession] = WeakKeyDictionary()
        self.server: Server[Any, Any] = _SubscribableServer("evoharness-bpe", version=__version__, instructions=INSTRUCTIONS)
        self._tools = [
            types.Tool(name=spec.name, description=spec.description, inputSchema=spec.parameters)
            for spec in tool_specs()
            if spec.name in settings.meta_actions  # a part switched off is not offered (and refused if called)
        ] + _episode_tools()
        self._register()

    # -- sessions ----------------------------------------------------------------------------
    def namespace_for(self, headers: Mapping[str, str] | None) -> Namespace:
        """The namespace a request speaks for: the tenant of its token, or the fixed one."""
        if self.tenants is None:
            return self.namespace
        return self.tenants.resolve(headers or {})

    def _session(self) -> EpisodeSession:
        ctx = self.server.request_context
        request = ctx.request
        namespace = self.namespace_for(getattr(request, "headers", None))
        session = self._sessions.get(ctx.session)
        if session is None:
            session = EpisodeSession(namespace=namespace, settings=self.settings)
            self._sessions[ctx.session] = session
        elif session.namespace != namespace:
            raise TenantError("this MCP session belongs to another tenant")
        return session

    def open_sessions(self) -> list[EpisodeSession]:
        """The sessions still alive (for shutdown)."""
        return list(self._sessions.values())

    def close(self) -> None:
        """Write the trace of every episode still open (outcome unknown)."""
        for session in self.open_sessions():
            ws = session.workspace
            if ws is not None and self.settings.traces is not None:
                self.settings.traces.write(ws.trace(framework="mcp", metadata={"namespace": list(session.namespace), "unfinished": True}))
                session.workspace = None

    def initialization_options(self) -> InitializationOptions:
        """The options a transport starts the server with."""
        return self.server.create_initialization_options()

    # -- handlers ----------------------------------------------------------------------------
    def _register(self) -> None:
        server = self.server

        @server.list_tools()
        async def list_tools() -> list[types.Tool]:
            return [tool.model_copy(deep=True) for tool in self._tools]

        @server.call_tool(validate_input=False)
        async def call_tool(name: str, arguments: dict[str, Any]) -> types.CallToolResult:
            try:
                session = self._session()
            except TenantError as exc:
                return _result(ActionResult(ok=False, content=f"Error: {exc}"))
            async with session.lock:
                if name == "start_episode":
                    result = await session.start(arguments)
                elif name == "finish_episode":
                    result = await session.finish(arguments)
                else:
                    result = await session.act(name, arguments)
                if result.ok and DASHBOARD_URI in session.subscribed:
                    await server.request_context.session.send_resource_updated(AnyUrl(DASHBOARD_URI))
            return _result(result)

        @server.list_resources()
        async def list_resources() -> list[types.Resource]:
            return [
                types.Resource(
                    uri=AnyUrl(DASHBOARD_URI),
                    name="dashboard",
                    title="BPE dashboard",
                    description="Belief, Progress and recalled Experience of this session's episode.",
                    mimeType="text/plain",
                )
            ]

        @server.read_resource()
        async def read_resource(uri: AnyUrl) -> str:
            if str(uri) != DASHBOARD_URI:
                raise ValueError(f"unknown resource {uri}; this server has {DASHBOARD_URI}")
            session = self._session()
            async with session.lock:
                return await session.dashboard()

        @server.subscribe_resource()
        async def subscribe(uri: AnyUrl) -> None:
            if str(uri) != DASHBOARD_URI:
                raise ValueError(f"unknown resource {uri}; this server has {DASHBOARD_URI}")
            self._session().subscribed.add(DASHBOARD_URI)

        @server.unsubscribe_resource()
        async def unsubscribe(uri: AnyUrl) -> None:
            self._session().subscribed.discard(str(uri))

        @server.list_prompts()
        async def list_prompts() -> list[types.Prompt]:
            return [
                types.Prompt(
                    name=DASHBOARD_PROMPT,
                    title="BPE dashboard",
                    description="The current dashboard, to put into the system message before each model call.",
                )
            ]

        @server.get_prompt()
        async def get_prompt(name: str, arguments: dict[str, str] | None) -> types.GetPromptResult:
            if name != DASHBOARD_PROMPT:
                raise ValueError(f"unknown prompt {name!r}; this server has {DASHBOARD_PROMPT!r}")
            session = self._session()
            async with session.lock:
                text = await session.dashboard()
            return types.GetPromptResult(
                description="The BPE dashboard of this session's episode.",
                messages=[types.PromptMessage(role="user", content=types.TextContent(type="text", text=text))],
            )


def _result(result: ActionResult) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=result.content)], isError=not result.ok)
