"""`with_bpe` and `BPEFunctionAgent`: the BPE harness on LlamaIndex workflow agents.

A wrapped agent gets the four meta-actions as tools, the dashboard merged into its one system
message before every model call, and its own tools' results observed into Belief/Progress.
Everything is done on the instance (``take_step``, ``handle_tool_call_results`` and the model
call itself are shadowed), so an agent inside an `AgentWorkflow` is wrapped the same way.

Why the model call: a ReAct agent drops the first system message it is given and prepends its
own header, so the only place where the final prompt exists is its ``_get_response`` /
``_get_streaming_response``. Merging there yields exactly one system message for both agent
kinds, whatever memory blocks or system prompts produced.
"""

from __future__ import annotations

import contextvars
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from evoharness_bpe import META_ACTIONS, Workspace
from evoharness_bpe.exceptions import UserError
from evoharness_bpe.harness import window as harness_window
from llama_index.core.agent.workflow import AgentWorkflow, FunctionAgent, ReActAgent
from llama_index.core.agent.workflow.base_agent import BaseWorkflowAgent
from llama_index.core.base.llms.types import ChatMessage, TextBlock

from .binding import DEFAULT_STATE_KEY, WorkspaceBinding
from .tools import meta_action_tools

__all__ = ["with_bpe", "BPEFunctionAgent", "BPEReActAgent", "get_binding", "merge_system", "window_messages"]

T = TypeVar("T", FunctionAgent, ReActAgent, AgentWorkflow)

_BINDING_ATTR = "_bpe_binding"


@dataclass(frozen=True)
class _Injection:
    extra: str
    window: int | None

    def apply(self, messages: Sequence[ChatMessage]) -> list[ChatMessage]:
        return window_messages(merge_system(messages, self.extra), self.window)


_pending: contextvars.ContextVar[_Injection | None] = contextvars.ContextVar("evoharness_bpe_injection", default=None)


def merge_system(messages: Sequence[ChatMessage], extra: str = "") -> list[ChatMessage]:
    """Collapse every system message into one, first, with `extra` appended; input untouched.

    Several providers reject a second system message; memory blocks, system prompts and the
    dashboard all end up in this one. Non-text blocks of system messages are dropped.
    """
    texts: list[str] = []
    rest: list[ChatMessage] = []
    for message in messages:
        if message.role.value in ("system", "developer"):
            texts.extend(b.text for b in message.blocks if isinstance(b, TextBlock) and b.text)
        else:
            rest.append(message)
    if extra:
        texts.append(extra)
    return [ChatMessage(role="system", content="\n\n".join(texts)), *rest] if texts else rest


def window_messages(messages: Sequence[ChatMessage], window: int | None) -> list[ChatMessage]:
    """Keep the system message, the first message after it and the last `window` messages,
    cut as `evoharness_bpe.harness.window` cuts (never a tool result without its call)."""
    out = list(messages)
    if not window:
        return out
    head = [m for m in out[:1] if m.role.value == "system"]
    return [*head, *harness_window(out[len(head):], window, role=lambda m: m.role.value)]


def get_binding(target: Any) -> WorkspaceBinding | None:
    """The `WorkspaceBinding` `with_bpe` attached to an agent or workflow, if any."""
    return target.__dict__.get(_BINDING_ATTR)


def with_bpe(
    target: T,
    workspace: Workspace | WorkspaceBinding,
    *,
    state_key: str = DEFAULT_STATE_KEY,
    window: int | None = None,
) -> T:
    """Give an existing agent (or every agent of an `AgentWorkflow`) the BPE harness; returns it.

    - the meta-actions `track`, `commit`, `recall`, `note` are added to the agent's tools
      (its own tools stay as they are, and their results are observed into Belief/Progress);
    - before every model call the dashboard is merged into the single system message;
    - Belief/Progress live in the run's `Context` under `state_key` (JSON), so a saved and
      restored context continues with the same state; Experience goes to the workspace's store.

    `window` keeps only the last `window` messages of the prompt (besides the system message
    and the first user message): the dashboard carries the rest.

    >>> agent = with_bpe(FunctionAgent(tools=[search], llm=llm), Workspace("Find the flight"))  # doctest: +SKIP
    """
    if window is not None and window < 2:
        raise UserError("window must be at least 2 messages (or None for the full history)")
    binding = workspace if isinstance(workspace, WorkspaceBinding) else WorkspaceBinding(workspace, state_key=state_key)
    if isinstance(target, AgentWorkflow):
        if get_binding(target) is not None:
            raise UserError("this workflow already has a BPE workspace; wrap it once")
        tools = meta_action_tools(binding)
        for agent in target.agents.values():
            _wrap_agent(agent, binding, tools, window)
        target.__dict__[_BINDING_ATTR] = binding
        return target
    if isinstance(target, (FunctionAgent, ReActAgent)):
        _wrap_agent(target, binding, meta_action_tools(binding), window)
        return target
    raise UserError(
        f"with_bpe supports FunctionAgent, ReActAgent and AgentWorkflow (and their subclasses), "
        f"not {type(target).__name__}"
    )


def _tool_name(tool: Any) -> str:
    metadata = getattr(tool, "metadata", None)
    return str(getattr(metadata, "name", None) or getattr(tool, "__name__", ""))


def _wrap_agent(agent: BaseWorkflowAgent, binding: WorkspaceBinding, tools: list[Any], window: int | None) -> None:
    if not isinstance(agent, (FunctionAgent, ReActAgent)):
        raise UserError(f"with_bpe supports FunctionAgent and ReActAgent, not {type(agent).__name__}")
    if get_binding(agent) is not None:
        raise UserError(f"agent {agent.name!r} already has a BPE workspace; wrap it once")
    clash = sorted({_tool_name(t) for t in agent.tools or ()} & set(META_ACTIONS))
    if clash:
        raise UserError(f"agent {agent.name!r} already has tools named {', '.join(clash)}; rename them to use BPE")

    react = isinstance(agent, ReActAgent)
    take_step = agent.take_step
    handle_results = agent.handle_tool_call_results
    get_response = agent._get_response
    get_streaming_response = agent._get_streaming_response

    async def bpe_take_step(ctx: Any, llm_input: list[ChatMessage], tools: Any, memory: Any) -> Any:
        dashboard = await binding.dashboard(ctx)
        if react:
            # ReAct drops llm_input[0] when it is a system message and prepends its own header
            # (which already holds system_prompt); the other system texts travel to the call.
            texts = [m.content or "" for m in llm_input if m.role.value == "system"]
            if agent.system_prompt and texts and texts[0] == agent.system_prompt:
                texts = texts[1:]
            injection = _Injection("\n\n".join(t for t in [*texts, dashboard] if t), window)
            llm_input = [m for m in llm_input if m.role.value != "system"]
        else:
            injection = _Injection("", window)
            llm_input = merge_system(llm_input, dashboard)
        token = _pending.set(injection)
        try:
            return await take_step(ctx, llm_input, tools, memory)
        finally:
            _pending.reset(token)

    async def bpe_handle_tool_call_results(ctx: Any, results: Any, memory: Any) -> Any:
        await binding.observe(ctx, results)
        return await handle_results(ctx, results, memory)

    async def bpe_get_response(current_llm_input: list[ChatMessage], *args: Any) -> Any:
        injection = _pending.get()
        if injection is not None:
            current_llm_input = injection.apply(current_llm_input)
        return await get_response(current_llm_input, *args)

    async def bpe_get_streaming_response(ctx: Any, current_llm_input: list[ChatMessage], *args: Any) -> Any:
        injection = _pending.get()
        if injection is not None:
            current_llm_input = injection.apply(current_llm_input)
        return await get_streaming_response(ctx, current_llm_input, *args)

    # Pydantic refuses unknown attributes; an instance attribute set this way shadows the method.
    object.__setattr__(agent, "take_step", bpe_take_step)
    object.__setattr__(agent, "handle_tool_call_results", bpe_handle_tool_call_results)
    object.__setattr__(agent, "_get_response", bpe_get_response)
    object.__setattr__(agent, "_get_streaming_response", bpe_get_streaming_response)
    object.__setattr__(agent, _BINDING_ATTR, binding)
    agent.tools = [*(agent.tools or []), *tools]


class _BPEAgent:
    """The constructor and `workspace` property shared by the BPE agent classes."""

    def __init__(
        self,
        *,
        workspace: Workspace | WorkspaceBinding,
        state_key: str = DEFAULT_STATE_KEY,
        window: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        with_bpe(self, workspace, state_key=state_key, window=window)  # type: ignore[arg-type]

    @property
    def workspace(self) -> Workspace:
        """The workspace this agent reads and writes."""
        binding = get_binding(self)  # type: ignore[arg-type]
        if binding is None:  # during __init__, before with_bpe ran
            raise AttributeError("workspace")
        return binding.workspace


class BPEFunctionAgent(_BPEAgent, FunctionAgent):
    """A `FunctionAgent` with the BPE harness: `FunctionAgent(...)` plus ``workspace=``.

    >>> agent = BPEFunctionAgent(workspace=Workspace("Book a flight"), tools=[search], llm=llm)  # doctest: +SKIP
    """


class BPEReActAgent(_BPEAgent, ReActAgent):
    """A `ReActAgent` with the BPE harness: `ReActAgent(...)` plus ``workspace=``."""
