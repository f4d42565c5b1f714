"""A scripted teacher for tests and examples: answers from the request, records what it was asked.

>>> teacher = ScriptedTeacher(distil)
>>> teacher([{"role": "system", "content": "..."}, {"role": "user", "content": '{"notes": [{"id": "n1", "text": "x"}], "related": []}'}])
'{"decisions": [{"op": "add", "text": "Procedure: x", "kind": "procedure"}]}'
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["ScriptedTeacher", "distil", "keep"]

Decide = Callable[[list[dict[str, Any]], list[dict[str, Any]]], Any]
"""``decide(notes, related)`` -> a list of decisions, or the raw text to answer with."""


def distil(notes: list[dict[str, Any]], related: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One ``add`` of a procedure per note."""
    return [{"op": "add", "text": f"Procedure: {n['text']}", "kind": "procedure"} for n in notes]


def keep(notes: list[dict[str, Any]], related: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A ``keep`` per note."""
    return [{"op": "keep", "id": n["id"]} for n in notes]


class ScriptedTeacher:
    """Answers with ``decide(notes, related)``; waits for `gate` first when one is given.

    `requests` holds each request's note texts, `payloads` the whole requests.
    """

    def __init__(self, decide: Decide = distil, *, gate: threading.Event | None = None) -> None:
        self.decide, self.gate = decide, gate
        self.requests: list[list[str]] = []
        self.payloads: list[dict[str, Any]] = []

    def __call__(self, messages: list[dict[str, str]]) -> str:
        if self.gate is not None:
            self.gate.wait(30)
        payload = json.loads(messages[-1]["content"])
        self.payloads.append(payload)
        self.requests.append([n["text"] for n in payload["notes"]])
        answer = self.decide(payload["notes"], payload["related"])
        return answer if isinstance(answer, str) else json.dumps({"decisions": answer})
