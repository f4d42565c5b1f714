"""Shared fixtures: a small `Env`, expert traces from three sources, and the tiny model."""

from __future__ import annotations

import json
from typing import Any

import pytest

from evoharness_bpe import ModelCall, Outcome, Trace, Workspace
from evoharness_bpe.envs.base import EnvOutcome, StepResult
from evoharness_bpe.testing.scripted import ScriptedPolicy, tool_call


class LockerEnv:
    """Open lockers 1..difficulty in order with `open_locker(number)`; the last one ends the episode."""

    name = "lockers"

    def __init__(self, difficulty: int = 1) -> None:
        self.difficulty = difficulty
        self.opened = 0
        self.done = False

    def reset(self, seed: int) -> tuple[str, str]:
        self.opened = 0
        self.done = False
        return (f"Open lockers 1 to {self.difficulty} in order.", f"Locker room {seed}: all {self.difficulty} lockers closed.")

    def tools(self) -> list[dict[str, Any]]:
        return [
            {
                "type": "function",
                "function": {
                    "name": "open_locker",
                    "description": "Open one locker by its number.",
                    "parameters": {
                        "type": "object",
                        "properties": {"number": {"type": "integer", "description": "Locker number."}},
                        "required": ["number"],
                    },
                },
            }
        ]

    def step(self, tool_call: dict[str, Any]) -> StepResult:
        args = tool_call.get("arguments")
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except ValueError:
                args = None
        if tool_call.get("name") != "open_locker" or not isinstance(args, dict) or not isinstance(args.get("number"), int):
            return StepResult(observation="Invalid call: use open_locker(number: integer).", info={"invalid": True, "error": "bad call"})
        if self.done:
            return StepResult(observation="All lockers are open.", done=True)
        if args["number"] != self.opened + 1:
            return StepResult(observation=f"Locker {args['number']} is stuck; open {self.opened + 1} first.")
        self.opened += 1
        self.done = self.opened == self.difficulty
        return StepResult(observation=f"Locker {self.opened} opened.", done=self.done)

    def outcome(self) -> EnvOutcome:
        return EnvOutcome(success=self.opened == self.difficulty, score=self.opened / self.difficulty)


def expert_script(difficulty: int) -> list[Any]:
    """An expert episode: track the plan, open each locker, commit nothing else."""
    script: list[Any] = [tool_call("track", {"key": "plan", "value": f"open 1..{difficulty}"})]
    script += [tool_call("open_locker", {"number": n}) for n in range(1, difficulty + 1)]
    return script


def _framework_trace(framework: str, episode: int, success: bool = True) -> Trace:
    """A trace as an integration records it: its own episode, every model call's prompt and reply."""
    ws = Workspace("Open lockers 1 to 2 in order.", subgoals=["locker 1", "locker 2"])
    env = LockerEnv(2)
    tools = ws.openai_tools() + env.tools()
    history: list[dict[str, Any]] = [{"role": "user", "content": f"Open lockers 1 to 2 in order. ({framework} {episode})"}]
    calls = []
    script = [
        tool_call("commit", {"subgoal": "locker 1", "status": "doing"}, f"c{episode}a"),
        tool_call("open_locker", {"number": 1}, f"c{episode}b"),
        tool_call("open_locker", {"number": 2}, f"c{episode}c"),
    ]
    for reply in script:
        prompt = [{"role": "system", "content": f"instructions\n\n{ws.dashboard()}"}, *history]
        calls.append(ModelCall(messages=prompt, response=reply))
        history.append(reply)
        call = reply["tool_calls"][0]
        name, args = call["function"]["name"], call["function"]["arguments"]
        content = ws.act(name, args).content if name == "commit" else env.step({"name": name, "arguments": args}).observation
        history.append({"role": "tool", "tool_call_id": call["id"], "content": content})
    ws.finish(success)
    trace = ws.trace(messages=history, outcome=Outcome(success=success), framework=framework, env="lockers", tools=tools)
    trace.model_calls = calls
    return trace


@pytest.fixture
def framework_traces() -> list[Trace]:
    """Two LangGraph-style and two LlamaIndex-style episodes, plus one failed episode."""
    return [
        _framework_trace("langgraph", 0),
        _framework_trace("langgraph", 1),
        _framework_trace("llamaindex", 2),
        _framework_trace("llamaindex", 3),
        _framework_trace("langgraph", 4, success=False),
    ]


@pytest.fixture
def workspace_trace() -> Trace:
    """A real core episode: `run_bpe_episode` with a scripted expert."""
    from evoharness_bpe_training.episodes import run_bpe_episode

    return run_bpe_episode(LockerEnv(2), ScriptedPolicy(expert_script(2), final="All open."), seed=7)


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory):
    """The tiny random Qwen3-style model, saved once per session."""
    from evoharness_bpe_training.tiny import build_tiny_model

    path = tmp_path_factory.mktemp("tiny-model")
    build_tiny_model(path)
    return path


@pytest.fixture
def locker_env_cls():
    return LockerEnv


@pytest.fixture(scope="session")
def sft_traces() -> list[Trace]:
    """Expert traces for training: two framework-recorded episodes and two core episodes."""
    from evoharness_bpe_training.episodes import run_bpe_episode

    traces = [_framework_trace("langgraph", 0), _framework_trace("llamaindex", 1)]
    traces += [run_bpe_episode(LockerEnv(1), ScriptedPolicy(expert_script(1)), seed=s) for s in range(2)]
    return traces
