"""The environment adapter: an ordinary tool call, observed into the ``bpe`` channel.

Used as `BPEMiddleware.wrap_tool_call` and as `ToolNode(wrap_tool_call=...)`. The tool runs
unchanged; its result (or error message) goes to Belief and Progress through
`Workspace.observe`, and the channel update travels with the `ToolMessage` in one `Command`.
An exception raised by a tool is observed and re-raised, as without the adapter. LangGraph drops
the writes of a node that raised, so that observation reaches the run's trace
(`TraceCallbackHandler`: ``metadata["bpe_state"]`` of the failed run), not the checkpoint.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from langchain_core.messages import ToolMessage
from langgraph.errors import GraphBubbleUp
from langgraph.types import Command

from .adapter import WorkspaceAdapter
from .channel import BPE_KEY
from .tools import META_ACTION_NAMES

__all__ = ["observe_tool_call", "aobserve_tool_call"]

ToolResult = ToolMessage | Command


def _observed(adapter: WorkspaceAdapter, request: Any, result: ToolResult) -> ToolResult:
    name = request.tool_call["name"]
    state = request.state if isinstance(request.state, dict) else {}
    if isinstance(result, ToolMessage):
        error = result.text if result.status == "error" else None
        update = adapter.observe(state, request.runtime, name, result=result.text, error=error)
        return Command(update={"messages": [result], BPE_KEY: update})
    if isinstance(result, Command) and isinstance(result.update, dict) and BPE_KEY not in result.update:
        update = adapter.observe(state, request.runtime, name, result=_update_text(result.update))
        return Command(graph=result.graph, goto=result.goto, resume=result.resume, update={**result.update, BPE_KEY: update})
    return result


def _failed(adapter: WorkspaceAdapter, request: Any, exc: Exception) -> None:
    state = request.state if isinstance(request.state, dict) else {}
    adapter.observe(state, request.runtime, request.tool_call["name"], error=f"{type(exc).__name__}: {exc}")


def _switched_off(adapter: WorkspaceAdapter, request: Any) -> ToolMessage | None:
    """The workspace's refusal of a meta-action whose part is switched off (not offered as a
    tool), so the model reads the same error as in every loop; None for any other call."""
    name = request.tool_call["name"]
    if name not in META_ACTION_NAMES or name in adapter.options.meta_actions or getattr(request, "tool", None) is not None:
        return None
    state = request.state if isinstance(request.state, dict) else {}
    call_id = request.tool_call.get("id") or ""
    _, content, _ = adapter.act(state, request.runtime, name, request.tool_call.get("args") or {}, call_id)
    return ToolMessage(content, tool_call_id=call_id, name=name, status="error")


def observe_tool_call(adapter: WorkspaceAdapter, request: Any, handler: Callable[[Any], ToolResult]) -> ToolResult:
    """Run the tool call through `handler` and observe what it returned or raised."""
    if request.tool_call["name"] in META_ACTION_NAMES:
        return _switched_off(adapter, request) or handler(request)
    try:
        result = handler(request)
    except GraphBubbleUp:
        raise
    except Exception as exc:
        _failed(adapter, request, exc)
        raise
    return _observed(adapter, request, result)


async def aobserve_tool_call(
    adapter: WorkspaceAdapter, request: Any, handler: Callable[[Any], Awaitable[ToolResult]]
) -> ToolResult:
    """`observe_tool_call` for async handlers."""
    if request.tool_call["name"] in META_ACTION_NAMES:
        return _switched_off(adapter, request) or await handler(request)
    try:
        result = await handler(request)
    except GraphBubbleUp:
        raise
    except Exception as exc:
        _failed(adapter, request, exc)
        raise
    return _observed(adapter, request, result)


def _update_text(update: dict[str, Any]) -> str:
    for message in update.get("messages") or ():
        if isinstance(message, ToolMessage):
            return message.text
    return "updated " + ", ".join(sorted(update))
