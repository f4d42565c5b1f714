"""The LangGraph framework runner: one environment episode through `create_agent`.

Registered as ``langgraph`` in the ``evoharness.frameworks`` entry-point group; see
`evoharness_bpe.lab.frameworks` for the contract. The environment's tools become LangChain tools
(`env.step` behind each), the policy becomes a `PolicyChatModel`, and the harness is
`BPEMiddleware` (``bpe``) or nothing (``none``).
"""

from __future__ import annotations

from importlib.resources import files
from typing import Any

from evoharness_bpe.lab.envs.base import Env
from evoharness_bpe.exceptions import UserError
from evoharness_bpe.lab.frameworks import EpisodeConfig
from evoharness_bpe.lab.policy import Policy
from evoharness_bpe.stores.base import ExperienceStore
from evoharness_bpe.trace import Outcome, Trace
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware, ModelCallLimitMiddleware, hook_config
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool, StructuredTool
from langgraph.errors import GraphRecursionError

from .callbacks import TraceCallbackHandler
from .chat_model import PolicyChatModel
from .middleware import BPEMiddleware

__all__ = ["run_episode", "env_tools"]


class _Counters:
    def __init__(self) -> None:
        self.steps = 0
        self.invalid = 0
        self.done = False


def env_tools(env: Env, counters: _Counters | None = None) -> list[BaseTool]:
    """The environment's tools as LangChain tools; arguments go to `env.step` unvalidated."""
    counters = counters or _Counters()

    def make(name: str) -> Any:
        def call(**arguments: Any) -> str:
            result = env.step({"name": name, "arguments": arguments})
            counters.steps += 1
            counters.invalid += bool(result.info.get("invalid"))
            counters.done = counters.done or result.done
            return result.observation

        return call

    tools: list[BaseTool] = []
    for spec in env.tools():
        fn = spec.get("function", spec)
        parameters = fn.get("parameters") or {"type": "object", "properties": {}}
        tools.append(
            StructuredTool(name=fn["name"], description=fn.get("description") or fn["name"], args_schema=parameters, func=make(fn["name"]))
        )
    return tools


class _EpisodeGuard(AgentMiddleware):
    """Ends the run once the environment is done; counts malformed and unknown tool calls.

    Unparseable calls are counted as the model returns them (a later ``after_model`` hook that
    jumps back to the model would skip this one's) and answered here unless `BPEMiddleware`
    already answered them.
    """

    def __init__(self, counters: _Counters, known: set[str]) -> None:
        super().__init__()
        self.counters = counters
        self.known = known

    @hook_config(can_jump_to=["end"])
    def before_model(self, state: dict[str, Any], runtime: Any) -> dict[str, Any] | None:
        return {"jump_to": "end"} if self.counters.done else None

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
        for message in getattr(response, "result", None) or [response]:
            if isinstance(message, AIMessage):
                self.counters.invalid += len(message.invalid_tool_calls)
        return response

    def wrap_model_call(self, request: Any, handler: Any) -> Any:
        return self._count_replies(handler(request))

    async def awrap_model_call(self, request: Any, handler: Any) -> Any:
        return self._count_replies(await handler(request))

    def _count(self, request: Any, result: Any) -> Any:
        if request.tool is None or (
            request.tool_call["name"] in self.known and isinstance(result, ToolMessage) and result.status == "error"
        ):
            self.counters.invalid += 1
        return result

    def wrap_tool_call(self, request: Any, handler: Any) -> Any:
        return self._count(request, handler(request))

    async def awrap_tool_call(self, request: Any, handler: Any) -> Any:
        return self._count(request, await handler(request))


def _prompt(harness: str) -> str:
    name = "runner_system_bpe.txt" if harness == "bpe" else "runner_system.txt"
    return files(__package__).joinpath("prompts", name).read_text(encoding="utf-8").strip()


def run_episode(env: Env, policy: Policy, store: ExperienceStore | None, config: EpisodeConfig | None = None) -> Trace:
    """Play one episode of `env` with `policy` under `config.harness`; return its `Trace`."""
    config = config or EpisodeConfig()
    if config.harness == "append":
        raise UserError(
            "the langgraph runner supports harness 'bpe' and 'none'; run 'append' with framework 'core'"
        )
    task, observation = env.reset(config.seed)
    counters = _Counters()
    tools = env_tools(env, counters)
    bpe = (
        BPEMiddleware(
            store=store,
            namespace=config.namespace,
            goal=task,
            dashboard_tokens=config.dashboard_tokens,
            window=config.window,
        )
        if config.harness == "bpe"
        else None
    )
    middleware: list[AgentMiddleware] = [_EpisodeGuard(counters, {t.name for t in tools})]
    middleware.append(ModelCallLimitMiddleware(run_limit=config.max_steps, exit_behavior="end"))
    if bpe is not None:
        middleware.append(bpe)
    agent = create_agent(
        PolicyChatModel(policy=policy), tools, system_prompt=config.system_prompt or _prompt(config.harness), middleware=middleware
    )
    handler = TraceCallbackHandler(middleware=bpe, harness=config.harness, env=getattr(env, "name", None))
    try:
        agent.invoke(
            {"messages": [HumanMessage(f"{task}\n\n{observation}".strip())]},
            {"callbacks": [handler], "recursion_limit": 4 * config.max_steps + 20},
        )
    except GraphRecursionError:
        pass  # the handler recorded the run as failed; the environment's own outcome decides
    trace = handler.traces[-1]
    result = env.outcome()
    trace.task = task
    trace.outcome = Outcome(
        success=result.success,
        score=result.score,
        info={**result.info, "steps": counters.steps, "invalid_actions": counters.invalid},
    )
    trace.metadata.update(
        seed=config.seed,
        difficulty=getattr(env, "difficulty", None),
        prompt_tokens=[call.prompt_tokens for call in trace.model_calls],
    )
    return trace
