"""`NoisyExpertPolicy`: the expert with ε-probability mistakes it then recovers from.

A mistake replaces the expert's next call with a malformed one: arguments that are not JSON, a
required argument missing, or a tool that does not exist. The environment rejects it with a
readable observation, the expert reads that (and notes a pitfall when it can) and sends the
right call next. Traces of these episodes teach recovery, not only the happy path.
"""

from __future__ import annotations

import json
import random
from typing import Any

from ..policy import ChatMessage
from .expert import ExpertPolicy

__all__ = ["NoisyExpertPolicy"]


class NoisyExpertPolicy(ExpertPolicy):
    """An `ExpertPolicy` that makes a mistake with probability `epsilon` (seeded)."""

    def __init__(self, env: Any, epsilon: float = 0.1, seed: int = 0) -> None:
        if not 0.0 <= epsilon < 1.0:
            raise ValueError("epsilon must be in [0, 1)")
        super().__init__(env)
        self.epsilon = epsilon
        self.rng = random.Random(seed)
        self.mistakes = 0

    def complete(self, messages: list[ChatMessage], tools: list[dict[str, Any]]) -> ChatMessage:
        reply = super().complete(messages, tools)
        if self.rng.random() >= self.epsilon:
            return reply
        self.mistakes += 1
        fn = reply["tool_calls"][0]["function"]
        args = json.loads(fn["arguments"])
        kind = self.rng.choice(("json", "missing", "unknown"))
        if kind == "json" or (kind == "missing" and not args):
            fn["arguments"] = json.dumps(args)[:-1] + ","  # cut off: not valid JSON
        elif kind == "missing":
            args.pop(next(iter(args)))
            fn["arguments"] = json.dumps(args)
        else:
            fn["name"] = fn["name"] + "_now"
        return reply
