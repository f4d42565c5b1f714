"""What the teacher is shown for a job, and asking it: a time limit, retries with backoff.

Both modes of the consolidator use these: the background worker (`ModelConsolidator`) and the
offline batch over traces (`consolidate_traces`).
"""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from importlib import resources
from typing import Any

from ..exceptions import ModelCallError
from ..stores.base import ExperienceEntry, ExperienceStore, Namespace
from .teachers import Teacher

__all__ = ["SYSTEM_PROMPT", "TeacherError", "Request", "build_request", "TeacherCaller", "is_unreachable"]

SYSTEM_PROMPT = resources.files("evoharness_bpe.prompts").joinpath("consolidate.txt").read_text("utf-8").strip()

Request = tuple[list[dict[str, str]], set[str], set[str]]
"""The messages for the teacher, the note ids, and every id shown (notes and related entries)."""


class TeacherError(ModelCallError):
    """The teacher did not answer (an error or a timeout on every attempt).

    `unreachable` is True when the last attempt could not connect at all, `stopped` when the
    caller was closed before an answer came (the request was not really refused).
    """

    def __init__(self, message: str, *, attempts: int, unreachable: bool = False, stopped: bool = False) -> None:
        super().__init__(message)
        self.attempts = attempts
        self.unreachable = unreachable
        self.stopped = stopped


def build_request(store: ExperienceStore, namespace: Namespace, note_ids: list[str] | tuple[str, ...], related: int) -> Request | None:
    """The request for these notes of `namespace`, with up to `related` entries per note; None if no note is left."""
    notes = [e for e in (store.get(namespace, i) for i in note_ids) if e is not None]
    if not notes:
        return None
    ids = {e.id for e in notes}
    shown: dict[str, ExperienceEntry] = {}
    for note in notes:
        for hit in store.search(namespace, note.text, k=related + 1) if related else ():
            if hit.entry.id not in ids and len(shown) < related * len(notes):
                shown.setdefault(hit.entry.id, hit.entry)
    payload = {"notes": [_view(e) for e in notes], "related": [_view(e) for e in shown.values()]}
    messages = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": json.dumps(payload, ensure_ascii=False, indent=1)},
    ]
    return messages, ids, ids | set(shown)


def _view(entry: ExperienceEntry) -> dict[str, Any]:
    return {"id": entry.id, "kind": entry.kind, "text": entry.text, "tags": entry.tags,
            "evidence": entry.evidence, "wins": entry.wins, "losses": entry.losses}


def is_unreachable(exc: BaseException) -> bool:
    """Whether `exc` (or what caused it) says the endpoint could not be reached at all."""
    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None:
            return False
        if isinstance(seen, ConnectionError) or any(t.__name__ in ("APIConnectionError", "ConnectError", "URLError")
                                                   for t in type(seen).__mro__):
            return not any(t.__name__ == "APITimeoutError" for t in type(seen).__mro__)
        seen = seen.__cause__ or seen.__context__
    return False


class TeacherCaller:
    """Calls a teacher within `timeout` seconds, retrying `retries` times with doubling backoff.

    A failed request (an exception: HTTP 500, a refused connection) is retried; a request still
    running after `timeout` is not (it holds the one call thread, so a retry would queue behind
    it). A teacher that never returns costs that thread only.
    `stop` (an event) cuts the backoff short when the owner shuts down.
    """

    def __init__(self, teacher: Teacher, *, timeout: float, retries: int = 0, backoff: float = 1.0,
                 max_backoff: float = 30.0, stop: threading.Event | None = None) -> None:
        self.teacher, self.timeout, self.retries = teacher, timeout, retries
        self.backoff, self.max_backoff = backoff, max_backoff
        self.stop = stop or threading.Event()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="evoharness-teacher")
        self.on_retry: Any = None
        """Called as ``on_retry(attempt, delay, error)`` before each retry (progress lines)."""

    def __call__(self, messages: list[dict[str, str]]) -> str:
        """The teacher's answer; `TeacherError` once every attempt failed."""
        attempts = self.retries + 1
        for attempt in range(1, attempts + 1):
            if self.stop.is_set():
                raise TeacherError("the consolidator was closed before the teacher answered", attempts=attempt - 1, stopped=True)
            try:
                return self._pool.submit(self.teacher, messages).result(timeout=self.timeout)
            except FutureTimeout:
                # The one call thread is still busy with this request: another would queue behind it.
                error: BaseException = TimeoutError(f"no answer within {self.timeout:g} s")
                break
            except Exception as exc:  # noqa: BLE001 - any failure of the request is retried
                error = exc
            if attempt == attempts or self.stop.is_set():
                break
            delay = min(self.max_backoff, self.backoff * 2 ** (attempt - 1))
            if self.on_retry is not None:
                self.on_retry(attempt, delay, error)
            if self.stop.wait(delay):
                raise TeacherError("the consolidator was closed before the teacher answered", attempts=attempt, stopped=True)
        raise TeacherError(f"{type(error).__name__}: {error}"[:500], attempts=attempt, unreachable=is_unreachable(error)) from error

    def close(self) -> None:
        """Stop waiting; a call still running keeps its thread until the teacher returns."""
        self.stop.set()
        self._pool.shutdown(wait=False, cancel_futures=True)
