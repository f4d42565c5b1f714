"""The offline batch mode of the consolidator: finished episodes (traces) → a teacher → a dataset.

    evoharness consolidate traces.jsonl --base-url http://127.0.0.1:8000/v1 --model teacher --out consolidation

For each trace that wrote notes, its notes go through the same rules as at `note` time into a
scratch store, the teacher gets the request the background `ModelConsolidator` makes, and its
decisions are validated the same way. Each finished pair is appended to
``OUT/consolidation.jsonl`` at once (one fsynced line, TRL's prompt–completion format, with the
episode id), so nothing finished is lost when a later request fails or the process is killed.
A failed request is retried with doubling backoff; when the retries run out the batch stops
with `ConsolidationFailed`, and ``resume=True`` (``--resume``) continues it: episodes already in
the dataset, or whose answer was refused (``OUT/rejected.jsonl``), are skipped, and a line torn
by a kill is cut off first. Offline, an episode's teacher sees its own notes only (the live
consolidator also shows related stored entries).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..exceptions import ModelCallError, UserError
from ..experience import consolidate_note
from ..stores.memory import MemoryExperienceStore
from ..trace import Trace, read_traces
from .decisions import DecisionError, canonical, parse_decisions, validate_decisions
from .request import TeacherCaller, TeacherError, build_request
from .teachers import as_teacher
from .worker import append_row

__all__ = ["consolidate_traces", "BatchResult", "ConsolidationFailed", "trace_notes", "DATASET_FILE", "REJECTED_FILE"]

DATASET_FILE = "consolidation.jsonl"
REJECTED_FILE = "rejected.jsonl"
_NS = ("episode",)


@dataclass
class BatchResult:
    """What a batch did: pairs written now, episodes skipped as done before, answers refused."""

    dataset: Path
    written: int = 0
    skipped: int = 0
    rejected: int = 0
    without_notes: int = 0

    @property
    def total(self) -> int:
        """Pairs the dataset holds now."""
        return _count_lines(self.dataset)


class ConsolidationFailed(ModelCallError):
    """The teacher failed on every attempt for one episode; the pairs finished so far are kept."""

    def __init__(self, message: str, *, result: BatchResult, episode_id: str, unreachable: bool) -> None:
        super().__init__(message)
        self.result, self.episode_id, self.unreachable = result, episode_id, unreachable


def trace_notes(trace: Trace) -> list[dict[str, Any]]:
    """The notes an episode wrote (the arguments of its accepted ``note`` calls)."""
    notes = []
    for event in trace.meta_actions:
        if event.name != "note" or not event.ok:
            continue
        try:
            args = json.loads(event.arguments)
        except ValueError:
            continue
        if isinstance(args, dict) and isinstance(args.get("text"), str) and args["text"].strip():
            notes.append(args)
    return notes


def consolidate_traces(
    traces: Iterable[Trace] | str | os.PathLike[str],
    teacher: Any,
    out: str | os.PathLike[str],
    *,
    resume: bool = False,
    overwrite: bool = False,
    retries: int = 3,
    backoff: float = 1.0,
    timeout: float = 120.0,
    on_retry: Callable[[str, int, float, BaseException], None] | None = None,
    on_done: Callable[[str, str], None] | None = None,
) -> BatchResult:
    """Ask `teacher` to consolidate each trace's notes; append each pair to ``out/consolidation.jsonl``.

    `teacher` is anything `as_teacher` takes (a callable, a LangChain chat model, a LlamaIndex
    LLM, an `OpenAITeacher`). `traces` are `Trace` objects, a JSONL file or a folder of them.
    An existing dataset needs `resume` (continue it) or `overwrite` (start again).
    `on_retry(episode_id, attempt, delay, error)` is told of each retry, `on_done(episode_id,
    outcome)` of each episode finished (``written``, or ``rejected: reason``).
    """
    if retries < 0 or backoff < 0 or timeout <= 0:
        raise UserError("retries must be at least 0, backoff not negative and timeout positive")
    if resume and overwrite:
        raise UserError("pass either resume (continue the dataset) or overwrite (replace it), not both")
    out_dir = Path(out)
    result = BatchResult(dataset=out_dir / DATASET_FILE)
    rejected_path = out_dir / REJECTED_FILE
    done = _prepare(result.dataset, rejected_path, resume=resume, overwrite=overwrite)
    caller = TeacherCaller(as_teacher(teacher), timeout=timeout, retries=retries, backoff=backoff)
    try:
        for trace in _traces(traces):
            if trace.episode_id in done:
                result.skipped += 1
                continue
            notes = trace_notes(trace)
            if not notes:
                result.without_notes += 1
                continue
            request = _request(notes)
            messages, note_ids, shown = request
            if on_retry is not None:
                caller.on_retry = lambda attempt, delay, error, ep=trace.episode_id: on_retry(ep, attempt, delay, error)
            try:
                raw = caller(messages)
            except TeacherError as exc:
                raise ConsolidationFailed(f"the teacher failed on episode {trace.episode_id} after {exc.attempts} "
                                          f"attempt(s): {exc}", result=result, episode_id=trace.episode_id,
                                          unreachable=exc.unreachable) from exc
            try:
                decided = canonical(validate_decisions(parse_decisions(raw), note_ids, shown))
            except DecisionError as exc:
                append_row(rejected_path, {"episode_id": trace.episode_id, "reason": str(exc)[:500], "answer": str(raw)[:2_000]})
                result.rejected += 1
                outcome = f"rejected: {str(exc)[:200]}"
            else:
                append_row(result.dataset, {"prompt": messages, "completion": [{"role": "assistant", "content": decided}],
                                            "episode_id": trace.episode_id})
                result.written += 1
                outcome = "written"
            done.add(trace.episode_id)
            if on_done is not None:
                on_done(trace.episode_id, outcome)
    finally:
        caller.close()
    return result


def _request(notes: list[dict[str, Any]]) -> tuple[list[dict[str, str]], set[str], set[str]]:
    store = MemoryExperienceStore()
    ids: list[str] = []
    for note in notes:
        tags = note.get("tags") if isinstance(note.get("tags"), list) else None
        kind = note.get("kind") if note.get("kind") in ("lesson", "procedure", "pitfall") else "lesson"
        outcome = consolidate_note(store, _NS, note["text"], tags=[str(t) for t in tags or []], kind=kind)
        if outcome.entry.id not in ids:
            ids.append(outcome.entry.id)
    request = build_request(store, _NS, ids, related=0)
    assert request is not None  # the notes were just stored
    return request


def _traces(traces: Iterable[Trace] | str | os.PathLike[str]) -> Iterator[Trace]:
    if not isinstance(traces, (str, os.PathLike)):
        yield from traces
        return
    path = Path(traces)
    if path.is_dir():
        files = sorted(path.rglob("*.jsonl"))
        if not files:
            raise UserError(f"{path} holds no *.jsonl trace files")
    elif path.is_file():
        files = [path]
    else:
        raise UserError(f"{path} is neither a trace file nor a folder of them")
    for file in files:
        yield from read_traces(file)


def _prepare(dataset: Path, rejected: Path, *, resume: bool, overwrite: bool) -> set[str]:
    """The episode ids already done; checks, repairs or clears the output files."""
    if overwrite:
        for path in (dataset, rejected):
            path.unlink(missing_ok=True)
        return set()
    if not resume:
        if dataset.exists() and dataset.stat().st_size:
            raise UserError(f"{dataset} exists: continue it with --resume (resume=True), or replace it with "
                            "--overwrite (overwrite=True)")
        rejected.unlink(missing_ok=True)
        return set()
    return _done_ids(dataset) | _done_ids(rejected)


def _done_ids(path: Path) -> set[str]:
    """Episode ids of `path`'s complete lines; a torn last line (a kill mid-write) is cut off."""
    if not path.exists():
        return set()
    data = path.read_bytes()
    keep = data.rfind(b"\n") + 1
    ids, lines = set(), data[:keep].splitlines()
    for number, line in enumerate(lines):
        try:
            ids.add(json.loads(line)["episode_id"])
        except (ValueError, KeyError, TypeError):
            if number < len(lines) - 1:
                raise UserError(f"{path} line {number + 1} is not a consolidation pair: pass --overwrite to start again") from None
            keep -= len(line) + 1  # a last line cut mid-JSON yet ending in a newline
    if keep < len(data):
        with open(path, "r+b") as f:
            f.truncate(keep)
            f.flush()
            os.fsync(f.fileno())
    return ids


def _count_lines(path: Path) -> int:
    if not path.exists():
        return 0
    with open(path, "rb") as f:
        return sum(1 for line in f if line.strip())
