"""`BPENode` and `bpe_tools`: the BPE workspace in a hand-built LangGraph `StateGraph`.

>>> class State(MessagesState, BPEGraphState): ...                     # doctest: +SKIP
>>> bpe = BPENode(subgoals=["fetch", "report"])                         # doctest: +SKIP
>>> graph.add_node("bpe", bpe)                   # renders the dashboard  # doctest: +SKIP
>>> graph.add_node("tools", ToolNode(bpe_tools(bpe) + tools, wrap_tool_call=bpe.wrap_tool_call))  # doctest: +SKIP
>>> graph.add_edge("bpe", "model"); graph.add_edge("tools", "bpe")     # doctest: +SKIP

The model node reads ``state["bpe_dashboard"]`` (or calls `with_dashboard`) to put the
dashboard into its system message.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from evoharness_bpe import ExperienceStore
from langchain_core.messages import BaseMessage, SystemMessage, ToolMessage
from langchain_core.tools import BaseTool
from langgraph.runtime import Runtime
from langgraph.types import Command

from .adapter import NamespaceSpec, WorkspaceAdapter
from .channel import BPE_KEY, DASHBOARD_KEY, RUN_KEY
from .observe import aobserve_tool_call, observe_tool_call
from .tools import meta_action_tools

__all__ = ["BPENode", "bpe_tools", "with_dashboard"]


class BPENode:
    """A graph node that opens the episode on first use and renders the dashboard into state.

    Takes the options of `BPEMiddleware` (store, namespace, goal, subgoals, dashboard_tokens,
    inject). As there, the Experience namespace is the one configured for this run at every
    hook; a stored ``bpe`` value naming another is moved to it, never followed. `wrap_tool_call` / `awrap_tool_call` observe ordinary tools in a `ToolNode`;
    `finish` is a node (or a function) that ends the episode.
    """

    def __init__(
        self,
        *,
        store: ExperienceStore | Any | None = None,
        namespace: NamespaceSpec = ("default",),
        goal: str | None = None,
        subgoals: Sequence[str] | None = None,
        dashboard_tokens: int = 600,
        inject: str = "full",
        **workspace_options: Any,
    ) -> None:
        self.adapter = WorkspaceAdapter(
            goal=goal,
            subgoals=subgoals,
            store=store,
            namespace=namespace,
            dashboard_tokens=dashboard_tokens,
            inject=inject,
            **workspace_options,
        )
        self.tools: list[BaseTool] = meta_action_tools(self.adapter)

    def __call__(self, state: dict[str, Any], runtime: Runtime) -> dict[str, Any]:
        update: dict[str, Any] = {}
        if not state.get(RUN_KEY):
            thread = getattr(getattr(runtime, "execution_info", None), "thread_id", None)
            update[RUN_KEY] = thread or uuid.uuid4().hex
        if not state.get(BPE_KEY):
            update[BPE_KEY] = self.adapter.new_state(state.get("messages", ()), runtime)
        else:  # a state from another namespace (input, restored thread) moves to this run's
            rebound = self.adapter.rebind(state[BPE_KEY], runtime)
            if rebound is not None:
                update[BPE_KEY] = rebound
        view = {**state, **update}
        update[DASHBOARD_KEY] = self.adapter.dashboard(view, runtime)
        return update

    def wrap_tool_call(self, request: Any, handler: Callable[[Any], ToolMessage | Command]) -> ToolMessage | Command:
        return observe_tool_call(self.adapter, request, handler)

    async def awrap_tool_call(
        self, request: Any, handler: Callable[[Any], Awaitable[ToolMessage | Command]]
    ) -> ToolMessage | Command:
        return await aobserve_tool_call(self.adapter, request, handler)

    def finish(self, state: dict[str, Any], runtime: Runtime, success: bool = True) -> dict[str, Any]:
        """End the episode: credit the lessons recalled in it. Usable as a graph node."""
        return self.adapter.finish(state, runtime, success) or {}


def bpe_tools(node: BPENode) -> list[BaseTool]:
    """The four meta-action tools of `node`, for a `ToolNode`."""
    return list(node.tools)


def with_dashboard(state: dict[str, Any], messages: Sequence[BaseMessage], system_prompt: str = "") -> list[BaseMessage]:
    """`messages` behind a system message holding `system_prompt` and the current dashboard."""
    dashboard = state.get(DASHBOARD_KEY) or ""
    text = f"{system_prompt}\n\n{dashboard}" if system_prompt and dashboard else (system_prompt or dashboard)
    return ([SystemMessage(text)] if text else []) + list(messages)
