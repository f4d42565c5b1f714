"""Training-side overheads: building SFT rows from traces, and the harness in a rollout step.

    python bench/training.py

1. `traces_to_sft_dataset` on 200 episodes of 10 model calls, against the baseline of
   serialising the same traces to JSON (the least any export must do).
2. One environment tool call through the rollout environment class (workspace observation and
   a refreshed dashboard included), against the bare `Env.step`.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from evoharness_bpe import ModelCall, Outcome, Workspace
from evoharness_bpe.lab.envs.base import EnvOutcome, StepResult


class CounterEnv:
    """Call `add(n)` until the total reaches the target."""

    name = "counter"

    def __init__(self, difficulty: int = 1) -> None:
        self.difficulty = difficulty
        self.total = 0

    def reset(self, seed: int) -> tuple[str, str]:
        self.total = 0
        return f"Reach {10 * self.difficulty} with add(n).", "Total: 0"

    def tools(self) -> list[dict[str, Any]]:
        return [{"type": "function", "function": {"name": "add", "description": "Add n to the total.",
                 "parameters": {"type": "object", "properties": {"n": {"type": "integer", "description": "Amount."}}, "required": ["n"]}}}]

    def step(self, tool_call: dict[str, Any]) -> StepResult:
        self.total += int(tool_call["arguments"].get("n", 0))
        return StepResult(observation=f"Total: {self.total}", done=self.total >= 10 * self.difficulty)

    def outcome(self) -> EnvOutcome:
        return EnvOutcome(success=self.total >= 10 * self.difficulty, score=min(1.0, self.total / (10 * self.difficulty)))


def _trace(i: int):
    ws = Workspace(f"Episode {i}: reach 100", subgoals=["first half", "second half"])
    history: list[dict[str, Any]] = [{"role": "user", "content": f"Reach 100 (episode {i})."}]
    calls = []
    for step in range(10):
        prompt = [{"role": "system", "content": ws.dashboard()}, *history[-12:]]
        reply = {"role": "assistant", "content": None, "tool_calls": [
            {"id": f"c{step}", "type": "function", "function": {"name": "track", "arguments": f'{{"key": "k{step}", "value": "{i}"}}'}}]}
        calls.append(ModelCall(messages=prompt, response=reply))
        history += [reply, {"role": "tool", "tool_call_id": f"c{step}", "content": ws.act("track", {"key": f"k{step}", "value": str(i)}).content}]
    trace = ws.trace(messages=history, outcome=Outcome(success=True), env="counter")
    trace.model_calls = calls
    return trace


def _best(fn, repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    from evoharness_bpe_training.datasets import traces_to_sft_dataset
    from evoharness_bpe_training.environment import harness_environment

    traces = [_trace(i) for i in range(200)]
    build = _best(lambda: traces_to_sft_dataset(traces, eval_fraction=0.1), repeat=3)
    dump = _best(lambda: [t.model_dump_json() for t in traces], repeat=3)
    print(f"SFT rows from 200 traces (2,000 rows): {build * 1000:.0f} ms; JSON dump of the traces: {dump * 1000:.0f} ms; ratio {build / dump:.1f}x")

    env = CounterEnv(1000)
    env.reset(0)
    bare = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(1000):
            env.step({"name": "add", "arguments": {"n": 1}})
        bare.append((time.perf_counter() - start) / 1000)
    cls = harness_environment(lambda: CounterEnv(1000))
    wrapped_env = cls()
    wrapped_env.reset(seed=0)
    wrapped = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(200):
            wrapped_env.add(n=1)
        wrapped.append((time.perf_counter() - start) / 200)
    b, w = statistics.median(bare), statistics.median(wrapped)
    print(f"env tool call: bare {b * 1e6:.1f} µs; through the rollout environment (observe + dashboard) {w * 1e6:.0f} µs; ratio {w / b:.0f}x")


if __name__ == "__main__":
    main()
