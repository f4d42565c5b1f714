"""Shared checks of the tool calls environments receive: name, JSON arguments, schema."""

from __future__ import annotations

import json
from typing import Any

from ...actions import portable_schema
from ...exceptions import UserError
from .base import StepResult

__all__ = ["parse_call", "invalid", "function_spec", "ToolCallEnv", "ENV_STYLES"]

ENV_STYLES: tuple[str, ...] = ("full", "compact")


def function_spec(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    """An OpenAI function tool spec whose parameters keep only the portable keywords
    (`evoharness_bpe.actions.PORTABLE_KEYWORDS`); limits are checked by the environment."""
    props = {field: portable_schema(prop) for field, prop in properties.items()}
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": props, "required": required, "additionalProperties": False},
        },
    }


def invalid(message: str) -> StepResult:
    """The readable answer to a malformed or impossible call; nothing in the environment changes."""
    return StepResult(observation=f"Error: {message}", done=False, info={"invalid": True, "error": message})


_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "array": (list,),
    "boolean": (bool,),
    "object": (dict,),
}


def parse_call(tool_call: Any, tools: list[dict[str, Any]]) -> tuple[str, dict[str, Any]] | StepResult:
    """``(name, arguments)`` for a well-formed call of one of `tools`, else an invalid `StepResult`.

    Accepts ``{"name", "arguments"}`` or the OpenAI ``{"function": {...}}`` form; arguments may be a
    dict or JSON text. Types are checked against each tool's JSON schema (booleans are not integers).
    """
    if not isinstance(tool_call, dict):
        return invalid("a tool call must be an object with 'name' and 'arguments'.")
    call = tool_call.get("function", tool_call)
    if not isinstance(call, dict):
        return invalid("a tool call must be an object with 'name' and 'arguments'.")
    name = call.get("name")
    specs = {t["function"]["name"]: t["function"] for t in tools}
    if not isinstance(name, str) or name not in specs:
        return invalid(f"unknown tool {name!r}; available tools: {', '.join(specs)}.")
    raw = call.get("arguments", {})
    if raw is None or raw == "":
        raw = {}
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as exc:
            return invalid(f"arguments of {name} are not valid JSON ({exc.msg} at position {exc.pos}); send a JSON object.")
    if not isinstance(raw, dict):
        return invalid(f"arguments of {name} must be a JSON object, not {type(raw).__name__}.")
    schema = specs[name]["parameters"]
    props: dict[str, Any] = schema.get("properties", {})
    missing = [f for f in schema.get("required", []) if f not in raw]
    if missing:
        return invalid(f"{name} needs the argument(s) {', '.join(missing)}.")
    unknown = [f for f in raw if f not in props]
    if unknown:
        return invalid(f"{name} has no argument(s) {', '.join(unknown)}; it takes {', '.join(props) or 'none'}.")
    for field, value in raw.items():
        expected = props[field].get("type")
        types = _TYPES.get(expected) if isinstance(expected, str) else None
        if types is None:
            continue
        if isinstance(value, bool) and bool not in types or not isinstance(value, types):
            return invalid(f"{name}: argument '{field}' must be a {expected}, not {type(value).__name__}.")
        if expected == "array" and "items" in props[field]:
            item_types = _TYPES.get(props[field]["items"].get("type", ""), ())
            if item_types and any(isinstance(v, bool) or not isinstance(v, item_types) for v in value):
                return invalid(f"{name}: every item of '{field}' must be a {props[field]['items']['type']}.")
        if "enum" in props[field] and value not in props[field]["enum"]:
            return invalid(f"{name}: argument '{field}' must be one of {', '.join(map(str, props[field]['enum']))}, not {value!r}.")
    return name, raw


class ToolCallEnv:
    """What every built-in environment does with a call before its own logic: count it, check it.

    Subclasses set `_tools` (their OpenAI specs), `steps` and `invalid_actions`, and may set
    `_compact_descriptions` (tool name → one-line description) for the ``compact`` style; the
    argument schemas are the same in both styles, so a call valid in one is valid in the other.
    """

    _tools: list[dict[str, Any]]
    _compact_descriptions: dict[str, str] = {}
    steps: int
    invalid_actions: int
    style: str = "full"
    """How the environment writes tool specs and observations: ``full`` or ``compact``."""

    def tools(self, style: str = "full") -> list[dict[str, Any]]:
        """The tools as OpenAI specs in `style`; the style also applies to later observations."""
        if style not in ENV_STYLES:
            raise UserError(f"style must be one of {', '.join(ENV_STYLES)}, not {style!r}")
        self.style = style
        specs = [json.loads(json.dumps(t)) for t in self._tools]
        if style == "compact":
            for spec in specs:
                fn = spec["function"]
                fn["description"] = self._compact_descriptions.get(fn["name"], fn["description"])
                params = fn["parameters"]
                params.pop("additionalProperties", None)  # as the compact meta-action specs
                for prop in params.get("properties", {}).values():
                    prop.pop("description", None)
                    if prop.get("items") == {"type": "string"}:
                        del prop["items"]  # arrays of strings by default
        return specs

    def _accept(self, tool_call: Any) -> tuple[str, dict[str, Any]] | StepResult:
        """Count the step and parse the call; a malformed call is counted invalid and answered."""
        self.steps += 1
        parsed = parse_call(tool_call, self._tools)
        if isinstance(parsed, StepResult):
            self.invalid_actions += 1
        return parsed
