"""`BPEMiddleware`: the BPE workspace for `langchain.agents.create_agent`.

>>> from langchain.agents import create_agent
>>> agent = create_agent(model, tools, middleware=[BPEMiddleware(namespace=("acme", "crm"))])  # doctest: +SKIP

It adds the four meta-actions as tools, keeps the serialised `BPEState` in the ``bpe`` state
channel (so a checkpointer persists it and a thread resumes where it stopped), puts the dashboard
into the system message before every model call, observes the agent's own tools, and finishes
the episode when the run ends.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from evoharness_bpe import ExperienceStore
from evoharness_bpe.exceptions import UserError
from evoharness_bpe.harness import window
from langchain.agents.middleware import AgentMiddleware, AgentState, ModelRequest, ModelResponse, hook_config
from langchain.agents.middleware.types import OmitFromInput
from langchain_core.messages import AIMessage, SystemMessage, ToolMessage
from langgraph.types import Command
from typing_extensions import Annotated, NotRequired

from .adapter import EpisodeLog, NamespaceSpec, WorkspaceAdapter
from .channel import BPE_KEY, bpe_reducer
from .observe import aobserve_tool_call, observe_tool_call
from .tools import META_ACTION_NAMES, meta_action_tools

if TYPE_CHECKING:
    from evoharness_bpe import ModelConsolidator

__all__ = ["BPEMiddleware", "BPEAgentState", "SuccessJudge", "default_success", "message_role"]

SuccessJudge = Callable[[dict[str, Any]], bool]
"""Decides from the final agent state whether the episode succeeded."""


class BPEAgentState(AgentState):
    """`AgentState` plus the ``bpe`` channel and the run id of the episode log."""

    bpe: NotRequired[Annotated[dict[str, Any], bpe_reducer]]
    bpe_run: NotRequired[Annotated[str, OmitFromInput]]


def default_success(state: dict[str, Any]) -> bool:
    """Success unless a subgoal failed, a subgoal is still open, or an exception is open."""
    progress = (state.get(BPE_KEY) or {}).get("progress") or {}
    statuses = [s.get("status") for s in (progress.get("subgoals") or {}).values()]
    if progress.get("exceptions"):
        return False
    return all(status == "done" for status in statuses)


class BPEMiddleware(AgentMiddleware):
    """Belief / Progress / Experience for a `create_agent` agent.

    Args:
        store: an `ExperienceStore`, or any LangGraph `BaseStore` (wrapped in
            `LangGraphExperienceStore`). Default: the agent's own ``store=``, else in memory.
        namespace: experience namespace, fixed or a function of the run's `Runtime`
            (``lambda rt: ("users", rt.context.user_id)``). It is decided for this run at
            every hook: a namespace stored in the ``bpe`` channel (sent in the input, or in a
            restored thread of another user) is ignored and rewritten, together with the
            recalled and noted ids that belong to it, so it cannot redirect reads, writes or
            credits. A ``bpe`` value that is not a `BPEState` is refused with a `UserError`.
        goal, subgoals: the episode's goal (default: the first user message) and subgoals.
        dashboard_tokens, inject: the dashboard's token budget and mode (full, summary, off).
        window: keep only the first user message and the last `window` messages in the prompt
            (the dashboard carries the rest), cut as `evoharness_bpe.harness.window` cuts.
        success: judge of the final state for crediting lessons (default `default_success`).
        finish_in_background: credit and consolidate in a worker thread so the answer is not
            delayed; `flush()` waits for it.
        consolidator: a `ModelConsolidator`: each run's notes go to its teacher in the
            background when the run ends (and every ``every_notes`` notes), without delaying
            the answer; share one across agents and close it at shutdown.
        meta_actions: False offers no meta-action tools: the dashboard alone, kept up to date
            from the agent's own tools (the ``panels`` harness).
        workspace_options: the rest of `WorkspaceOptions`, e.g. ``parts=("belief", "progress")``
            (an ablation: Experience's ``recall`` and ``note`` are not offered, are refused if
            called anyway, and its hints leave the dashboard) or ``max_meta_actions=6``.
    """

    state_schema = BPEAgentState

    def __init__(
        self,
        *,
        store: ExperienceStore | Any | None = None,
        namespace: NamespaceSpec = ("default",),
        goal: str | None = None,
        subgoals: Sequence[str] | None = None,
        dashboard_tokens: int = 600,
        inject: str = "full",
        window: int | None = None,
        success: SuccessJudge = default_success,
        finish_in_background: bool = False,
        consolidator: ModelConsolidator | None = None,
        meta_actions: bool = True,
        **workspace_options: Any,
    ) -> None:
        super().__init__()
        if window is not None and window < 1:
            raise UserError("window must be a positive number of messages, or None to keep them all")
        self.adapter = WorkspaceAdapter(
            goal=goal,
            subgoals=subgoals,
            store=store,
            namespace=namespace,
            dashboard_tokens=dashboard_tokens,
            inject=inject,
            finish_in_background=finish_in_background,
            consolidator=consolidator,
            **workspace_options,
        )
        self.window = window
        self.success = success
        self.tools = meta_action_tools(self.adapter) if meta_actions else []

    # -- run boundaries ----------------------------------------------------------------------
    def before_agent(self, state: dict[str, Any], runtime: Any) -> dict[str, Any] | None:
        return self.adapter.start(state, runtime)

    def after_agent(self, state: dict[str, Any], runtime: Any) -> dict[str, Any] | None:
        return self.adapter.finish(state, runtime, bool(self.success(state)))

    async def abefore_agent(self, state: dict[str, Any], runtime: Any) -> dict[str, Any] | None:
        return self.adapter.start(state, runtime)  # builds state only: no store I/O

    async def aafter_agent(self, state: dict[str, Any], runtime: Any) -> dict[str, Any] | None:
        return await self.adapter.afinish(state, runtime, bool(self.success(state)))

    @hook_config(can_jump_to=["model"])
    async def aafter_model(self, state: dict[str, Any], runtime: Any) -> dict[str, Any] | None:
        """`after_model` in a worker thread (a refused recall or note may reach the store)."""
        return await asyncio.to_thread(self.after_model, state, runtime)

    @hook_config(can_jump_to=["model"])
    def after_model(self, state: dict[str, Any], runtime: Any) -> dict[str, Any] | None:
        """Answer meta-action calls whose arguments did not parse, so the model can retry.

        Without this, a reply whose only tool calls are unparseable would end the run.
        """
        messages = state.get("messages") or []
        last = messages[-1] if messages else None
        if not isinstance(last, AIMessage) or not last.invalid_tool_calls:
            return None
        answers = []
        for call in last.invalid_tool_calls:
            name = call.get("name")
            if name not in META_ACTION_NAMES:
                continue
            call_id = call.get("id") or ""
            _, content, _ = self.adapter.act(state, runtime, name, call.get("args") or "", call_id)
            answers.append(ToolMessage(content, tool_call_id=call_id, name=name, status="error"))
        if not answers:
            return None
        return {"messages": answers} if last.tool_calls else {"messages": answers, "jump_to": "model"}

    def episode(self, run: str) -> EpisodeLog:
        """The log (meta-action events, dashboards, ledger, summary) of run `run`."""
        return self.adapter.log(run)

    def flush(self, timeout: float | None = None) -> None:
        """Wait for background episode finishes."""
        self.adapter.flush(timeout)

    # -- model calls -------------------------------------------------------------------------
    def _inject(self, request: ModelRequest) -> ModelRequest:
        text = self.adapter.dashboard(request.state, request.runtime)
        base = request.system_message.text if request.system_message is not None else ""
        changes: dict[str, Any] = {}
        if text:
            changes["system_message"] = SystemMessage(f"{base}\n\n{text}" if base else text)
        tools = list(getattr(request, "tools", None) or [])
        ordered = [t for t in tools if _tool_name(t) not in META_ACTION_NAMES] + [t for t in tools if _tool_name(t) in META_ACTION_NAMES]
        if ordered != tools:  # LangChain lists middleware tools first; the harness offers them last
            changes["tools"] = ordered
        if self.window is not None:
            shown = window(request.messages, self.window, role=message_role)
            if len(shown) < len(request.messages):
                changes["messages"] = shown
        return request.override(**changes) if changes else request

    def wrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]
    ) -> ModelResponse:
        return handler(self._inject(request))

    async def awrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], Awaitable[ModelResponse]]
    ) -> ModelResponse:
        # The dashboard's experience hints are a store search: rendered off the event loop.
        return await handler(await asyncio.to_thread(self._inject, request))

    # -- the agent's own tools (environment adapter) -----------------------------------------
    def wrap_tool_call(self, request: Any, handler: Callable[[Any], ToolMessage | Command]) -> ToolMessage | Command:
        return observe_tool_call(self.adapter, request, handler)

    async def awrap_tool_call(
        self, request: Any, handler: Callable[[Any], Awaitable[ToolMessage | Command]]
    ) -> ToolMessage | Command:
        return await aobserve_tool_call(self.adapter, request, handler)


def _tool_name(tool: Any) -> str | None:
    if isinstance(tool, dict):
        return (tool.get("function") or tool).get("name")
    return getattr(tool, "name", None)


_ROLES = {"human": "user", "ai": "assistant", "tool": "tool", "system": "system"}


def message_role(message: Any) -> str:
    """The OpenAI role of a LangChain message (``human`` → ``user``, ``ai`` → ``assistant``)."""
    return _ROLES.get(getattr(message, "type", ""), str(getattr(message, "type", "")))
