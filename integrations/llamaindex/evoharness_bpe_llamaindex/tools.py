"""LlamaIndex `FunctionTool`s with exact JSON schemas: the four meta-actions and OpenAI specs.

`FunctionTool` derives its schema from a pydantic model and validates nothing when called. The
tools here show the model the schema given (for the meta-actions, `Workspace.tools`) and hand
the raw arguments to code that validates them, so a malformed call comes back to the model as
an error tool result and changes nothing.
"""

from __future__ import annotations

import copy
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from evoharness_bpe import Workspace
from evoharness_bpe.actions import tool_specs
from llama_index.core.tools import FunctionTool, ToolMetadata, ToolOutput
from llama_index.core.workflow import Context

from .binding import DEFAULT_STATE_KEY, WorkspaceBinding
from .messages import RAW_ARGUMENTS
from .runs import RunBinding

__all__ = ["SchemaToolMetadata", "meta_action_tools", "openai_function_tool"]


@dataclass
class SchemaToolMetadata(ToolMetadata):
    """Tool metadata whose parameters are a given JSON schema rather than a pydantic model's."""

    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})

    def get_parameters_dict(self) -> dict[str, Any]:
        return copy.deepcopy(self.parameters)


def openai_function_tool(spec: dict[str, Any], fn: Callable[..., Awaitable[Any]]) -> FunctionTool:
    """A `FunctionTool` from an OpenAI function spec and an async ``fn(**arguments)``.

    The model sees ``spec``'s parameters exactly; ``fn`` gets the arguments as the model sent
    them (a context parameter annotated `Context` is injected as usual).
    """
    fn_spec = spec.get("function", spec)
    metadata = SchemaToolMetadata(
        description=str(fn_spec.get("description") or fn_spec["name"]),
        name=str(fn_spec["name"]),
        parameters=dict(fn_spec.get("parameters") or {"type": "object", "properties": {}}),
    )
    return FunctionTool(async_fn=fn, metadata=metadata)


def meta_action_tools(
    workspace: Workspace | WorkspaceBinding | RunBinding, *, state_key: str = DEFAULT_STATE_KEY
) -> list[FunctionTool]:
    """The four meta-actions (`track`, `commit`, `recall`, `note`) as context-aware tools.

    Each call loads the Belief/Progress of the run's context, applies the meta-action to the
    model's raw arguments (store I/O off the event loop) and writes the state back. A refused
    call is an error tool result. Only the meta-actions of the parts switched on are offered.
    """
    if isinstance(workspace, (WorkspaceBinding, RunBinding)):
        binding: WorkspaceBinding | RunBinding = workspace
    else:
        binding = WorkspaceBinding(workspace, state_key=state_key)
    return [_meta_tool(binding, spec.name, spec.description, spec.parameters) for spec in tool_specs()
            if spec.name in binding.meta_actions]


def _meta_tool(
    binding: WorkspaceBinding | RunBinding, name: str, description: str, parameters: dict[str, Any]
) -> FunctionTool:
    async def meta_action(ctx: Context, **kwargs: Any) -> dict[str, Any]:
        arguments: Any = kwargs[RAW_ARGUMENTS] if set(kwargs) == {RAW_ARGUMENTS} else kwargs
        result, event = await binding.act_indexed(ctx, name, arguments)
        return {"ok": result.ok, "content": result.content, "name": name, "event": event}

    async def to_output(raw: dict[str, Any]) -> ToolOutput:
        return ToolOutput(
            content=raw["content"],
            tool_name=name,
            raw_input={},
            raw_output=raw,
            is_error=not raw["ok"],
        )

    # Set here, not as a string: FunctionTool finds the context parameter by its annotation.
    meta_action.__annotations__["ctx"] = Context
    meta_action.__name__ = name
    metadata = SchemaToolMetadata(description=description, name=name, parameters=parameters)
    return FunctionTool(async_fn=meta_action, metadata=metadata, async_callback=to_output)

