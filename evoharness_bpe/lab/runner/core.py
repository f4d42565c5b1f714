"""The core episode loop: one environment, one policy, one harness, no framework.

Harnesses differ only in what the model is shown before each call:

* ``none`` — ReAct: the system prompt, the task and the full history;
* ``append`` — an append-only memory (every note and every observation, oldest first) in the
  system prompt, plus the recent window of messages; the model gets a ``note`` tool;
* ``bpe`` — the BPE dashboard in the system prompt, plus the recent window; the model gets the
  four meta-actions.

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
    tools = episode_tools(env, harness, style=config.spec_style)  # first: the style shapes the task text too
    task, first_observation = env.reset(config.seed)
    ws = Workspace(task, store=store, namespace=config.namespace, dashboard_tokens=config.dashboard_tokens)
    offered = {t["function"]["name"] for t in tools}
    env_names = offered - set(META_ACTIONS)
    size = None if harness == "none" else config.window
    history: list[ChatMessage] = [{"role": "user", "content": f"{task}\n\n{first_observation}"}]
    memory: list[str] = [f"[start] {first_observation}"]
    calls: list[ModelCall] = []
    counters = EpisodeCounters(spec_style=config.spec_style)
    done = False

    for _ in range(config.max_steps):
        system = system_prompt(
            harness, config.system_prompt, dashboard=ws.dashboard() if harness == "bpe" else "", memory=memory
        )
        tool_calls = model_call(policy, system, history, size, tools, counters, calls)
        if tool_calls is None:
            if counters.over:
                break
            continue
        for n, call in enumerate(tool_calls):
            call_id = call.get("id") or f"call_{len(calls)}_{n}"
            call["id"] = call_id
            fn = call.get("function") or {}
            name = fn.get("name")
            if name in META_ACTIONS and name in offered:
                if harness == "bpe":
                    result = ws.act(name, fn.get("arguments"), tool_call_id=call_id)
                    content, ok = result.content, result.ok
                else:
                    args = _arguments(fn.get("arguments"))
                    ok = bool(args and isinstance(args.get("text"), str) and args["text"].strip())
                    content = "Noted." if ok else "Error: note needs a non-empty 'text' string."
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
                if harness == "bpe":
                    ws.observe(str(name), result=None if bad else content, error=content if bad else None)
                memory.append(f"[{name} {fn.get('arguments', '')}] {content}")
                done = done or step.done
            history.append({"role": "tool", "tool_call_id": call_id, "name": name, "content": content})
            if done:
                break
        if done:
            break

    outcome = env.outcome()
    ws.finish(bool(outcome.success))
    info = {**outcome.info, **counters.outcome_info()}
    messages = [{"role": "system", "content": instructions(harness, config.system_prompt)}, *history]
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
            "wall_time_s": round(time.perf_counter() - started, 4),
        },
    )
    if harness != "bpe":  # only the bpe harness shows the workspace; keep its bookkeeping out
        trace.meta_actions, trace.dashboards, trace.ledger = [], [], None
    trace.model_calls = calls
    return trace
