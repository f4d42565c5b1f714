"""The LangGraph framework runner: one environment episode through `create_agent`.

Registered as ``langgraph`` in the ``evoharness.frameworks`` entry-point group; see
`evoharness_bpe.lab.frameworks` for the contract. The environment's tools become LangChain tools
(`env.step` behind each), the policy becomes a `PolicyChatModel`, and the harness is
`BPEMiddleware` (``bpe``; ``panels``: without its meta-action tools) or nothing (``none``).
The step budget is `EpisodeConfig.budget`, spent as the core loop spends it.
"""

from __future__ import annotations

from typing import Any

from evoharness_bpe.exceptions import UserError
from evoharness_bpe.harness import META_ACTIONS, EpisodeCounters, StepBudget, episode_tools, instructions
from evoharness_bpe.lab.envs.base import Env
from evoharness_bpe.lab.frameworks import EpisodeConfig
from evoharness_bpe.lab.policy import Policy
from evoharness_bpe.stores.base import ExperienceStore
from evoharness_bpe.trace import Outcome, Trace
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware, ModelCallLimitMiddleware, hook_config
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool, StructuredTool, ToolException
from langgraph.errors import GraphRecursionError

from .callbacks import TraceCallbackHandler
from .chat_model import PolicyChatModel
from .middleware import BPEMiddleware

__all__ = ["run_episode", "env_tools"]

_GRAPH_STEPS_PER_CALL = 16


class _Episode:
    """The episode's counters and whether the environment is done."""

    def __init__(self, budget: StepBudget | None = None) -> None:
        self.counters = EpisodeCounters()
        self.budget = budget or StepBudget(1_000_000)
        self.done = False


def env_tools(env: Env, episode: _Episode | None = None, *, specs: list[dict[str, Any]] | None = None) -> list[BaseTool]:
    """The environment's tools as LangChain tools; arguments go to `env.step` unvalidated.

    `specs` (default ``env.tools()``) sets their order and text, e.g. the environment part of
    `evoharness_bpe.harness.episode_tools`.
    """
    episode = episode or _Episode()

    def make(name: str) -> Any:
        def call(**arguments: Any) -> str:
            result = env.step({"name": name, "arguments": arguments})
            invalid = bool(result.info.get("invalid"))
            episode.counters.env_step(invalid)
            episode.done = episode.done or result.done
            if invalid:  # an error result, observed as an error, as in the other loops
                raise ToolException(result.observation)
            return result.observation

        return call

    tools: list[BaseTool] = []
    for spec in specs if specs is not None else env.tools():
        fn = spec.get("function", spec)
        parameters = fn.get("parameters") or {"type": "object", "properties": {}}
        tools.append(
            StructuredTool(
                name=fn["name"],
                description=fn.get("description") or fn["name"],
                args_schema=parameters,
                func=make(fn["name"]),
                handle_tool_error=True,
            )
        )
    return tools


class _EpisodeGuard(AgentMiddleware):
    """Ends the run once the environment is done; counts what the shared `EpisodeCounters` count.

    Unparseable calls are counted as the model returns them (a later ``after_model`` hook that
    jumps back to the model would skip this one's) and answered here unless `BPEMiddleware`
    already answered them.
    """

    def __init__(self, episode: _Episode, env_names: set[str], meta_names: set[str]) -> None:
        super().__init__()
        self.episode = episode
        self.env_names = env_names
        self.meta_names = meta_names

    @hook_config(can_jump_to=["end"])
    def before_model(self, state: dict[str, Any], runtime: Any) -> dict[str, Any] | None:
        spent = self.episode.budget.calls > 0 and not self.episode.budget.open
        return {"jump_to": "end"} if self.episode.done or spent else None

    @hook_config(can_jump_to=["model"])
    def after_model(self, state: dict[str, Any], runtime: Any) -> dict[str, Any] | None:
        # A reply whose only tool calls are unparseable would end the run; answer each with an
        # error the model can read and let it try again, as the core loop does.
        messages = state.get("messages") or []
        turn = next((i for i in range(len(messages) - 1, -1, -1) if isinstance(messages[i], AIMessage)), None)
        if turn is None or not messages[turn].invalid_tool_calls:
            return None
        last = messages[turn]
        answered = {m.tool_call_id for m in messages[turn + 1 :] if isinstance(m, ToolMessage)}  # by BPEMiddleware
        errors = [
            ToolMessage(
                f"Error: could not parse the arguments of {call.get('name')!r}: {call.get('error') or 'invalid JSON'}. "
                "Send a JSON object.",
                tool_call_id=call.get("id") or "",
                name=call.get("name") or "unknown",
                status="error",
            )
            for call in last.invalid_tool_calls
            if call.get("id") not in answered
        ]
        if last.tool_calls:
            return {"messages": errors} if errors else None
        return {"messages": errors, "jump_to": "model"}

    def _count_replies(self, response: Any) -> Any:
        counters = self.episode.counters
        for message in getattr(response, "result", None) or [response]:
            if isinstance(message, AIMessage):
                calls = [*message.tool_calls, *message.invalid_tool_calls]
                counters.reply(calls)
                self.episode.budget.spend([call.get("name") for call in calls], self.meta_names)
                for call in message.invalid_tool_calls:
                    name = call.get("name")
                    if name in self.meta_names:
                        counters.meta_action(str(name), ok=False)
                    elif name in self.env_names:
                        counters.env_step(invalid=True)
                    else:
                        counters.bad_call()
        return response

    def wrap_model_call(self, request: Any, handler: Any) -> Any:
        return self._count_replies(handler(request))

    async def awrap_model_call(self, request: Any, handler: Any) -> Any:
        return self._count_replies(await handler(request))

    def _count(self, request: Any, result: Any, steps_before: int) -> Any:
        name = request.tool_call["name"]
        failed = isinstance(result, ToolMessage) and result.status == "error"
        counters = self.episode.counters
        if name in self.meta_names:  # offered, or refused because its part is switched off
            counters.meta_action(name, ok=not failed)
        elif request.tool is None:
            counters.bad_call()  # a tool the model made up
        elif failed and counters.steps == steps_before:
            counters.env_step(invalid=True)  # refused before it reached the environment
        return result

    def wrap_tool_call(self, request: Any, handler: Any) -> Any:
        before = self.episode.counters.steps
        return self._count(request, handler(request), before)

    async def awrap_tool_call(self, request: Any, handler: Any) -> Any:
        before = self.episode.counters.steps
        return self._count(request, await handler(request), before)


def run_episode(env: Env, policy: Policy, store: ExperienceStore | None, config: EpisodeConfig | None = None) -> Trace:
    """Play one episode of `env` with `policy` under `config.harness`; return its `Trace`."""
    config = config or EpisodeConfig()
    if config.harness == "append":
        raise UserError(
            "the langgraph runner supports harnesses 'bpe', 'panels' and 'none'; run 'append' with framework 'core'"
        )
    if not config.observations_in_belief:
        raise UserError("the langgraph runner copies every observation into Belief; run observations_in_belief=False "
                        "with framework 'core'")
    episode = _Episode(config.budget())
    offered = episode_tools(env, config.harness, style=config.spec_style, parts=config.parts)
    task, observation = env.reset(config.seed)
    episode.counters.spec_style = config.spec_style
    env_specs = [t for t in offered if t["function"]["name"] not in META_ACTIONS]
    tools = env_tools(env, episode, specs=env_specs)
    bpe = (
        BPEMiddleware(
            store=store,
            namespace=config.namespace,
            goal=task,
            dashboard_tokens=config.dashboard_tokens,
            window=config.window,
            parts=config.parts,
            max_meta_actions=config.max_meta_actions,
            meta_actions=config.harness == "bpe",
        )
        if config.harness in ("bpe", "panels")
        else None
    )
    meta_names = set(META_ACTIONS) if config.harness == "bpe" else set()
    middleware: list[AgentMiddleware] = [_EpisodeGuard(episode, {t.name for t in tools}, meta_names)]
    middleware.append(ModelCallLimitMiddleware(run_limit=episode.budget.limit, exit_behavior="end"))
    if bpe is not None:
        middleware.append(bpe)
    agent = create_agent(
        PolicyChatModel(policy=policy), tools, system_prompt=instructions(config.harness, config.system_prompt, parts=config.parts),
        middleware=middleware,
    )
    handler = TraceCallbackHandler(middleware=bpe, harness=config.harness, env=getattr(env, "name", None), token_counter=policy)
    try:
        agent.invoke(
            {"messages": [HumanMessage(f"{task}\n\n{observation}")]},
            # The model-call limit above cuts the episode, as `max_steps` does in every loop. The
            # recursion limit only guards against a loop: each model call passes through several
            # graph steps (the model, the tools and every middleware hook), so 4 per call cut
            # episodes with many refused calls early.
            {"callbacks": [handler], "recursion_limit": _GRAPH_STEPS_PER_CALL * episode.budget.limit + 20},
        )
    except GraphRecursionError:
        pass  # the handler recorded the run as failed; the environment's own outcome decides
    trace = handler.traces[-1]
    result = env.outcome()
    trace.task = task
    trace.outcome = Outcome(
        success=result.success,
        score=result.score,
        info={**result.info, **episode.counters.outcome_info()},
    )
    # The handler counted each prompt as the model received it (dashboard injected, window cut).
    episode.counters.prompt_tokens = [call.prompt_tokens for call in trace.model_calls]
    episode.counters.prompt_token_source = trace.metadata.get("prompt_token_source")
    trace.metadata.update(seed=config.seed, difficulty=getattr(env, "difficulty", None), **episode.counters.metadata(),
                          **config.harness_metadata(), charged_model_calls=episode.budget.charged)
    return trace
