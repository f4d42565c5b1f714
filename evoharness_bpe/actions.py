"""The four meta-actions' arguments, tool specs and argument parsing.

Arguments arrive from models as a dict or a JSON string. `parse_arguments` turns them into a
validated model or raises a `MetaActionError` whose message names the field and what was
expected, so the model can correct its next call.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .exceptions import MetaActionError
from .state import SubgoalStatus

__all__ = [
    "META_ACTIONS",
    "ToolSpec",
    "TrackArgs",
    "CommitArgs",
    "RecallArgs",
    "NoteArgs",
    "ARGUMENT_MODELS",
    "parse_arguments",
    "tool_specs",
    "MAX_ARGUMENT_CHARS",
]

MAX_ARGUMENT_CHARS = 20_000
"""Raw argument text longer than this is refused before it is parsed."""


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


def _inline_schema(model: type[_Args], field_help: dict[str, str]) -> dict[str, Any]:
    schema = model.model_json_schema()
    props: dict[str, Any] = {}
    for name, prop in schema["properties"].items():
        prop = {k: v for k, v in prop.items() if k != "title"}
        if "$ref" in prop:  # enums are emitted as references; models handle inline ones better
            ref = prop.pop("$ref").rsplit("/", 1)[-1]
            prop.update({k: v for k, v in schema["$defs"][ref].items() if k != "title"})
        prop["description"] = field_help[name]
        props[name] = prop
    return {
        "type": "object",
        "properties": props,
        "required": schema.get("required", []),
        "additionalProperties": False,
    }


@cache
def _specs() -> tuple[ToolSpec, ...]:
    text = (Path(__file__).parent / "prompts" / "meta_actions.json").read_text("utf-8")
    help_text = json.loads(text)
    return tuple(
        ToolSpec(
            name=name,
            description=help_text[name]["description"],
            parameters=_inline_schema(model, help_text[name]["fields"]),
        )
        for name, model in ARGUMENT_MODELS.items()
    )


def tool_specs() -> list[ToolSpec]:
    """The four meta-actions as tool specs, in the order track, commit, recall, note."""
    return [spec.model_copy(deep=True) for spec in _specs()]


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


def parse_arguments(name: str, arguments: Any) -> _Args:
    """Validate a model's arguments for meta-action `name` (a dict or a JSON object string)."""
    model = ARGUMENT_MODELS.get(name) if isinstance(name, str) else None
    if model is None:
        raise MetaActionError(
            f"unknown meta-action {name!r}; available: {', '.join(META_ACTIONS)}", action=str(name)
        )
    if arguments is None or arguments == "":
        arguments = {}
    if isinstance(arguments, (str, bytes, bytearray)):
        if len(arguments) > MAX_ARGUMENT_CHARS:
            raise MetaActionError(
                f"arguments are {len(arguments)} characters long; the limit is {MAX_ARGUMENT_CHARS}",
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
    try:
        json.dumps(arguments, ensure_ascii=False).encode("utf-8")
    except (UnicodeEncodeError, TypeError, ValueError, RecursionError):
        raise MetaActionError(
            f"arguments must be JSON values in valid UTF-8; expected {_expected(name)}", action=name
        ) from None
    try:
        return model.model_validate(arguments)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_input=False)
        problems = "; ".join(_describe(e) for e in errors[:5])
        first = errors[0]["loc"][0] if errors and errors[0]["loc"] else None
        raise MetaActionError(
            f"invalid arguments for {name}: {problems}. Expected {_expected(name)}",
            action=name,
            field=str(first) if first is not None else None,
        ) from None
