"""Tool calls in plain text: the Hermes/Qwen ``<tool_call>{...}</tool_call>`` form.

`tools_system_prompt` writes the tool specs into a system prompt (for chat templates without a
tool section); `parse_tool_calls` reads calls back from a model's reply, tolerating the usual
slips of small models (a missing closing tag, code fences, single objects without tags, trailing
text). What cannot be parsed yields no call; the reply stays text.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["tools_system_prompt", "parse_tool_calls"]

_TAG_RE = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.S)
_FENCE_RE = re.compile(r"```(?:json)?\s*(.*?)```", re.S)
_NAME_RE = re.compile(r'"name"\s*:\s*"([^"]+)"(?:\s*,\s*"(?:arguments|parameters)"\s*:\s*(.*))?', re.S)


_EXAMPLE_VALUES: dict[str, Any] = {"integer": 1, "number": 1, "string": "...", "array": [], "boolean": True, "object": {}}


def _example(tool: dict[str, Any]) -> str:
    fn = tool["function"]
    props = fn.get("parameters", {}).get("properties", {})
    args = {}
    for field in fn.get("parameters", {}).get("required", []):
        spec = props.get(field, {})
        args[field] = spec["enum"][0] if spec.get("enum") else _EXAMPLE_VALUES.get(spec.get("type", "string"), "...")
    return json.dumps({"name": fn["name"], "arguments": args})


def tools_system_prompt(system: str, tools: list[dict[str, Any]]) -> str:
    """`system` followed by the tool specs and the calling convention, with a concrete example."""
    specs = "\n".join(json.dumps(t["function"], separators=(",", ":")) for t in tools)
    example = _example(tools[0]) if tools else '{"name": "<function-name>", "arguments": {}}'
    return (
        f"{system}\n\n# Tools\n\nYou may call one of these functions:\n<tools>\n{specs}\n</tools>\n\n"
        "To call a function, reply with a JSON object inside <tool_call></tool_call> tags, for example:\n"
        f"<tool_call>\n{example}\n</tool_call>"
    )


def _objects(text: str) -> list[Any]:
    """Every top-level JSON object in `text`, in order."""
    decoder = json.JSONDecoder()
    found, i = [], 0
    while (i := text.find("{", i)) != -1:
        try:
            value, end = decoder.raw_decode(text, i)
        except ValueError:
            i += 1
            continue
        found.append(value)
        i = end
    return found


def _repair(text: str) -> Any:
    """Close a JSON object cut off mid-way (a reply that hit the token limit), if that parses."""
    start = text.find("{")
    if start < 0:
        return None
    body = text[start:].rstrip().rstrip(",")
    closers, in_string, escaped = [], False, False
    for ch in body:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
            continue
        if ch == '"':
            in_string = True
        elif ch in "{[":
            closers.append("}" if ch == "{" else "]")
        elif ch in "}]" and closers:
            closers.pop()
    if in_string:
        body += '"'
    try:
        return json.loads(body.rstrip().rstrip(",") + "".join(reversed(closers)))
    except ValueError:
        return None


def _as_call(value: Any, known: set[str] | None) -> dict[str, Any] | None:
    if not isinstance(value, dict):
        return None
    if isinstance(value.get("function"), dict):
        value = value["function"]
    name = value.get("name")
    if not isinstance(name, str) or (known is not None and name not in known and "arguments" not in value):
        return None
    args = value.get("arguments", value.get("parameters", {}))
    if isinstance(args, str):
        text = args
    else:
        text = json.dumps(args if args is not None else {})
    return {"name": name, "arguments": text}


def parse_tool_calls(text: str, tool_names: set[str] | None = None) -> list[dict[str, Any]]:
    """The ``{"name", "arguments": <JSON text>}`` calls in a model reply (empty if none is found).

    A call whose arguments are broken JSON keeps them as written, for the tool to reject readably.
    """
    if not text:
        return []
    chunks = [m.group(1) for m in _TAG_RE.finditer(text)] or [m.group(1) for m in _FENCE_RE.finditer(text)] or [text]
    calls = []
    for chunk in chunks:
        for value in [*_objects(chunk), _repair(chunk)]:
            call = _as_call(value, tool_names)
            if call is not None:
                calls.append(call)
                break  # one call per tag or chunk
        else:
            # broken JSON around a known tool name: keep the call with its raw arguments, so the
            # environment answers with what is wrong instead of the reply counting as no call
            match = _NAME_RE.search(chunk)
            if match and (tool_names is None or match.group(1) in tool_names):
                raw = (match.group(2) or "{}").strip()
                calls.append({"name": match.group(1), "arguments": raw[:-1].rstrip() if raw.endswith("}") else raw})
    return calls
