"""The core episode loop: one environment, one policy, one harness, no framework.

Harnesses differ only in what the model is shown before each call:

* ``none`` — ReAct: the system prompt, the task and the full history;
* ``append`` — an append-only memory (every note and every observation, oldest first) in the
  system prompt, plus the recent window of messages; the model gets a ``note`` tool;
* ``bpe`` — the BPE dashboard in the system prompt, plus the recent window; the model gets the
  four meta-actions.

A reply without a tool call counts as an invalid action and gets a nudge; three in a row end the
episode (a small model that stopped calling tools will not start again).
"""

from __future__ import annotations

import copy
import json
import time
from importlib import resources
from typing import Any

from ..envs.base import Env
from ..frameworks import EpisodeConfig
from ..policy import ChatMessage, Policy
from ...stores.base import ExperienceStore
from ...text import approx_tokens
from ...trace import ModelCall, Outcome, Trace
from ...workspace import Workspace

__all__ = ["run_episode", "prompt_tokens", "window", "PROMPTS"]

META_ACTIONS = ("track", "commit", "recall", "note")
MAX_SILENT_REPLIES = 3
PROMPTS: dict[str, str] = json.loads(resources.files("evoharness_bpe.prompts").joinpath("runner.json").read_text("utf-8"))
"""System prompt pieces (data file ``prompts/runner.json``)."""


def prompt_tokens(messages: list[ChatMessage]) -> int:
    """Approximate tokens of a prompt: every message's text and tool-call arguments."""
    total = 0
    for m in messages:
        total += 4 + approx_tokens(str(m.get("content") or ""))
        for call in m.get("tool_calls") or []:
            fn = call.get("function", {})
            total += 4 + approx_tokens(str(fn.get("name", ""))) + approx_tokens(str(fn.get("arguments", "")))
    return total


def window(history: list[ChatMessage], size: int) -> list[ChatMessage]:
    """The task message plus the last `size` messages, never starting on an orphan tool result."""
    head, rest = history[:1], history[1:]
    if len(rest) <= size:
        return head + rest
    start = len(rest) - size
    while start > 0 and rest[start].get("role") == "tool":
        start -= 1  # keep the assistant message that owns these tool results
    return head + rest[max(0, start):]


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
    task, first_observation = env.reset(config.seed)
    harness = config.harness
    ws = Workspace(task, store=store, namespace=config.namespace, dashboard_tokens=config.dashboard_tokens)
    env_tools = env.tools()
    meta_tools = ws.openai_tools()
    if harness == "bpe":
        tools = env_tools + meta_tools
    elif harness == "append":
        tools = env_tools + [t for t in meta_tools if t["function"]["name"] == "note"]
    else:
        tools = list(env_tools)
    offered = {t["function"]["name"] for t in tools}
    base_system = config.system_prompt or PROMPTS["system"]
    history: list[ChatMessage] = [{"role": "user", "content": f"{task}\n\n{first_observation}"}]
    memory: list[str] = [f"[start] {first_observation}"]
    calls: list[ModelCall] = []
    tokens_per_step: list[int] = []
    meta_counts = {name: 0 for name in META_ACTIONS}
    meta_per_call: list[int] = []
    env_steps = invalid = silent = 0
    done = False

    for _ in range(config.max_steps):
        if harness == "bpe":
            system = f"{base_system}\n\n{PROMPTS['bpe']}\n\n{ws.dashboard()}"
            shown = window(history, config.window)
        elif harness == "append":
            system = f"{base_system}\n\n{PROMPTS['append']}\n\n<memory>\n" + "\n".join(memory) + "\n</memory>"
            shown = window(history, config.window)
        else:
            system, shown = base_system, history
        prompt = [{"role": "system", "content": system}, *copy.deepcopy(shown)]
        reply = policy.complete(copy.deepcopy(prompt), copy.deepcopy(tools))
        reply = {"role": "assistant", "content": reply.get("content"), **({"tool_calls": reply["tool_calls"]} if reply.get("tool_calls") else {})}
        n_tokens = prompt_tokens(prompt)
        calls.append(ModelCall(messages=prompt, response=copy.deepcopy(reply), prompt_tokens=n_tokens))
        tokens_per_step.append(n_tokens)
        history.append(reply)
        tool_calls = reply.get("tool_calls") or []
        meta_now = 0
        if not tool_calls:
            invalid += 1
            silent += 1
            history.append({"role": "user", "content": PROMPTS["nudge"]})
            meta_per_call.append(0)
            if silent >= MAX_SILENT_REPLIES:
                break
            continue
        silent = 0
        for n, call in enumerate(tool_calls):
            call_id = call.get("id") or f"call_{len(calls)}_{n}"
            call["id"] = call_id
            fn = call.get("function") or {}
            name = fn.get("name")
            if name in META_ACTIONS and name in offered:
                meta_now += 1
                meta_counts[name] += 1
                if harness == "bpe":
                    result = ws.act(name, fn.get("arguments"), tool_call_id=call_id)
                    content, ok = result.content, result.ok
                else:
                    args = _arguments(fn.get("arguments"))
                    ok = bool(args and isinstance(args.get("text"), str) and args["text"].strip())
                    content = "Noted." if ok else "Error: note needs a non-empty 'text' string."
                    if ok:
                        memory.append(f"[note] {args['text'].strip()}")  # type: ignore[index]
                invalid += not ok
            else:
                env_steps += 1
                step = env.step({"name": name, "arguments": fn.get("arguments", {})})
                content = step.observation
                bad = bool(step.info.get("invalid"))
                invalid += bad
                if harness == "bpe":
                    ws.observe(str(name), _arguments(fn.get("arguments")), result=None if bad else content, error=content if bad else None)
                memory.append(f"[{name} {fn.get('arguments', '')}] {content}")
                done = done or step.done
            history.append({"role": "tool", "tool_call_id": call_id, "name": name, "content": content})
            if done:
                break
        meta_per_call.append(meta_now)
        if done:
            break

    outcome = env.outcome()
    ws.finish(bool(outcome.success))
    info = {**outcome.info, "steps": env_steps, "invalid_actions": invalid}
    messages = [{"role": "system", "content": base_system}, *history]
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
            "prompt_tokens": tokens_per_step,
            "meta_actions_per_call": meta_per_call,
            "meta_actions": meta_counts,
            "model_calls": len(calls),
            "wall_time_s": round(time.perf_counter() - started, 4),
        },
    )
    if harness != "bpe":  # only the bpe harness shows the workspace; keep its bookkeeping out
        trace.meta_actions, trace.dashboards, trace.ledger = [], [], None
    trace.model_calls = calls
    return trace
