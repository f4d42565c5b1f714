"""The core episode loop: one environment, one policy, one harness, no framework.

Harnesses differ only in what the model is shown before each call:

* ``none`` — ReAct: the system prompt, the task and the full history;
* ``append`` — an append-only memory (every note and every observation, oldest first) in the
  system prompt, plus the recent window of messages; the model gets a ``note`` tool;
* ``panels`` — the BPE dashboard in the system prompt, plus the recent window, kept up to date
  from the environment's results only; the model gets no meta-actions;
* ``bpe`` — the BPE dashboard in the system prompt, plus the recent window; the model gets the
  four meta-actions (less those of parts switched off in ``config.parts``).

The step budget is `EpisodeConfig.budget` (`evoharness_bpe.harness.StepBudget`): by default
every model call spends a step; with ``charge_meta_actions=False`` a call of meta-actions only
is free. ``max_meta_actions`` caps the meta-action calls of an episode.

A reply without a tool call counts as an invalid action and gets a nudge; three in a row end the
episode (a small model that stopped calling tools will not start again). Prompts, tools, window,
prompt-token counting and counters come from `evoharness_bpe.harness`, shared by every loop.
"""

from __future__ import annotations

import json
import time
from typing import Any

from ..envs.base import Env
from ..frameworks import EpisodeConfig
from ..policy import ChatMessage, Policy
from ...harness import (
    META_ACTIONS,
    EpisodeCounters,
    episode_tools,
    instructions,
    model_call,
    system_prompt,
)
from ...stores.base import ExperienceStore
from ...trace import ModelCall, Outcome, Trace
from ...workspace import Workspace

__all__ = ["run_episode"]


def _arguments(raw: Any) -> dict[str, Any] | None:
    if isinstance(raw, dict):
        return raw
    try:
        value = json.loads(raw) if isinstance(raw, str) else None
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def run_episode(env: Env, policy: Policy, store: ExperienceStore | None, config: EpisodeConfig) -> Trace:
    """Play one episode of `env` with `policy` under `config.harness`; return its trace."""
    started = time.perf_counter()
    harness = config.harness
    tools = episode_tools(env, harness, style=config.spec_style, parts=config.parts)  # first: the style shapes the task text too
    task, first_observation = env.reset(config.seed)
    ws = Workspace(task, store=store, namespace=config.namespace, dashboard_tokens=config.dashboard_tokens,
                   parts=config.parts, max_meta_actions=config.max_meta_actions)
    shows = harness in ("bpe", "panels")  # the harnesses that keep and show the workspace
    offered = {t["function"]["name"] for t in tools}
    env_names = offered - set(META_ACTIONS)
    meta_names = set(META_ACTIONS) if harness == "bpe" else offered & set(META_ACTIONS)
    size = None if harness == "none" else config.window
    history: list[ChatMessage] = [{"role": "user", "content": f"{task}\n\n{first_observation}"}]
    memory: list[str] = [f"[start] {first_observation}"]
    calls: list[ModelCall] = []
    counters = EpisodeCounters(spec_style=config.spec_style)
    budget = config.budget()
    done = False

    while budget.open:
        system = system_prompt(
            harness, config.system_prompt, dashboard=ws.dashboard() if shows else "", memory=memory, parts=config.parts
        )
        tool_calls = model_call(policy, system, history, size, tools, counters, calls)
        budget.spend([(c.get("function") or {}).get("name") for c in tool_calls or ()], meta_names)
        lost = config.max_invalid_run is not None and counters.invalid_run >= config.max_invalid_run
        if tool_calls is None:
            if counters.over or lost:
                break
            continue
        for n, call in enumerate(tool_calls):
            call_id = call.get("id") or f"call_{len(calls)}_{n}"
            call["id"] = call_id
            fn = call.get("function") or {}
            name = fn.get("name")
            # bpe answers every meta-action itself: one whose part is switched off is refused readably
            if name in META_ACTIONS and (name in offered or harness == "bpe"):
                if harness == "bpe":
                    result = ws.act(name, fn.get("arguments"), tool_call_id=call_id)
                    content, ok = result.content, result.ok
                else:
                    args = _arguments(fn.get("arguments"))
                    ok = bool(args and isinstance(args.get("text"), str) and args["text"].strip())
                    content = "Noted." if ok else "Error: note needs a non-empty 'text' string."
                    cap = config.max_meta_actions
                    if cap is not None and sum(counters.meta.values()) >= cap:
                        ok, content = False, (f"Error: the meta-action budget of this episode is spent ({cap} calls); "
                                              "nothing was noted, continue with the environment's tools")
                    if ok:
                        memory.append(f"[note] {args['text'].strip()}")  # type: ignore[index]
                counters.meta_action(name, ok)
            else:
                step = env.step({"name": name, "arguments": fn.get("arguments", {})})
                content = step.observation
                bad = bool(step.info.get("invalid"))
                if name in env_names:
                    counters.env_step(bad)
                else:
                    counters.bad_call()  # a tool the model made up: the environment's answer, no step
                if shows and (bad or config.observations_in_belief):  # else the result is in the window only
                    ws.observe(str(name), result=None if bad else content, error=content if bad else None)
                memory.append(f"[{name} {fn.get('arguments', '')}] {content}")
                done = done or step.done
            history.append({"role": "tool", "tool_call_id": call_id, "name": name, "content": content})
            if done:
                break
        if done or (config.max_invalid_run is not None and counters.invalid_run >= config.max_invalid_run):
            break

    outcome = env.outcome()
    ws.finish(bool(outcome.success))
    info = {**outcome.info, **counters.outcome_info()}
    messages = [{"role": "system", "content": instructions(harness, config.system_prompt, parts=config.parts)}, *history]
    trace = ws.trace(
        task=task,
        messages=messages,
        outcome=Outcome(success=outcome.success, score=outcome.score, info=info),
        framework="core",
        harness=harness,
        env=getattr(env, "name", None),
        tools=tools,
        metadata={
            "seed": config.seed,
            "difficulty": getattr(env, "difficulty", None),
            **counters.metadata(),
            **config.harness_metadata(),
            "charged_model_calls": budget.charged,
            "wall_time_s": round(time.perf_counter() - started, 4),
        },
    )
    if not shows:  # only bpe and panels show the workspace; keep its bookkeeping out
        trace.meta_actions, trace.dashboards, trace.ledger = [], [], None
    trace.model_calls = calls
    return trace
