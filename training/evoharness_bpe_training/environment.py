"""An `Env` plus a `Workspace` as a TRL environment: meta-actions and the env's tools as methods.

TRL's `GRPOTrainer(environment_factory=...)` turns the public methods of an environment class
into the tools of multi-turn rollouts and calls `reset(**row)` before each one. The class built
here exposes the four meta-actions (through a core `Workspace`, so refused calls, costs and the
ledger behave exactly as in deployment) and every tool of the wrapped `Env`, generated from the
env's OpenAI specs. After a rollout, `rollout_cost` gives what the cost-aware reward needs.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, Literal, Optional

from evoharness_bpe import META_ACTIONS, Workspace
from evoharness_bpe.lab.envs.base import Env
from evoharness_bpe.exceptions import UserError

from .rewards import RolloutCost

__all__ = ["harness_environment", "rollout_tool_schemas"]

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
) -> type:
    """A TRL environment class wrapping the `Env` that `env_factory` builds.

    ``reset(seed=..., **row)`` starts an episode and returns the task, the first dashboard and
    the first observation (TRL appends it to the prompt's last user message), or nothing when
    the row says ``opened=True``: its prompt already holds them. With
    `refresh_dashboard`, each environment tool's result is followed by the updated dashboard
    (counted in the ledger, hence in the reward's token cost).
    """
    probe = env_factory()
    specs = [*Workspace("probe").openai_tools(), *probe.tools()]
    names = [s["function"]["name"] for s in specs]
    if len(set(names)) != len(names):
        raise UserError(f"the environment's tools clash with the meta-actions {', '.join(META_ACTIONS)}: {names}")

    def dispatch(self: Any, name: str, args: dict[str, Any]) -> str:
        if self.ws is None:
            raise UserError("reset() must be called before the tools")
        if name in META_ACTIONS:
            return self.ws.act(name, args).content
        if self.done:
            return "The episode is over; no further actions are applied."
        result = self.env.step({"name": name, "arguments": args})
        self.steps += 1
        self.invalid += bool(result.info.get("invalid"))
        error = result.info.get("error") if result.info.get("invalid") else None
        self.ws.observe(name, args, result=None if error else result.observation, error=error)
        self.done = self.done or result.done
        if refresh_dashboard and not self.done:
            return f"{result.observation}\n\n{self.ws.dashboard()}"
        return result.observation

    namespace: dict[str, Any] = {}

    def __init__(self: Any) -> None:
        self.env = env_factory()
        self.ws: Workspace | None = None
        self.steps = self.invalid = 0
        self.done = False
        self.seed = 0

    def reset(self: Any, seed: int = 0, difficulty: int | None = None, opened: bool = False, **_: Any) -> str | None:
        level = difficulty if difficulty is not None else default_difficulty
        if level is not None and int(level) != getattr(self.env, "difficulty", None):
            try:  # a fresh env at that difficulty: difficulty may shape more than one attribute
                self.env = env_factory(difficulty=int(level))
            except TypeError:
                self.env.difficulty = int(level)
        self.seed = int(seed)
        task, observation = self.env.reset(self.seed)
        self.ws = Workspace(task, dashboard_tokens=dashboard_tokens)
        self.steps = self.invalid = 0
        self.done = False
        dashboard = self.ws.dashboard()  # recorded: the first dashboard is charged like every other
        if opened:  # the row's prompt already opens the episode (`grpo.opening_prompt`)
            return None
        return f"\n\n{task}\n\n{dashboard}\n\n{observation}".rstrip()

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
            invalid=summary.invalid_calls + self.invalid,
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
        reset=reset,
        rollout_cost=property(rollout_cost),
        episode_record=property(episode_record),
        __doc__=f"The {probe.name!r} environment with the BPE meta-actions, for TRL rollouts.",
    )
    for spec in specs:
        namespace[spec["function"]["name"]] = _tool_method(spec, dispatch)
    class_name = "".join(part.capitalize() for part in str(probe.name).replace("_", "-").split("-") if part) or "Env"
    return type(f"{class_name}HarnessEnvironment", (), namespace)



def rollout_tool_schemas(environment_cls: type) -> list[dict[str, Any]]:
    """The tool specs GRPO rollouts show the model: TRL renders the class's public methods, by name.

    They are generated from the methods' signatures and docstrings, so their text differs from
    the environment's own OpenAI specs; SFT rows rendered with these (their ``tools`` column)
    see the tool section rollouts will see.
    """
    from transformers.utils import get_json_schema

    members = inspect.getmembers(environment_cls, predicate=inspect.isfunction)
    return [get_json_schema(fn) for name, fn in members if name not in ("reset", "get_reward") and not name.startswith("_")]
