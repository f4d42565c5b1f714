"""Play one episode of an `Env` with a `Policy` under the BPE harness and return its `Trace`.

Each model call sees a system message (instructions and that step's dashboard), the task, and
the recent window of the conversation; every call's exact prompt and reply go into
`Trace.model_calls`, which is what `traces_to_sft_dataset` trains on.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from evoharness_bpe import META_ACTIONS, ExperienceStore, ModelCall, Outcome, Trace, Workspace
from evoharness_bpe.envs.base import Env
from evoharness_bpe.policy import ChatMessage, Policy

__all__ = ["system_prompt", "run_bpe_episode", "recent_window"]


@cache
def system_prompt() -> str:
    """The built-in instructions that open every prompt (``prompts/system.txt``)."""
    return (Path(__file__).parent / "prompts" / "system.txt").read_text("utf-8").strip()


def recent_window(history: list[ChatMessage], window: int) -> list[ChatMessage]:
    """The last `window` messages, never starting with an orphaned tool result."""
    recent = history[-window:] if window < len(history) else list(history)
    while recent and recent[0].get("role") == "tool":
        recent = recent[1:]
    return recent


def _arguments(raw: Any) -> dict[str, Any] | str:
    if isinstance(raw, str):
        try:
            parsed = json.loads(raw)
        except ValueError:
            return raw
        return parsed if isinstance(parsed, dict) else raw
    return raw if isinstance(raw, dict) else {}


def run_bpe_episode(
    env: Env,
    policy: Policy,
    *,
    seed: int = 0,
    store: ExperienceStore | None = None,
    max_steps: int = 30,
    window: int = 12,
    instructions: str | None = None,
    framework: str = "core",
) -> Trace:
    """Play `env` (seeded) with `policy`; return the trace with every model call recorded."""
    task, observation = env.reset(seed)
    ws = Workspace(task, store=store)
    tools = ws.openai_tools() + env.tools()
    opening: ChatMessage = {"role": "user", "content": f"{task}\n\n{observation}".strip()}
    history: list[ChatMessage] = []
    messages: list[ChatMessage] = [opening]
    calls: list[ModelCall] = []
    invalid = env_steps = 0
    done = False
    for _ in range(max_steps):
        system = {"role": "system", "content": f"{instructions or system_prompt()}\n\n{ws.dashboard()}"}
        prompt = [system, opening, *recent_window(history, window)]
        reply = policy.complete(prompt, tools)
        calls.append(ModelCall(messages=prompt, response=reply))
        history.append(reply)
        messages.append(reply)
        tool_calls = reply.get("tool_calls") or []
        if not tool_calls:
            break
        for call in tool_calls:
            name = call["function"]["name"]
            raw = call["function"].get("arguments")
            if name in META_ACTIONS:
                content = ws.act(name, raw, tool_call_id=call.get("id")).content
            else:
                result = env.step({"name": name, "arguments": _arguments(raw)})
                env_steps += 1
                invalid += bool(result.info.get("invalid"))
                error = result.info.get("error") if result.info.get("invalid") else None
                ws.observe(name, raw, result=None if error else result.observation, error=error)
                content = result.observation
                done = done or result.done
            tool_message = {"role": "tool", "tool_call_id": call.get("id"), "name": name, "content": content}
            history.append(tool_message)
            messages.append(tool_message)
        if done:
            break
    outcome = env.outcome()
    ws.finish(outcome.success)
    trace = ws.trace(
        task=task,
        messages=messages,
        outcome=Outcome(success=outcome.success, score=outcome.score, info={**outcome.info, "steps": env_steps, "invalid_actions": invalid}),
        framework=framework,
        env=env.name,
        tools=tools,
        metadata={"seed": seed, "difficulty": env.difficulty},
    )
    trace.model_calls = calls
    return trace
