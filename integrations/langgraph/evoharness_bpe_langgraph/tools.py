"""The four meta-actions as LangChain tools that update the ``bpe`` channel.

The JSON schemas and descriptions come from the core (`Workspace.tools`); the tools pass the
model's arguments to `Workspace.act` unvalidated, so a malformed call gets the core's readable
error as an error `ToolMessage` and changes nothing.
"""

from __future__ import annotations

from typing import Any

from evoharness_bpe import META_ACTIONS
from evoharness_bpe.actions import tool_specs
from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool, StructuredTool
from langgraph.prebuilt import ToolRuntime
from langgraph.types import Command

from .adapter import WorkspaceAdapter
from .channel import BPE_KEY

__all__ = ["meta_action_tools", "META_ACTION_NAMES"]

META_ACTION_NAMES = frozenset(META_ACTIONS)


def _runner(adapter: WorkspaceAdapter, name: str) -> Any:
    def run(runtime: ToolRuntime, **arguments: Any) -> Command | ToolMessage:
        call_id = runtime.tool_call_id or ""
        ok, content, update = adapter.act(dict(runtime.state or {}), runtime, name, arguments, call_id)
        message = ToolMessage(content, tool_call_id=call_id, name=name, status="success" if ok else "error")
        if update is None:
            return message
        return Command(update={BPE_KEY: update, "messages": [message]})

    run.__name__ = name
    return run


def meta_action_tools(adapter: WorkspaceAdapter) -> list[BaseTool]:
    """`track`, `commit`, `recall` and `note` bound to `adapter` (only those of the parts its
    workspace options switch on)."""
    offered = adapter.options.meta_actions
    return [
        StructuredTool(
            name=spec.name,
            description=spec.description,
            args_schema=spec.parameters,
            func=_runner(adapter, spec.name),
        )
        for spec in tool_specs()
        if spec.name in offered
    ]
