"""Hostile meta-action arguments for fuzzing: oversized and deeply nested, in every shape.

Plain builders (no test framework needed), shared by the core's and the integrations' fuzz
tests, so every path is fed the same kinds of input.

>>> len(json.dumps(oversized("dict-string", 30_000))) > 30_000
True
>>> depth(nested(50))
50
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["OVERSIZED_KINDS", "NESTED_KINDS", "oversized", "nested", "nested_arguments", "depth"]

OVERSIZED_KINDS = ("json-string", "dict-string", "dict-tags", "dict-keys", "dict-fields")
NESTED_KINDS = ("top", "in-field", "json-string")


def oversized(kind: str, chars: int) -> Any:
    """Arguments of about `chars` characters, in the shape `kind` (one of `OVERSIZED_KINDS`)."""
    if kind == "json-string":
        return json.dumps({"text": "A" * chars})
    if kind == "dict-string":
        return {"key": "k", "value": "v" * chars, "text": "t" * chars, "query": "q" * chars, "subgoal": "s" * chars}
    if kind == "dict-tags":
        return {"text": "ok", "tags": ["t"] * (chars // 4)}
    if kind == "dict-keys":
        return {f"k{i}": i for i in range(chars // 8)}
    if kind == "dict-fields":
        return {name: name[0] * 3_999 for name in ("key", "value", "text", "query", "subgoal", "note")} | {
            f"x{i}": "y" * 3_999 for i in range(chars // 4_000)
        }
    raise ValueError(f"unknown kind {kind!r}; expected one of {', '.join(OVERSIZED_KINDS)}")


def nested(levels: int, leaf: Any = "x") -> Any:
    """`leaf` inside `levels` alternating lists and objects (built without recursion)."""
    value = leaf
    for i in range(levels):
        value = {"a": value} if i % 2 else [value]
    return value


def nested_arguments(kind: str, levels: int) -> Any:
    """Arguments nested `levels` deep, in the shape `kind` (one of `NESTED_KINDS`)."""
    if kind == "top":  # tool-call arguments are an object: nest inside its one field
        return {"a": nested(levels - 1)}
    if kind == "in-field":
        return {"key": "k", "value": nested(levels), "subgoal": "s", "query": nested(levels), "text": nested(levels)}
    if kind == "json-string":
        return '{"text":' + "[" * levels + "]" * levels + "}"
    raise ValueError(f"unknown kind {kind!r}; expected one of {', '.join(NESTED_KINDS)}")


def depth(value: Any) -> int:
    """How deeply lists and objects nest in `value` (without recursion)."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, (list, dict)):
            stack.extend((child, level + 1) for child in (item.values() if isinstance(item, dict) else item))
        else:
            deepest = max(deepest, level)
    return deepest
