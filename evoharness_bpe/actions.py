"""The four meta-actions' arguments, tool specs and argument parsing.

Arguments arrive from models as a dict or a JSON string. `parse_arguments` turns them into a
validated model or raises a `MetaActionError` whose message names the field and what was
expected, so the model can correct its next call.

Size and nesting are checked before anything is parsed or serialised, in time and memory
bounded by the limits rather than by the input: raw text longer than `MAX_ARGUMENT_CHARS`, a
dict whose serialised form would be longer, or nesting deeper than `MAX_ARGUMENT_DEPTH` is
refused at once, and `bounded_json` keeps at most `MAX_RECORDED_CHARS` of a call.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .exceptions import MetaActionError, UserError
from .state import SubgoalStatus

__all__ = [
    "meta_actions_of",
    "check_meta_action_cap",
    "META_ACTIONS",
    "PARTS",
    "PART_OF",
    "Part",
    "check_parts",
    "ToolSpec",
    "TrackArgs",
    "CommitArgs",
    "RecallArgs",
    "NoteArgs",
    "ARGUMENT_MODELS",
    "parse_arguments",
    "tool_specs",
    "SPEC_STYLES",
    "MAX_ARGUMENT_CHARS",
    "MAX_ARGUMENT_DEPTH",
    "MAX_RECORDED_CHARS",
    "bounded_json",
    "PORTABLE_KEYWORDS",
    "portable_schema",
]

MAX_ARGUMENT_CHARS = 20_000
"""Raw argument text (or a dict's serialised form) longer than this is refused before parsing."""
MAX_ARGUMENT_DEPTH = 16
"""Arguments nested deeper than this (objects and arrays) are refused before parsing."""
MAX_RECORDED_CHARS = 2_000
"""The ledger, events and traces keep at most this much of a refused call's arguments."""


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, defer_build=True)


class TrackArgs(_Args):
    key: str = Field(min_length=1, max_length=200)
    value: str | None = Field(max_length=4000)
    source: str = Field(default="agent", min_length=1, max_length=200)
    confidence: float = Field(default=1.0, ge=0.0, le=1.0)


class CommitArgs(_Args):
    subgoal: str = Field(min_length=1, max_length=200)
    status: SubgoalStatus
    note: str | None = Field(default=None, max_length=1000)


class RecallArgs(_Args):
    query: str = Field(min_length=1, max_length=500)
    k: int = Field(default=3, ge=1, le=10)


class NoteArgs(_Args):
    text: str = Field(min_length=1, max_length=2000)
    tags: list[Annotated[str, Field(min_length=1, max_length=40)]] = Field(default_factory=list, max_length=16)
    kind: Literal["lesson", "procedure", "pitfall"] = "lesson"
    supersedes: str | None = Field(default=None, min_length=1, max_length=64)


ARGUMENT_MODELS: dict[str, type[_Args]] = {
    "track": TrackArgs,
    "commit": CommitArgs,
    "recall": RecallArgs,
    "note": NoteArgs,
}
META_ACTIONS: tuple[str, ...] = tuple(ARGUMENT_MODELS)

Part = Literal["belief", "progress", "experience"]
PARTS: tuple[Part, ...] = ("belief", "progress", "experience")
"""The three parts of the workspace, each of which a harness can switch off (an ablation)."""
PART_OF: dict[str, Part] = {"track": "belief", "commit": "progress", "recall": "experience", "note": "experience"}
"""The part each meta-action reads or writes."""


def check_parts(parts: Any) -> tuple[Part, ...]:
    """`parts` as a tuple in the order belief, progress, experience; an unknown name is a `UserError`.

    >>> check_parts(["experience", "belief", "belief"])
    ('belief', 'experience')
    """
    if isinstance(parts, str) or not all(isinstance(p, str) for p in parts):
        raise UserError(f"parts must be a list of part names ({', '.join(PARTS)}), not {parts!r}")
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        raise UserError(f"unknown part {', '.join(map(repr, unknown))}; the parts are {', '.join(PARTS)}")
    return tuple(p for p in PARTS if p in parts)


def meta_actions_of(parts: tuple[Part, ...]) -> tuple[str, ...]:
    """The meta-actions of the parts switched on, in the order track, commit, recall, note."""
    return tuple(name for name, part in PART_OF.items() if part in parts)


def check_meta_action_cap(cap: Any) -> int | None:
    """`cap` checked as a number of meta-action calls (0 or more), or None for no cap."""
    if cap is not None and (not isinstance(cap, int) or isinstance(cap, bool) or cap < 0):
        raise UserError("max_meta_actions must be a number of calls (0 or more), or None for no cap")
    return cap


class ToolSpec(BaseModel):
    """A tool as a model sees it: name, description and JSON schema of its parameters."""

    model_config = ConfigDict(defer_build=True)

    name: str
    description: str
    parameters: dict[str, Any]

    def openai(self) -> dict[str, Any]:
        """The spec in the OpenAI function-calling format."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }


PORTABLE_KEYWORDS = frozenset(
    {"type", "properties", "required", "additionalProperties", "items", "enum", "anyOf", "description"}
)
"""The JSON-schema keywords a model-facing schema keeps: the subset that llama.cpp's grammar,
vLLM's guided decoding (xgrammar, outlines) and OpenAI's strict mode all accept. Length, size and
range limits (``maxLength``, ``maxItems``, ``minimum``, ...) and ``default`` are left out: a large
``maxLength`` overflows llama.cpp's grammar and strict mode rejects them. The limits stay enforced
by `parse_arguments`, whose error names the field and the limit."""


def portable_schema(schema: Any) -> Any:
    """`schema` with only the `PORTABLE_KEYWORDS`, at every level (property names are kept).

    >>> portable_schema({"type": "string", "maxLength": 4000, "default": "x", "description": "d"})
    {'type': 'string', 'description': 'd'}
    """
    if isinstance(schema, list):
        return [portable_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key not in PORTABLE_KEYWORDS:
            continue
        if key == "properties":
            out[key] = {name: portable_schema(prop) for name, prop in value.items()}
        elif key in ("items", "anyOf", "additionalProperties"):
            out[key] = portable_schema(value)
        else:
            out[key] = value
    return out


def _inline_schema(model: type[_Args], field_help: dict[str, str]) -> dict[str, Any]:
    schema = model.model_json_schema()
    props: dict[str, Any] = {}
    for name, prop in schema["properties"].items():
        if "$ref" in prop:  # enums are emitted as references; models handle inline ones better
            ref = prop.pop("$ref").rsplit("/", 1)[-1]
            prop.update(schema["$defs"][ref])
        prop = portable_schema(prop)
        prop["description"] = field_help[name]
        props[name] = prop
    return {
        "type": "object",
        "properties": props,
        "required": schema.get("required", []),
        "additionalProperties": False,
    }


SPEC_STYLES: tuple[str, ...] = ("full", "compact")
"""How the meta-action specs are written: ``full`` (the default, for frontier models) or
``compact`` (one-line descriptions for small models: the same names and argument shapes)."""


def _compact_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """The same argument shapes with only what a model needs: types, enums, required fields.

    Optional null values are still accepted; limits and defaults stay enforced in
    `parse_arguments`, which answers with a readable error.
    """
    props: dict[str, Any] = {}
    for name, prop in schema["properties"].items():
        if "anyOf" in prop:  # X or null
            small: dict[str, Any] = {"type": next(p["type"] for p in prop["anyOf"] if p.get("type") != "null")}
        else:
            small = {"type": prop["type"]}
        if "enum" in prop:
            small["enum"] = prop["enum"]
        if "items" in prop and prop["items"].get("type") != "string":  # arrays of strings by default
            small["items"] = {"type": prop["items"]["type"]}
        if prop.get("description"):
            small["description"] = prop["description"]
        props[name] = small
    return {"type": "object", "properties": props, "required": schema["required"]}


@cache
def _specs(style: str = "full") -> tuple[ToolSpec, ...]:
    if style not in SPEC_STYLES:
        raise UserError(f"spec style {style!r} is not available; use one of {', '.join(SPEC_STYLES)}")
    suffix = "" if style == "full" else f"_{style}"
    text = (Path(__file__).parent / "prompts" / f"meta_actions{suffix}.json").read_text("utf-8")
    help_text = json.loads(text)
    shape = _compact_schema if style == "compact" else (lambda schema: schema)
    return tuple(
        ToolSpec(
            name=name,
            description=help_text[name]["description"],
            parameters=shape(_inline_schema(model, help_text[name]["fields"])),
        )
        for name, model in ARGUMENT_MODELS.items()
    )


def tool_specs(style: str = "full") -> list[ToolSpec]:
    """The four meta-actions as tool specs, in the order track, commit, recall, note.

    `style` is ``full`` or ``compact`` (`SPEC_STYLES`); both accept the same arguments.
    """
    return [spec.model_copy(deep=True) for spec in _specs(style)]


def _expected(name: str) -> str:
    spec = next(s for s in _specs() if s.name == name)
    required = set(spec.parameters["required"])
    parts = []
    for field, prop in spec.parameters["properties"].items():
        kind = prop.get("type") or " or ".join(p.get("type", "?") for p in prop.get("anyOf", []))
        if "enum" in prop:
            kind = "|".join(map(str, prop["enum"]))
        parts.append(f"{field}: {kind}{'' if field in required else ' (optional)'}")
    return f"{name}({', '.join(parts)})"


def _describe(error: dict[str, Any]) -> str:
    loc = ".".join(str(p) for p in error["loc"]) or "arguments"
    kind = error["type"]
    if kind == "missing":
        return f"missing required field {loc!r}"
    if kind == "extra_forbidden":
        return f"unexpected field {loc!r}"
    message = error["msg"]
    return f"field {loc!r}: {message}"


_STRING_RE = re.compile(rb'"(?:[^"\\]|\\.)*"?')
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


def _deeper_than(text: bytes, limit: int) -> bool:
    """Whether JSON text nests brackets deeper than `limit`, strings skipped (without parsing)."""
    depth = 0
    for byte in _STRING_RE.sub(b"", text).translate(None, _NOT_BRACKETS):
        depth += 1 if byte in (0x5B, 0x7B) else -1  # [ {
        if depth > limit:
            return True
    return False


def _oversize(value: Any, max_chars: int = MAX_ARGUMENT_CHARS, max_depth: int = MAX_ARGUMENT_DEPTH) -> str | None:
    """Why `value` is over the size or depth limit (None when within), without serialising it.

    The walk stops as soon as a limit is passed, so its cost is bounded by the limits; the size
    is a lower bound of the serialised length.
    """
    size = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (str, bytes, bytearray)):
            size += len(item) + 2
        elif isinstance(item, (dict, list, tuple)):
            if depth > max_depth:
                return f"arguments are nested deeper than {max_depth} levels; the limit is {max_depth}"
            size += 2
            is_dict = isinstance(item, dict)
            for key, child in item.items() if is_dict else enumerate(item):
                size += (len(key) + 3 if isinstance(key, str) else 8) if is_dict else 1
                # Scalars are counted here, only containers pushed: few allocations, so no
                # garbage collection pass over a huge input while it is being measured.
                if isinstance(child, (str, bytes, bytearray)):
                    size += len(child) + 2
                elif isinstance(child, (dict, list, tuple)):
                    stack.append((child, depth + 1))
                else:
                    size += 8
                if size > max_chars:
                    break
        else:
            size += 8
        if size > max_chars:
            return f"arguments are over {max_chars} characters when serialised; the limit is {max_chars}"
    return None


_CUT_CHARS = 4_096
"""Longer than every string field's limit (a test checks it)."""


def _shrunk(arguments: dict[Any, Any]) -> dict[Any, Any]:
    """`arguments` with over-long top-level strings cut to just over every field's limit.

    The cut value still fails validation, and the error names the field and its limit.
    """
    return {
        k: v[: _CUT_CHARS + 1] if isinstance(v, (str, bytes, bytearray)) and len(v) > _CUT_CHARS else v
        for k, v in arguments.items()
    }


def _short_repr(value: Any, limit: int = 60) -> str:
    text = value[: limit + 1] if isinstance(value, str) else value
    try:
        shown = repr(text) if isinstance(text, (str, int, type(None))) else f"<{type(value).__name__}>"
    except Exception:  # a huge int's repr may refuse; the type is enough
        shown = f"<{type(value).__name__}>"
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"


def bounded_json(arguments: Any, limit: int = MAX_RECORDED_CHARS) -> str:
    """A call's arguments (or a tool's result) as JSON text of at most about `limit` characters.

    Within the limit this is what the model wrote (a string as is, a dict serialised); a
    longer text is cut and marked with its length, a value too large or deep to serialise
    cheaply is described instead. The cost is bounded by `limit`, not by the value.
    """
    if arguments is None:
        return ""
    if isinstance(arguments, (bytes, bytearray)):
        arguments = bytes(arguments[: 4 * limit]).decode("utf-8", "replace")
    if not isinstance(arguments, str):
        if _oversize(arguments, max_chars=4 * limit) is not None:
            return f"<{type(arguments).__name__} over the size or depth limit, not recorded>"
        try:
            arguments = json.dumps(arguments, ensure_ascii=False, default=str)
        except (TypeError, ValueError, RecursionError):
            return f"<{type(arguments).__name__} that is not JSON, not recorded>"
    if len(arguments) <= limit:
        return arguments
    return arguments[:limit] + f"… [cut: {len(arguments)} characters]"


def parse_arguments(name: str, arguments: Any) -> _Args:
    """Validate a model's arguments for meta-action `name` (a dict or a JSON object string)."""
    model = ARGUMENT_MODELS.get(name) if isinstance(name, str) else None
    if model is None:
        raise MetaActionError(
            f"unknown meta-action {_short_repr(name)}; available: {', '.join(META_ACTIONS)}",
            action=_short_repr(name) if not isinstance(name, str) or len(name) > 60 else name,
        )
    if arguments is None or arguments == "":
        arguments = {}
    if isinstance(arguments, (str, bytes, bytearray)):
        if len(arguments) > MAX_ARGUMENT_CHARS:
            raise MetaActionError(
                f"arguments are {len(arguments)} characters long; the limit is {MAX_ARGUMENT_CHARS}",
                action=name,
            )
        raw = arguments.encode("utf-8", "surrogatepass") if isinstance(arguments, str) else bytes(arguments)
        if raw.count(b"[") + raw.count(b"{") > MAX_ARGUMENT_DEPTH and _deeper_than(raw, MAX_ARGUMENT_DEPTH):
            raise MetaActionError(
                f"arguments are nested deeper than {MAX_ARGUMENT_DEPTH} levels; the limit is "
                f"{MAX_ARGUMENT_DEPTH}; expected {_expected(name)}",
                action=name,
            )
        try:
            arguments = json.loads(arguments)
        except (ValueError, RecursionError) as exc:
            raise MetaActionError(
                f"arguments are not valid JSON ({exc}); expected a JSON object for {_expected(name)}",
                action=name,
            ) from None
    if not isinstance(arguments, dict):
        raise MetaActionError(
            f"arguments must be a JSON object, got {type(arguments).__name__}; expected {_expected(name)}",
            action=name,
        )
    problem = _oversize(arguments)
    if problem is not None:
        shrunk = _shrunk(arguments) if len(arguments) <= 16 else arguments  # meta-actions have ≤ 4 fields
        if _oversize(shrunk) is not None:
            raise MetaActionError(f"{problem}; expected {_expected(name)}", action=name)
        arguments = shrunk  # fails validation below, naming the over-long field and its limit
    try:
        json.dumps(arguments, ensure_ascii=False).encode("utf-8")
    except (UnicodeEncodeError, TypeError, ValueError, RecursionError):
        raise MetaActionError(
            f"arguments must be JSON values in valid UTF-8; expected {_expected(name)}", action=name
        ) from None
    try:
        parsed = model.model_validate(arguments)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_input=False)
        problems = "; ".join(_describe(e) for e in errors[:5])
        first = errors[0]["loc"][0] if errors and errors[0]["loc"] else None
        raise MetaActionError(
            f"invalid arguments for {name}: {problems}. Expected {_expected(name)}",
            action=name,
            field=str(first) if first is not None else None,
        ) from None
    if problem is not None:  # unreachable while every field's limit is below the total's
        raise MetaActionError(f"{problem}; expected {_expected(name)}", action=name)
    return parsed
