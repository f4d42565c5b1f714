"""An `Env` plus a `Workspace` as a TRL environment: meta-actions and the env's tools as methods.

TRL's `GRPOTrainer(environment_factory=...)` turns the public methods of an environment class
into the tools of multi-turn rollouts and calls `reset(**row)` before each one. The class built
here exposes the four meta-actions (through a core `Workspace`, so refused calls, costs and the
ledger behave exactly as in deployment) and every tool of the wrapped `Env`, generated from the
env's OpenAI specs. After a rollout, `rollout_cost` gives what the cost-aware reward needs.

The tool list (order and text) is `evoharness_bpe.harness.episode_tools`, the one every loop
offers; counting goes through the shared `EpisodeCounters`. `rollout_episode` plays a policy in
the class exactly as the core loop does (dashboard in the system prompt, recent window).
"""

from __future__ import annotations

import copy
import inspect
import json
from collections.abc import Callable
from typing import Any, Literal, Optional

from evoharness_bpe import ModelCall, Outcome, Trace, Workspace
from evoharness_bpe.exceptions import UserError
from evoharness_bpe.harness import (
    META_ACTIONS,
    EpisodeCounters,
    SpecStyle,
    episode_tools,
    instructions,
    model_call,
    system_prompt,
)
from evoharness_bpe.lab.envs.base import Env

from .rewards import RolloutCost

__all__ = ["harness_environment", "rollout_tool_schemas", "rollout_episode"]

_JSON_TYPES: dict[str, Any] = {"string": str, "integer": int, "number": float, "boolean": bool, "array": list, "object": dict}


def _python_type(prop: dict[str, Any]) -> Any:
    if "enum" in prop and all(isinstance(v, str) for v in prop["enum"]):
        return Literal[tuple(prop["enum"])]  # type: ignore[valid-type]
    if "anyOf" in prop:
        kinds = [p.get("type") for p in prop["anyOf"]]
        base = next((_JSON_TYPES[k] for k in kinds if k in _JSON_TYPES), str)
        return Optional[base] if "null" in kinds else base  # noqa: UP045 - transformers parses Optional
    kind = prop.get("type", "string")
    if isinstance(kind, list):
        base = next((_JSON_TYPES[k] for k in kind if k in _JSON_TYPES), str)
        return Optional[base] if "null" in kind else base  # noqa: UP045
    return _JSON_TYPES.get(kind, str)


def _one_line(text: str) -> str:
    return " ".join(str(text).split()) or "-"


def _tool_method(spec: dict[str, Any], dispatch: Callable[[Any, str, dict[str, Any]], str]) -> Callable[..., str]:
    """A method whose signature and docstring give TRL/transformers the tool's JSON schema."""
    fn = spec["function"] if "function" in spec else spec
    name = fn["name"]
    if not name.isidentifier() or name.startswith("_") or name in ("reset", "get_reward", "rollout_cost"):
        raise UserError(f"tool name {name!r} cannot be a method name; rename the tool in the environment")
    params = fn.get("parameters") or {}
    props: dict[str, Any] = params.get("properties") or {}
    required = set(params.get("required") or [])
    ordered = [p for p in props if p in required] + [p for p in props if p not in required]
    parameters = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    annotations: dict[str, Any] = {}
    arg_docs = []
    for pname in ordered:
        hint = _python_type(props[pname])
        annotations[pname] = hint
        default = inspect.Parameter.empty if pname in required else None
        parameters.append(inspect.Parameter(pname, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=default, annotation=hint))
        arg_docs.append(f"    {pname}: {_one_line(props[pname].get('description', pname))}")
    annotations["return"] = str

    def method(self: Any, *args: Any, **kwargs: Any) -> str:
        bound = dict(zip(ordered, args))
        bound.update(kwargs)
        return dispatch(self, name, {k: v for k, v in bound.items() if v is not None or k in required})

    method.__name__ = method.__qualname__ = name
    method.__signature__ = inspect.Signature(parameters, return_annotation=str)  # type: ignore[attr-defined]
    method.__annotations__ = annotations
    doc = _one_line(fn.get("description", name))
    method.__doc__ = doc + ("\n\nArgs:\n" + "\n".join(arg_docs) if arg_docs else "") + "\n\nReturns:\n    What happened."
    return method


def harness_environment(
    env_factory: Callable[[], Env],
    *,
    refresh_dashboard: bool = True,
    dashboard_tokens: int = 600,
    default_difficulty: int | None = None,
    style: SpecStyle = "full",
    tool_methods: bool = True,
) -> type:
    """A TRL environment class wrapping the `Env` that `env_factory` builds.

    ``reset(seed=..., **row)`` starts an episode and returns the task, the first dashboard and
    the first observation (TRL appends it to the prompt's last user message), or nothing when
    the row says ``opened=True``: its prompt already holds them. With
    `refresh_dashboard`, each environment tool's result is followed by the updated dashboard
    (counted in the ledger, hence in the reward's token cost). `style` selects the spec style of
    the tools (`evoharness_bpe.harness.episode_tools`); the class keeps them as ``tool_specs``.
    Without `tool_methods` the class has no public tool methods (calls go through ``_dispatch``):
    TRL then runs no tool loop of its own, for rollouts played by `rollout_episode` through a
    ``rollout_func`` (`evoharness_bpe_training.grpo.WindowedRollouts`).
    """
    probe = env_factory()
    specs = episode_tools(probe, "bpe", style=style)

    def dispatch(self: Any, name: str, args: Any) -> str:
        if self.ws is None:
            raise UserError("reset() must be called before the tools")
        if name in META_ACTIONS:
            result = self.ws.act(name, args)
            self.counters.meta_action(name, result.ok)
            return result.content
        if self.done:
            return "The episode is over; no further actions are applied."
        result = self.env.step({"name": name, "arguments": args})
        invalid = bool(result.info.get("invalid"))
        self.counters.env_step(invalid)
        self.ws.observe(name, result=None if invalid else result.observation, error=result.observation if invalid else None)
        self.done = self.done or result.done
        if self.refresh_dashboard and not self.done:
            return f"{result.observation}\n\n{self.ws.dashboard()}"
        return result.observation

    namespace: dict[str, Any] = {}

    def __init__(self: Any) -> None:
        self.env = env_factory()
        episode_tools(self.env, "bpe", style=style)  # the style also sets how it observes
        self.ws: Workspace | None = None
        self.counters = EpisodeCounters(spec_style=style)
        self.done = False
        self.seed = 0
        self.task = self.observation = ""
        self.refresh_dashboard = refresh_dashboard

    def _start(self: Any, seed: int = 0, difficulty: int | None = None) -> None:
        level = difficulty if difficulty is not None else default_difficulty
        if level is not None and int(level) != getattr(self.env, "difficulty", None):
            try:  # a fresh env at that difficulty: difficulty may shape more than one attribute
                self.env = env_factory(difficulty=int(level))
            except TypeError:
                self.env.difficulty = int(level)
            episode_tools(self.env, "bpe", style=style)
        self.seed = int(seed)
        self.task, self.observation = self.env.reset(self.seed)
        self.ws = Workspace(self.task, dashboard_tokens=dashboard_tokens)
        self.counters = EpisodeCounters(spec_style=style)
        self.done = False

    def reset(self: Any, seed: int = 0, difficulty: int | None = None, opened: bool = False, **_: Any) -> str | None:
        self._start(seed, difficulty)
        dashboard = self.ws.dashboard()  # recorded: the first dashboard is charged like every other
        if opened:  # the row's prompt already opens the episode (`grpo.opening_prompt`)
            return None
        return f"\n\n{self.task}\n\n{dashboard}\n\n{self.observation}".rstrip()

    @property  # type: ignore[misc]
    def steps(self: Any) -> int:
        return self.counters.steps

    @property  # type: ignore[misc]
    def invalid(self: Any) -> int:
        return self.counters.invalid

    def rollout_cost(self: Any) -> RolloutCost:
        outcome = self.env.outcome()
        summary = self.ws.ledger.summary() if self.ws is not None else None
        if summary is None:
            return RolloutCost(success=0.0)
        by_action = {name: summary.by_action[name].calls if name in summary.by_action else 0 for name in META_ACTIONS}
        return RolloutCost(
            success=1.0 if outcome.success else 0.0,
            meta_calls=summary.meta_action_calls,
            harness_tokens=summary.harness_tokens,
            invalid=self.counters.invalid,
            by_action=by_action,
        )

    def episode_record(self: Any) -> dict[str, Any]:
        cost = self.rollout_cost
        return {
            "seed": self.seed,
            "difficulty": int(getattr(self.env, "difficulty", 0)),
            "success": bool(cost.success),
            "score": float(self.env.outcome().score),
            "meta_calls": cost.meta_calls,
            "by_action": cost.by_action,
            "harness_tokens": cost.harness_tokens,
            "invalid": cost.invalid,
            "env_steps": self.steps,
        }

    namespace.update(
        __init__=__init__,
        _start=_start,
        _dispatch=dispatch,
        tool_specs=specs,
        steps=steps,
        invalid=invalid,
        reset=reset,
        rollout_cost=property(rollout_cost),
        episode_record=property(episode_record),
        __doc__=f"The {probe.name!r} environment with the BPE meta-actions, for TRL rollouts.",
    )
    for spec in specs if tool_methods else ():
        namespace[spec["function"]["name"]] = _tool_method(spec, dispatch)
    class_name = "".join(part.capitalize() for part in str(probe.name).replace("_", "-").split("-") if part) or "Env"
    return type(f"{class_name}HarnessEnvironment", (), namespace)



def rollout_tool_schemas(environment_cls: type) -> list[dict[str, Any]]:
    """The tool specs GRPO rollouts show the model: `evoharness_bpe.harness.episode_tools`.

    The same order and text as traces, the SFT ``tools`` column and inference; `run_grpo` has
    TRL render these instead of schemas generated from the class's methods.
    """
    return copy.deepcopy(environment_cls.tool_specs)


def rollout_episode(
    environment: Any,
    policy: Any,
    *,
    seed: int = 0,
    difficulty: int | None = None,
    max_steps: int = 200,
    window_size: int = 12,
    base_prompt: str | None = None,
) -> Trace:
    """Play one episode of `policy` in a `harness_environment` instance, as the core loop plays it.

    Before each model call the system prompt carries the current dashboard and only the task
    and the recent window of messages are shown; each tool call goes through the instance's
    own dispatch (the one TRL's tool methods call), so counters, ledger and reward are those of
    a rollout. Returns the episode's `Trace` (``framework="grpo"``).
    """
    environment._start(seed, difficulty)
    refresh, environment.refresh_dashboard = environment.refresh_dashboard, False
    try:
        return _play(environment, policy, max_steps, window_size, base_prompt)
    finally:
        environment.refresh_dashboard = refresh


def _play(environment: Any, policy: Any, max_steps: int, size: int, base: str | None) -> Trace:
    ws, counters = environment.ws, environment.counters
    tools = rollout_tool_schemas(type(environment))
    offered = {t["function"]["name"] for t in tools}
    history: list[dict[str, Any]] = [{"role": "user", "content": f"{environment.task}\n\n{environment.observation}"}]
    calls: list[ModelCall] = []
    for _ in range(max_steps):
        tool_calls = model_call(policy, system_prompt("bpe", base, dashboard=ws.dashboard()), history, size, tools, counters, calls)
        if tool_calls is None:
            if counters.over:
                break
            continue
        for n, call in enumerate(tool_calls):
            call["id"] = call.get("id") or f"call_{len(calls)}_{n}"
            fn = call.get("function") or {}
            name = str(fn.get("name"))
            if name in offered:
                content = environment._dispatch(name, _arguments(fn.get("arguments")))
            else:
                counters.bad_call()
                content = f"Error: unknown tool {name!r}; the tools are {', '.join(sorted(offered))}."
            history.append({"role": "tool", "tool_call_id": call["id"], "name": name, "content": content})
            if environment.done:
                break
        if environment.done:
            break
    outcome = environment.env.outcome()
    ws.finish(bool(outcome.success))
    trace = ws.trace(
        task=environment.task,
        messages=[{"role": "system", "content": instructions("bpe", base)}, *history],
        outcome=Outcome(success=outcome.success, score=outcome.score, info={**outcome.info, **counters.outcome_info()}),
        framework="grpo",
        harness="bpe",
        env=getattr(environment.env, "name", None),
        tools=tools,
        metadata={"seed": environment.seed, "difficulty": getattr(environment.env, "difficulty", None), **counters.metadata()},
    )
    trace.model_calls = calls
    return trace


def _arguments(raw: Any) -> Any:
    """A dict when the model's arguments parse as a JSON object, else the raw text (refused downstream)."""
    if isinstance(raw, str):
        try:
            value = json.loads(raw)
        except ValueError:
            return raw
        return value if isinstance(value, dict) else raw
    return raw
