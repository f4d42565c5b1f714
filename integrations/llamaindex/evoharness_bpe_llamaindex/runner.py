"""The ``llamaindex`` framework runner: one environment episode played by a `FunctionAgent`.

Registered under the ``evoharness.frameworks`` entry-point group, so ``evoharness run
--framework llamaindex`` (and `evoharness_bpe.lab.frameworks.load_framework`) find it. The
environment's tools become `FunctionTool`s with their exact JSON schemas, the policy becomes the
agent's LLM through `PolicyLLM`, and with ``harness="bpe"`` the agent is wrapped by `with_bpe`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Coroutine
from dataclasses import dataclass
from importlib.resources import files
from typing import Any, TypeVar

from evoharness_bpe import META_ACTIONS, Outcome, Trace, Workspace
from evoharness_bpe.lab.envs.base import Env
from evoharness_bpe.exceptions import EvoHarnessError, UserError
from evoharness_bpe.lab.frameworks import EpisodeConfig
from evoharness_bpe.lab.policy import Policy
from evoharness_bpe.stores.base import ExperienceStore
from llama_index.core.agent.workflow import FunctionAgent, ToolCallResult
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
    """The built-in system prompt of the runner for `harness`."""
    prompts = files("evoharness_bpe_llamaindex") / "prompts"
    text = (prompts / "runner_system.txt").read_text("utf-8").strip()
    if harness == "bpe":
        text += "\n\n" + (prompts / "runner_system_bpe.txt").read_text("utf-8").strip()
    return text


@dataclass
class _Episode:
    env: Env
    steps: int = 0
    invalid: int = 0
    done: bool = False

    def tool(self, spec: dict[str, Any]) -> FunctionTool:
        name = str(spec.get("function", spec)["name"])

        async def call_env(**kwargs: Any) -> str:
            arguments: Any = kwargs[RAW_ARGUMENTS] if set(kwargs) == {RAW_ARGUMENTS} else kwargs
            result = self.env.step({"name": name, "arguments": arguments})
            self.steps += 1
            self.done = self.done or result.done
            if result.info.get("invalid"):
                self.invalid += 1
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
            "the llamaindex runner supports harness 'none' and 'bpe'; run 'append' with framework 'core'"
        )
    task, observation = env.reset(config.seed)
    episode = _Episode(env)
    tools = [episode.tool(spec) for spec in env.tools()]
    workspace: Workspace | None = None
    agent = FunctionAgent(
        name="agent",
        tools=tools,
        llm=PolicyLLM(policy),
        system_prompt=config.system_prompt or system_prompt(config.harness),
        streaming=False,
    )
    if config.harness == "bpe":
        workspace = Workspace(task, store=store, namespace=config.namespace, dashboard_tokens=config.dashboard_tokens)
        with_bpe(agent, workspace, window=config.window)
    _stop_when_done(agent, episode)

    recorder = TraceRecorder(workspace)
    known = {str(spec.get("function", spec)["name"]) for spec in env.tools()} | set(META_ACTIONS if workspace else ())
    cut = False
    user_msg = f"{task}\n\n{observation}" if observation else task
    with recorder:
        handler = agent.run(user_msg=user_msg, max_iterations=config.max_steps)
        try:
            async for event in handler.stream_events():
                recorder.on_event(event)
                if isinstance(event, ToolCallResult) and event.tool_name not in known and event.tool_output.is_error:
                    episode.invalid += 1  # a tool the model made up
            await handler
        except EpisodeOver:
            pass
        except WorkflowRuntimeError as exc:
            if not isinstance(exc.__cause__, EpisodeOver) and "Max iterations" not in str(exc):
                raise
            cut = "Max iterations" in str(exc)

    result = env.outcome()
    if workspace is not None:
        workspace.finish(result.success)
    info = {**result.info, "steps": episode.steps, "invalid_actions": episode.invalid, "cut": cut}
    offered = [*env.tools(), *(workspace.openai_tools() if workspace else [])]
    return recorder.trace(
        task=task,
        outcome=Outcome(success=result.success, score=result.score, info=info),
        env=getattr(env, "name", None),
        harness=config.harness,
        tools=offered,
        metadata={
            "prompt_tokens": [call.prompt_tokens for call in recorder.model_calls],
            "seed": config.seed,
            "difficulty": getattr(env, "difficulty", None),
            "max_steps": config.max_steps,
        },
    )


def _stop_when_done(agent: FunctionAgent, episode: _Episode) -> None:
    # The run ends before the next model call once the environment says the episode is over, so
    # no reply is asked of the model that the environment would ignore.
    take_step = agent.take_step

    async def take_step_until_done(ctx: Any, llm_input: Any, tools: Any, memory: Any) -> Any:
        if episode.done:
            raise EpisodeOver("the environment ended the episode")
        return await take_step(ctx, llm_input, tools, memory)

    object.__setattr__(agent, "take_step", take_step_until_done)


def _run_sync(coro: Coroutine[Any, Any, T]) -> T:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()

