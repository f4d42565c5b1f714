"""Lockstep play: episodes side by side, one batched call per round, results as played one by one."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from evoharness_bpe.lab.frameworks import EpisodeConfig
from evoharness_bpe.lab.runner.core import run_episode
from evoharness_bpe.lab.runner.lockstep import Lockstep


class _Lockers:
    """Open lockers 1..n in order; the episode ends with the last."""

    name = "lockers"

    def __init__(self, n: int) -> None:
        self.n, self.opened = n, 0

    def reset(self, seed: int) -> tuple[str, str]:
        self.opened = 0
        return f"Open lockers 1 to {self.n}.", f"Room {seed}."

    def tools(self, style: str = "json") -> list[dict[str, Any]]:
        return [{"type": "function", "function": {"name": "open_locker", "description": "Open a locker.",
                 "parameters": {"type": "object", "properties": {"number": {"type": "integer"}}, "required": ["number"]}}}]

    def step(self, call: dict[str, Any]) -> Any:
        from evoharness_bpe.lab.envs.base import StepResult

        number = json.loads(call["arguments"])["number"] if isinstance(call["arguments"], str) else call["arguments"]["number"]
        if number == self.opened + 1:
            self.opened += 1
        return StepResult(observation=f"Locker {number}: {self.opened} open.", done=self.opened == self.n)

    def outcome(self) -> Any:
        from evoharness_bpe.lab.envs.base import EnvOutcome

        return EnvOutcome(success=self.opened == self.n, score=self.opened / self.n)


class _Opener:
    """Opens the next locker, read off the conversation; answers batches and records their sizes."""

    def __init__(self, *, fail_on: int | None = None) -> None:
        self.batches: list[int] = []
        self.single = 0
        self.fail_on = fail_on
        self._lock = threading.Lock()

    def _reply(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        opened = sum(1 for m in messages if m.get("role") == "tool" and "open." in str(m.get("content")))
        last = next((m for m in reversed(messages) if m.get("role") == "tool"), None)
        number = int(str(last["content"]).split(": ")[1].split()[0]) + 1 if last else 1
        if self.fail_on is not None and number == self.fail_on:
            raise RuntimeError("model server went away")
        assert opened >= 0
        return {"role": "assistant", "content": None, "tool_calls": [
            {"id": f"c{number}", "type": "function", "function": {"name": "open_locker", "arguments": json.dumps({"number": number})}}]}

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
        self.single += 1
        return self._reply(messages)

    def complete_batch(self, requests: list[tuple[list[dict[str, Any]], list[dict[str, Any]]]]) -> list[dict[str, Any]]:
        with self._lock:
            self.batches.append(len(requests))
        return [self._reply(messages) for messages, _ in requests]


def _jobs(sizes: list[int]) -> list[Any]:
    config = EpisodeConfig(harness="bpe", seed=0, max_steps=10, window=2)
    return [lambda policy, n=n: run_episode(_Lockers(n), policy, None, config) for n in sizes]


def _comparable(trace: Any) -> list[Any]:
    return [(call.messages, call.response) for call in trace.model_calls]


def test_rounds_batch_every_running_episode_and_shrink_as_episodes_end() -> None:
    policy = _Opener()
    sizes = [1, 3, 2, 3]
    lockstep = Lockstep(policy)
    traces = lockstep.play(_jobs(sizes))
    assert [t.outcome.success for t in traces] == [True] * 4
    assert policy.batches == [4, 3, 2] and policy.single == 0  # a round per call; finished episodes drop out
    sequential = [job(_Opener()) for job in _jobs(sizes)]
    assert [_comparable(t) for t in traces] == [_comparable(t) for t in sequential]


def test_max_batch_splits_a_round() -> None:
    policy = _Opener()
    Lockstep(policy, max_batch=2).play(_jobs([2, 2, 2]))
    assert policy.batches == [2, 1, 2, 1]


def test_a_failing_round_fails_its_episodes_and_the_error_is_raised_after_the_others_stop() -> None:
    policy = _Opener(fail_on=3)
    with pytest.raises(RuntimeError, match="model server went away"):
        Lockstep(policy).play(_jobs([1, 2, 3]))
    assert policy.batches == [3, 2, 1]  # the two short episodes finished; the third failed at locker 3
