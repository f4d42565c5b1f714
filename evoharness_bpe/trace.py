"""Episode traces: one JSON object per line, written crash-safely, read back tolerantly.

A trace is what training needs from an episode, whichever framework ran it: the task, the
messages in OpenAI chat format (assistant ``tool_calls``, ``tool`` results), the tools offered,
every meta-action with its cost, the dashboards the model was shown, and the outcome.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .actions import MAX_ARGUMENT_CHARS, MAX_RECORDED_CHARS, META_ACTIONS, bounded_json
from .exceptions import UserError
from .ledger import ActionCost, LedgerSummary

try:
    import fcntl
except ImportError:  # Windows: lines of one process still never interleave (the thread lock)
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "TRACE_SCHEMA_VERSION",
    "MetaActionEvent",
    "DashboardSnapshot",
    "Outcome",
    "ModelCall",
    "Trace",
    "TraceWriter",
    "read_traces",
    "TornTraceWarning",
]

TRACE_SCHEMA_VERSION = 1


class TornTraceWarning(UserWarning):
    """A line of a trace file could not be read (usually the last one, cut by a crash)."""


class MetaActionEvent(BaseModel):
    """One meta-action call as the model made it and as the workspace answered."""

    model_config = ConfigDict(defer_build=True)

    step: int = Field(description="Workspace step before the call.")
    name: str
    arguments: str = Field(description="The arguments as the model wrote them (JSON text).")
    ok: bool
    content: str = Field(description="What the model was told.")
    cost: ActionCost
    tool_call_id: str | None = None


class DashboardSnapshot(BaseModel):
    """A dashboard as rendered for the model."""

    model_config = ConfigDict(defer_build=True)

    step: int
    text: str
    tokens: int


def bound_meta_action_calls(message: dict[str, Any]) -> dict[str, Any]:
    """`message` with meta-action tool-call arguments over the argument limit cut, as events are.

    Such a call was refused whole; recording it whole (in the conversation and in every later
    prompt) would let one hostile call grow a trace line by its size many times over.
    """
    calls = message.get("tool_calls")
    if not isinstance(calls, list):
        return message
    bounded = []
    for call in calls:
        fn = call.get("function") if isinstance(call, dict) else None
        args = fn.get("arguments") if isinstance(fn, dict) else None
        if isinstance(fn, dict) and fn.get("name") in META_ACTIONS and args is not None:
            cut = _cut_arguments(args)
            if cut is not args:
                call = {**call, "function": {**fn, "arguments": cut}}
        bounded.append(call)
    return {**message, "tool_calls": bounded}


def _cut_arguments(args: Any) -> Any:
    """`args` itself within the argument limit, else its first characters and its length."""
    if isinstance(args, str):
        return bounded_json(args, MAX_RECORDED_CHARS) if len(args) > MAX_ARGUMENT_CHARS else args
    probe = bounded_json(args, MAX_ARGUMENT_CHARS)  # bounded work, whatever the value's size
    if probe.startswith("<") and probe.endswith("not recorded>"):
        return probe
    if len(probe) <= MAX_ARGUMENT_CHARS:
        return args
    head, _, length = probe.rpartition("… [cut: ")
    return f"{head[:MAX_RECORDED_CHARS]}… [cut: {length}"


def _bound_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [bound_meta_action_calls(m) if isinstance(m, dict) and m.get("tool_calls") else m for m in messages]


class ModelCall(BaseModel):
    """One model call: exactly the prompt the model received and the message it answered with.

    This is what supervised fine-tuning trains on (one row per model call).
    """

    model_config = ConfigDict(defer_build=True)

    messages: list[dict[str, Any]] = Field(description="The prompt as sent, system message included.")
    response: dict[str, Any] = Field(description="The assistant message the model returned.")
    prompt_tokens: int = Field(default=0, description="Tokens of the prompt (the workspace counter).")

    @field_validator("messages")
    @classmethod
    def _cut_prompt(cls, value: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return _bound_messages(value)

    @field_validator("response")
    @classmethod
    def _cut_response(cls, value: dict[str, Any]) -> dict[str, Any]:
        return bound_meta_action_calls(value)


class Outcome(BaseModel):
    """How the episode ended."""

    model_config = ConfigDict(defer_build=True)

    success: bool | None = None
    score: float | None = Field(default=None, description="Partial score in [0, 1], if any.")
    info: dict[str, Any] = Field(default_factory=dict)


class Trace(BaseModel):
    """One episode, framework-neutral (LangGraph and LlamaIndex traces are interchangeable)."""

    model_config = ConfigDict(defer_build=True)

    schema_version: Literal[1] = TRACE_SCHEMA_VERSION
    episode_id: str = Field(default_factory=lambda: uuid.uuid4().hex)
    created: float = Field(default_factory=time.time)
    task: str = ""
    framework: str = Field(default="core", description="core, langgraph, llamaindex, …")
    harness: str = Field(default="bpe", description="none, append, panels or bpe.")
    env: str | None = None
    messages: list[dict[str, Any]] = Field(default_factory=list, description="OpenAI chat messages.")
    model_calls: list[ModelCall] = Field(default_factory=list, description="Each prompt and reply.")
    tools: list[dict[str, Any]] = Field(default_factory=list, description="OpenAI tool specs offered.")
    meta_actions: list[MetaActionEvent] = Field(default_factory=list)
    dashboards: list[DashboardSnapshot] = Field(default_factory=list)
    outcome: Outcome = Field(default_factory=Outcome)
    ledger: LedgerSummary | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)

    @field_validator("messages")
    @classmethod
    def _cut_messages(cls, value: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return _bound_messages(value)


class TraceWriter:
    """Appends traces to a JSONL file, one episode a line, flushed and fsynced per episode.

    Several threads and processes may write to one file: each line goes out in one locked
    write, so lines never interleave (across processes where `fcntl` exists). Every record
    starts on a fresh line: if the file ends in a line torn by a crashed writer, a newline
    closes it first, so the torn line is skipped by `read_traces` and nothing after it is
    lost. Use it as a context manager or call `close()`.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND | getattr(os, "O_BINARY", 0), 0o644)
        self._lock = threading.Lock()

    def write(self, trace: Trace) -> None:
        """Append `trace` as one line; when this returns, the line is on disk."""
        line = (trace.model_dump_json() + "\n").encode("utf-8")
        with self._lock:
            if self._fd < 0:
                raise UserError("this TraceWriter is closed")
            if fcntl is not None:
                fcntl.flock(self._fd, fcntl.LOCK_EX)
            try:
                if not self._at_line_start():
                    line = b"\n" + line
                view = memoryview(line)
                while view:
                    written = os.write(self._fd, view)
                    view = view[written:]
                os.fsync(self._fd)
            finally:
                if fcntl is not None:
                    fcntl.flock(self._fd, fcntl.LOCK_UN)

    def _at_line_start(self) -> bool:
        """Whether the file is empty or ends with a newline (checked under the lock)."""
        size = os.fstat(self._fd).st_size
        if size == 0:
            return True
        if hasattr(os, "pread"):
            return os.pread(self._fd, 1, size - 1) == b"\n"
        with open(self.path, "rb") as fh:  # no pread (Windows)
            fh.seek(size - 1)
            return fh.read(1) == b"\n"

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_traces(path: str | os.PathLike[str]) -> Iterator[Trace]:
    """Yield the traces of a JSONL file in order.

    A line that is not a complete trace — the torn last line of a crashed writer — is skipped
    with a `TornTraceWarning`, never an exception.
    """
    with open(path, "rb") as fh:
        for number, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            try:
                yield Trace.model_validate_json(raw)
            except (ValidationError, ValueError) as exc:
                reason = "torn or invalid JSON" if not raw.endswith(b"\n") else f"invalid trace ({exc.__class__.__name__})"
                warnings.warn(f"{path}:{number}: skipped a line: {reason}", TornTraceWarning, stacklevel=2)

