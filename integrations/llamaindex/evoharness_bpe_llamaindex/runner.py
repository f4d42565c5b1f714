"""The ``llamaindex`` framework runner: one environment episode played by a `FunctionAgent`.

Registered under the ``evoharness.frameworks`` entry-point group, so ``evoharness run
--framework llamaindex`` (and `evoharness_bpe.lab.frameworks.load_framework`) find it. The
environment's tools become `FunctionTool`s with their exact JSON schemas, the policy becomes the
agent's LLM through `PolicyLLM`, and with ``harness="bpe"`` the agent is wrapped by `with_bpe`
(``panels``: without meta-action tools). The step budget is `EpisodeConfig.budget`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

from evoharness_bpe import Outcome, Trace, Workspace
from evoharness_bpe.harness import META_ACTIONS, EpisodeCounters, StepBudget, episode_tools, instructions
from evoharness_bpe.lab.envs.base import Env
from evoharness_bpe.exceptions import EvoHarnessError, UserError
from evoharness_bpe.lab.frameworks import EpisodeConfig
from evoharness_bpe.lab.policy import Policy
from evoharness_bpe.stores.base import ExperienceStore
from llama_index.core.agent.workflow import AgentOutput, FunctionAgent, ToolCallResult
from llama_index.core.tools import FunctionTool
from llama_index.core.workflow.errors import WorkflowRuntimeError

from .agent import with_bpe
from .llm import PolicyLLM
from .messages import RAW_ARGUMENTS
from .recorder import TraceRecorder
from .tools import openai_function_tool

__all__ = ["run_episode", "arun_episode", "system_prompt"]

T = TypeVar("T")


class InvalidEnvCall(Exception):
    """An environment call the environment refused; its observation goes back as an error result."""


class EpisodeOver(EvoHarnessError):
    """Raised inside the agent's step once the environment reports the episode done."""


def system_prompt(harness: str) -> str:
    """The built-in system prompt of the runner for `harness` (`evoharness_bpe.harness.instructions`)."""
    return instructions(harness)


@dataclass
class _Episode:
    env: Env
    counters: EpisodeCounters = field(default_factory=EpisodeCounters)
    budget: StepBudget = field(default_factory=lambda: StepBudget(1_000_000))
    meta_names: frozenset[str] = frozenset()
    done: bool = False

    def tool(self, spec: dict[str, Any]) -> FunctionTool:
        name = str(spec.get("function", spec)["name"])

        async def call_env(**kwargs: Any) -> str:
            arguments: Any = kwargs[RAW_ARGUMENTS] if set(kwargs) == {RAW_ARGUMENTS} else kwargs
            result = self.env.step({"name": name, "arguments": arguments})
            invalid = bool(result.info.get("invalid"))
            self.counters.env_step(invalid)
            self.done = self.done or result.done
            if invalid:
                raise InvalidEnvCall(result.observation)
            return result.observation

        return openai_function_tool(spec, call_env)


def run_episode(env: Env, policy: Policy, store: ExperienceStore | None = None, config: EpisodeConfig | None = None) -> Trace:
    """Play one episode of `env` with `policy` in a LlamaIndex `FunctionAgent`; return its `Trace`.

    Callable from synchronous code: it runs its own event loop (in a worker thread when the
    caller is already inside one).
    """
    return _run_sync(arun_episode(env, policy, store, config))


async def arun_episode(
    env: Env, policy: Policy, store: ExperienceStore | None = None, config: EpisodeConfig | None = None
) -> Trace:
    """`run_episode` for callers inside an event loop."""
    config = config or EpisodeConfig()
    if config.harness == "append":
        raise UserError(
            "the llamaindex runner supports harnesses 'none', 'panels' and 'bpe'; run 'append' with framework 'core'"
        )
    if not config.observations_in_belief:
        raise UserError("the llamaindex runner copies every observation into Belief; run observations_in_belief=False "
                        "with framework 'core'")
    episode = _Episode(env, budget=config.budget(), meta_names=frozenset(META_ACTIONS if config.harness == "bpe" else ()))
    offered = episode_tools(env, config.harness, style=config.spec_style, parts=config.parts)
    task, observation = env.reset(config.seed)
    episode.counters.spec_style = config.spec_style
    env_specs = [t for t in offered if t["function"]["name"] not in META_ACTIONS]
    tools = [episode.tool(spec) for spec in env_specs]
    workspace: Workspace | None = None
    agent = FunctionAgent(
        name="agent",
        tools=tools,
        llm=PolicyLLM(policy),
        system_prompt=instructions(config.harness, config.system_prompt, parts=config.parts),
        streaming=False,
    )
    if config.harness in ("bpe", "panels"):
        workspace = Workspace(task, store=store, namespace=config.namespace, dashboard_tokens=config.dashboard_tokens,
                              parts=config.parts, max_meta_actions=config.max_meta_actions)
        with_bpe(agent, workspace, window=config.window, meta_actions=config.harness == "bpe")
    _stop_when_done(agent, episode)

    recorder = TraceRecorder(workspace, token_counter=policy)
    counters = episode.counters
    env_names = {t["function"]["name"] for t in env_specs}
    meta_names = set(episode.meta_names)
    cut = False
    user_msg = f"{task}\n\n{observation}"
    with recorder:
        handler = agent.run(user_msg=user_msg, max_iterations=episode.budget.limit)
        try:
            async for event in handler.stream_events():
                recorder.on_event(event)
                if isinstance(event, AgentOutput) and not event.retry_messages:
                    counters.reply(event.tool_calls)
                elif isinstance(event, ToolCallResult):
                    if event.tool_name in meta_names:
                        counters.meta_action(event.tool_name, ok=_meta_ok(event))
                    elif event.tool_name not in env_names and event.tool_output.is_error:
                        counters.bad_call()  # a tool the model made up
            await handler
        except EpisodeOver:
            pass
        except WorkflowRuntimeError as exc:
            if not isinstance(exc.__cause__, EpisodeOver) and "Max iterations" not in str(exc):
                raise
            cut = "Max iterations" in str(exc)

    if not episode.budget.charge:  # free meta-actions: the budget, not max_iterations, cut it
        cut = cut or (not episode.done and not episode.budget.open)
    result = env.outcome()
    if workspace is not None:
        workspace.finish(result.success)
    info = {**result.info, **counters.outcome_info(), "cut": cut}
    # The recorder counted each prompt as the model received it (dashboard injected, window cut).
    counters.prompt_tokens = [call.prompt_tokens for call in recorder.model_calls]
    counters.prompt_token_source = recorder.prompt_token_source
    return recorder.trace(
        task=task,
        outcome=Outcome(success=result.success, score=result.score, info=info),
        env=getattr(env, "name", None),
        harness=config.harness,
        tools=offered,
        metadata={
            **counters.metadata(),
            "seed": config.seed,
            "difficulty": getattr(env, "difficulty", None),
            "max_steps": config.max_steps,
            **config.harness_metadata(),
            "charged_model_calls": episode.budget.charged,
        },
    )


def _meta_ok(event: ToolCallResult) -> bool:
    raw = event.tool_output.raw_output
    return bool(raw.get("ok")) if isinstance(raw, dict) else not event.tool_output.is_error


def _stop_when_done(agent: FunctionAgent, episode: _Episode) -> None:
    # The run ends before the next model call once the environment says the episode is over, so
    # no reply is asked of the model that the environment would ignore.
    take_step = agent.take_step

    async def take_step_until_done(ctx: Any, llm_input: Any, tools: Any, memory: Any) -> Any:
        if episode.done:
            raise EpisodeOver("the environment ended the episode")
        budget = episode.budget
        if not budget.charge and budget.calls and not budget.open:  # charged: max_iterations cuts, as before
            raise EpisodeOver("the step budget is spent")
        output = await take_step(ctx, llm_input, tools, memory)
        if not getattr(output, "retry_messages", None):
            budget.spend([call.tool_name for call in output.tool_calls or ()], episode.meta_names)
        return output

    object.__setattr__(agent, "take_step", take_step_until_done)


def _run_sync(coro: Coroutine[Any, Any, T]) -> T:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()

