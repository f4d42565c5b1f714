"""`with_bpe` and the BPE agent classes: the BPE harness on LlamaIndex workflow agents.

>>> agent = with_bpe(FunctionAgent(tools=[search], llm=llm), store=store, namespace=("acme", "crm"),
...                  trace=BPETraceHandler("traces.jsonl"))          # doctest: +SKIP
>>> await agent.run(user_msg="Migrate the records")                  # doctest: +SKIP

A wrapped agent gets the four meta-actions as tools, the dashboard merged into its one system
message before every model call, and its own tools' results observed into Belief/Progress.
Each ``run()`` is its own episode (`RunBinding`): a fresh workspace, kept in the run's
`Context`, finished when the run ends, its trace handed to the trace handler. The advanced form
``with_bpe(agent, workspace)`` binds one given workspace to every run (`WorkspaceBinding`).

How: the agent becomes an instance of its BPE subclass (`BPEFunctionAgent` for a
`FunctionAgent`, a generated ``BPE<Name>`` subclass for your own agent classes), whose methods
override the agent's extension points — ``take_step``, ``handle_tool_call_results``, the model
call, and the run's steps (``init_run``, ``parse_agent_output``, ...) to open and finish the
episode. A ReAct agent drops the first system message it is given and prepends its own header,
so the only place where the final prompt exists is its model call; merging there yields exactly
one system message for both agent kinds, whatever memory blocks or system prompts produced.

A model call that fails, or returns neither text nor a tool call (an empty stream: some servers
refuse streaming with tools), raises `ModelCallError`: the run fails and its episode is finished
as a failure, instead of ending with an empty answer.
"""

from __future__ import annotations

import contextvars
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, Union

from evoharness_bpe import META_ACTIONS, ExperienceStore, Workspace
from evoharness_bpe.endpoint import reported_prompt_tokens
from evoharness_bpe.exceptions import ModelCallError, UserError
from evoharness_bpe.harness import window as harness_window
from llama_index.core.agent.workflow import (
    AgentInput,
    AgentOutput,
    AgentWorkflow,
    FunctionAgent,
    ReActAgent,
    ToolCall,
    ToolCallResult,
)
from llama_index.core.agent.workflow.base_agent import BaseWorkflowAgent
from llama_index.core.agent.workflow.workflow_events import AgentSetup, AgentWorkflowStartEvent
from llama_index.core.base.llms.types import ChatMessage, ChatResponse, TextBlock
from llama_index.core.workflow import Context, StopEvent, step

from .binding import DEFAULT_STATE_KEY, WorkspaceBinding
from .messages import to_openai_message
from .recorder import TraceRecorder
from .runs import NamespaceSpec, RunBinding, SuccessJudge, default_success, record_input, record_output
from .tools import meta_action_tools
from .trace_handler import BPETraceHandler

if TYPE_CHECKING:
    from evoharness_bpe import ModelConsolidator

__all__ = [
    "with_bpe",
    "BPEFunctionAgent",
    "BPEReActAgent",
    "BPEAgentHooks",
    "BPERunSteps",
    "get_binding",
    "merge_system",
    "window_messages",
]

T = TypeVar("T", FunctionAgent, ReActAgent, AgentWorkflow)
Binding = Union[WorkspaceBinding, RunBinding]

_BINDING_ATTR = "_bpe_binding"
_WINDOW_ATTR = "_bpe_window"


@dataclass(frozen=True)
class _Injection:
    extra: str
    window: int | None
    recorder: TraceRecorder | None

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


def get_binding(target: Any) -> Binding | None:
    """The binding `with_bpe` attached to an agent or workflow: a `RunBinding` (per run) or a
    `WorkspaceBinding` (one given workspace); None when it is not wrapped."""
    return getattr(target, "__dict__", {}).get(_BINDING_ATTR)


def with_bpe(
    target: T,
    workspace: Workspace | WorkspaceBinding | None = None,
    *,
    store: ExperienceStore | None = None,
    namespace: NamespaceSpec = ("default",),
    goal: str | None = None,
    subgoals: Sequence[str] | None = None,
    dashboard_tokens: int = 600,
    inject: str = "full",
    window: int | None = None,
    success: SuccessJudge = default_success,
    trace: BPETraceHandler | None = None,
    state_key: str = DEFAULT_STATE_KEY,
    consolidator: ModelConsolidator | None = None,
    meta_actions: bool = True,
    **workspace_options: Any,
) -> T:
    """Give an agent (or every agent of an `AgentWorkflow`) the BPE harness; returns it.

    Per run (the usual form): every ``run()`` gets a fresh workspace — goal `goal`, else the
    run's user message; experience in `store` under `namespace` (fixed, or a function of the
    run, ``lambda run: ("users", run.get("user_id"))`` with ``agent.run(..., user_id=...)``);
    Belief/Progress in the run's `Context` under `state_key` — and the run's end finishes it:
    a run that raised failed, one that answered succeeded if `success(state)` says so (default:
    every subgoal done, no open exception). `trace` (a `BPETraceHandler`) receives one trace per
    run. Repeated and concurrent runs of one agent are independent episodes. `consolidator` (a
    `ModelConsolidator`) gets each run's notes when the run ends, and consolidates them with its
    teacher in the background.

    Advanced: ``with_bpe(agent, workspace)`` binds that one workspace to every run (its store
    and namespace; finish it yourself with `Workspace.afinish`); one run at a time.

    `window` keeps only the last `window` messages of the prompt (besides the system message
    and the first user message): the dashboard carries the rest.

    `workspace_options` go to each run's `Workspace`: ``parts=("belief", "progress")`` switches
    Experience off (an ablation: ``recall`` and ``note`` are not offered and its hints leave the
    dashboard), ``max_meta_actions=6`` caps the meta-actions of a run. ``meta_actions=False``
    offers no meta-action tools: the dashboard alone (the ``panels`` harness).

    >>> agent = with_bpe(FunctionAgent(tools=[search], llm=llm), store=store, namespace=("acme",))  # doctest: +SKIP
    """
    if window is not None and window < 2:
        raise UserError("window must be at least 2 messages (or None for the full history)")
    if workspace is not None:
        given = {
            "store": store is not None,
            "namespace": namespace != ("default",),
            "goal": goal is not None,
            "subgoals": subgoals is not None,
            "trace": trace is not None,
            "success": success is not default_success,
            "dashboard_tokens": dashboard_tokens != 600,
            "inject": inject != "full",
            "consolidator": consolidator is not None,
        }
        clash = sorted(k for k, v in given.items() if v) + sorted(workspace_options)
        if clash:
            raise UserError(
                f"with_bpe(agent, workspace) uses that workspace's own settings; {', '.join(clash)} "
                "apply to the per-run form with_bpe(agent, store=..., namespace=...) without a workspace"
            )
        binding: Binding = (
            workspace if isinstance(workspace, WorkspaceBinding) else WorkspaceBinding(workspace, state_key=state_key)
        )
    else:
        binding = RunBinding(
            store=store,
            namespace=namespace,
            goal=goal,
            subgoals=subgoals,
            dashboard_tokens=dashboard_tokens,
            inject=inject,
            success=success,
            trace=trace,
            state_key=state_key,
            consolidator=consolidator,
            **workspace_options,
        )
    if isinstance(target, AgentWorkflow):
        if get_binding(target) is not None:
            raise UserError("this workflow already has a BPE workspace; wrap it once")
        tools = meta_action_tools(binding) if meta_actions else []
        agents = list(target.agents.values())
        for agent in agents:
            _check_agent(agent)
        for agent in agents:
            _wrap_agent(agent, binding, tools, window)
        _become(target, _bpe_class(type(target)))
        target.__dict__[_BINDING_ATTR] = binding
        return target
    if isinstance(target, (FunctionAgent, ReActAgent)):
        _check_agent(target)
        _wrap_agent(target, binding, meta_action_tools(binding) if meta_actions else [], window)
        return target
    raise UserError(
        f"with_bpe supports FunctionAgent, ReActAgent and AgentWorkflow (and their subclasses), "
        f"not {type(target).__name__}"
    )


def _tool_name(tool: Any) -> str:
    metadata = getattr(tool, "metadata", None)
    return str(getattr(metadata, "name", None) or getattr(tool, "__name__", ""))


def _check_agent(agent: BaseWorkflowAgent) -> None:
    if not isinstance(agent, (FunctionAgent, ReActAgent)):
        raise UserError(f"with_bpe supports FunctionAgent and ReActAgent, not {type(agent).__name__}")
    if get_binding(agent) is not None:
        raise UserError(f"agent {agent.name!r} already has a BPE workspace; wrap it once")
    clash = sorted({_tool_name(t) for t in agent.tools or ()} & set(META_ACTIONS))
    if clash:
        raise UserError(f"agent {agent.name!r} already has tools named {', '.join(clash)}; rename them to use BPE")


def _wrap_agent(agent: BaseWorkflowAgent, binding: Binding, tools: list[Any], window: int | None) -> None:
    _become(agent, _bpe_class(type(agent)))
    agent.__dict__[_BINDING_ATTR] = binding
    agent.__dict__[_WINDOW_ATTR] = window
    agent.tools = [*(agent.tools or []), *tools]


_SUBCLASSES: dict[type, type] = {}


def _bpe_class(cls: type) -> type:
    """`cls` itself if it already has the BPE hooks, else its BPE subclass (made once)."""
    if issubclass(cls, BPERunSteps) and (issubclass(cls, AgentWorkflow) or issubclass(cls, BPEAgentHooks)):
        return cls
    sub = _SUBCLASSES.get(cls)
    if sub is None:
        if cls is FunctionAgent:
            sub = BPEFunctionAgent
        elif cls is ReActAgent:
            sub = BPEReActAgent
        else:
            mixins: tuple[type, ...] = (BPERunSteps,) if issubclass(cls, AgentWorkflow) else (BPERunSteps, BPEAgentHooks)
            sub = type(f"BPE{cls.__name__}", (*mixins, cls), {"__module__": cls.__module__, "__doc__": cls.__doc__})
        _SUBCLASSES[cls] = sub
    return sub


def _become(obj: Any, cls: type) -> None:
    # The object keeps its configuration and identity; only its behaviour gains the hooks.
    if type(obj) is not cls:
        object.__setattr__(obj, "__class__", cls)


def _response_is_empty(response: ChatResponse | None) -> bool:
    if response is None:
        return True
    message = to_openai_message(response.message)
    return not (message.get("content") or "").strip() and not message.get("tool_calls")


class BPEAgentHooks:
    """The BPE overrides of a workflow agent's extension points (mixed into its BPE subclass).

    ``take_step`` renders the dashboard and prepares the prompt, the model call merges it into
    the one system message (and windows the history) and refuses an empty reply, and
    ``handle_tool_call_results`` observes the agent's own tools. An agent not wrapped by
    `with_bpe` behaves as its base class.
    """

    async def take_step(self, ctx: Any, llm_input: list[ChatMessage], tools: Any, memory: Any) -> AgentOutput:
        binding = get_binding(self)
        if binding is None:
            return await super().take_step(ctx, llm_input, tools, memory)  # type: ignore[misc]
        dashboard = await binding.dashboard(ctx)
        recorder = await binding.recorder(ctx)
        window = self.__dict__.get(_WINDOW_ATTR)
        record_input(recorder, llm_input, getattr(self, "name", "agent"))
        if isinstance(self, ReActAgent):
            # ReAct drops llm_input[0] when it is a system message and prepends its own header
            # (which already holds system_prompt); the other system texts travel to the call.
            texts = [m.content or "" for m in llm_input if m.role.value == "system"]
            if self.system_prompt and texts and texts[0] == self.system_prompt:
                texts = texts[1:]
            injection = _Injection("\n\n".join(t for t in [*texts, dashboard] if t), window, recorder)
            llm_input = [m for m in llm_input if m.role.value != "system"]
        else:
            injection = _Injection("", window, recorder)
            llm_input = merge_system(llm_input, dashboard)
        token = _pending.set(injection)
        try:
            output = await super().take_step(ctx, llm_input, tools, memory)  # type: ignore[misc]
        finally:
            _pending.reset(token)
        record_output(recorder, output)
        return output

    async def handle_tool_call_results(self, ctx: Any, results: list[ToolCallResult], memory: Any) -> Any:
        binding = get_binding(self)
        if binding is not None:
            await binding.observe(ctx, results)
        return await super().handle_tool_call_results(ctx, results, memory)  # type: ignore[misc]

    async def _get_response(self, current_llm_input: list[ChatMessage], *args: Any) -> ChatResponse:
        injection = _pending.get()
        if injection is not None:
            current_llm_input = injection.apply(current_llm_input)
        response = await super()._get_response(current_llm_input, *args)  # type: ignore[misc]
        return _checked(injection, current_llm_input, response, args[0] if args else (), streaming=False)

    async def _get_streaming_response(self, ctx: Any, current_llm_input: list[ChatMessage], *args: Any) -> ChatResponse:
        injection = _pending.get()
        if injection is not None:
            current_llm_input = injection.apply(current_llm_input)
        response = await super()._get_streaming_response(ctx, current_llm_input, *args)  # type: ignore[misc]
        return _checked(injection, current_llm_input, response, args[0] if args else (), streaming=True)

    @property
    def bpe(self) -> Binding | None:
        """The BPE binding: `RunBinding` (``agent.bpe.episode(run_id)``) or `WorkspaceBinding`."""
        return get_binding(self)


def _checked(
    injection: _Injection | None, prompt: list[ChatMessage], response: ChatResponse, tools: Any, *, streaming: bool
) -> ChatResponse:
    if injection is None:
        return response  # an agent not wrapped by with_bpe
    if _response_is_empty(response):
        if streaming:
            raise ModelCallError(
                "the model's stream ended without a reply (no text, no tool call); some servers refuse "
                "streaming with tools: try the agent with streaming=False"
            )
        raise ModelCallError("the model returned an empty reply (no text, no tool call)")
    if injection.recorder is not None:
        injection.recorder.record_model_call(prompt, response.message, tools, reported_prompt_tokens(response))
    return response


class BPERunSteps:
    """The run's steps, opening the episode when a run starts and finishing it when it ends.

    Mixed into the BPE subclass of an agent or an `AgentWorkflow`: each step runs as in the
    base class; a step that ends the run (a `StopEvent`) or raises finishes the episode first.
    """

    @step
    async def init_run(self, ctx: Context, ev: AgentWorkflowStartEvent) -> AgentInput:
        binding = get_binding(self)
        if binding is not None:
            await binding.start(ctx, ev)
        return await _ending(self, ctx, super().init_run(ctx, ev))  # type: ignore[misc]

    @step
    async def setup_agent(self, ctx: Context, ev: AgentInput) -> AgentSetup:
        return await _ending(self, ctx, super().setup_agent(ctx, ev))  # type: ignore[misc]

    @step
    async def run_agent_step(self, ctx: Context, ev: AgentSetup) -> AgentOutput:
        return await _ending(self, ctx, super().run_agent_step(ctx, ev))  # type: ignore[misc]

    @step
    async def parse_agent_output(self, ctx: Context, ev: AgentOutput) -> Union[StopEvent, AgentInput, ToolCall, None]:
        return await _ending(self, ctx, super().parse_agent_output(ctx, ev))  # type: ignore[misc]

    @step
    async def aggregate_tool_results(self, ctx: Context, ev: ToolCallResult) -> Union[AgentInput, StopEvent, None]:
        return await _ending(self, ctx, super().aggregate_tool_results(ctx, ev))  # type: ignore[misc]


async def _ending(owner: Any, ctx: Context, step_call: Any) -> Any:
    binding = get_binding(owner)
    if binding is None:
        return await step_call
    try:
        result = await step_call
    except Exception as exc:
        if not _is_pause(exc):
            await binding.end(ctx, exc)
        raise
    if isinstance(result, StopEvent):
        await binding.end(ctx, None)
    return result


def _is_pause(exc: BaseException) -> bool:
    # A human-in-the-loop wait suspends the run; it has not ended.
    from llama_index.core.agent.workflow.base_agent import _get_waiting_for_event_exception

    waiting = _get_waiting_for_event_exception()
    return waiting is not None and isinstance(exc, waiting)


class _BPEAgent:
    """The constructor and properties shared by the BPE agent classes."""

    def __init__(
        self,
        *,
        workspace: Workspace | WorkspaceBinding | None = None,
        store: ExperienceStore | None = None,
        namespace: NamespaceSpec = ("default",),
        goal: str | None = None,
        subgoals: Sequence[str] | None = None,
        dashboard_tokens: int = 600,
        inject: str = "full",
        window: int | None = None,
        success: SuccessJudge = default_success,
        trace: BPETraceHandler | None = None,
        state_key: str = DEFAULT_STATE_KEY,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        with_bpe(
            self,  # type: ignore[arg-type]
            workspace,
            store=store,
            namespace=namespace,
            goal=goal,
            subgoals=subgoals,
            dashboard_tokens=dashboard_tokens,
            inject=inject,
            window=window,
            success=success,
            trace=trace,
            state_key=state_key,
        )

    @property
    def workspace(self) -> Workspace:
        """The workspace of the advanced form ``workspace=`` (per-run agents have one per run)."""
        binding = get_binding(self)
        if isinstance(binding, WorkspaceBinding):
            return binding.workspace
        if binding is None:  # during __init__, before with_bpe ran
            raise AttributeError("workspace")
        raise AttributeError(
            "this agent opens a workspace per run: read it with agent.bpe.episode(run_id).workspace "
            "(the run id is in ctx.store['bpe_run'])"
        )


class BPEFunctionAgent(_BPEAgent, BPERunSteps, BPEAgentHooks, FunctionAgent):
    """A `FunctionAgent` with the BPE harness: `FunctionAgent(...)` plus the options of `with_bpe`.

    >>> agent = BPEFunctionAgent(store=store, namespace=("acme",), tools=[search], llm=llm)  # doctest: +SKIP
    """


class BPEReActAgent(_BPEAgent, BPERunSteps, BPEAgentHooks, ReActAgent):
    """A `ReActAgent` with the BPE harness: `ReActAgent(...)` plus the options of `with_bpe`."""
