"""What the teacher is shown for a job, and asking it: a time limit, retries with backoff.

Both modes of the consolidator use these: the background worker (`ModelConsolidator`) and the
offline batch over traces (`consolidate_traces`).
"""

from __future__ import annotations

import json
import threading
import time
from importlib import resources
from typing import Any

from ..exceptions import ModelCallError, UserError
from ..stores.base import ExperienceEntry, ExperienceStore, Namespace
from .teachers import MAX_ANSWER_CHARS, AnswerTooLarge, Teacher

__all__ = ["SYSTEM_PROMPT", "TeacherError", "AnswerTooLarge", "MAX_ANSWER_CHARS", "Request", "build_request", "TeacherCaller",
           "is_unreachable"]

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


class _Unanswered(TimeoutError):
    """No answer within the timeout (the teacher's own errors are never this)."""


class _Call:
    """One request to the teacher on its own daemon thread; its answer or its exception."""

    def __init__(self, teacher: Teacher, messages: list[dict[str, str]], done: Any) -> None:
        self.finished = threading.Event()
        self.answer: str | None = None
        self.error: BaseException | None = None
        self._teacher, self._messages, self._done = teacher, messages, done
        threading.Thread(target=self._run, name="evoharness-teacher", daemon=True).start()

    def _run(self) -> None:
        try:
            self.answer = self._teacher(self._messages)
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting caller
            self.error = exc
        finally:
            self.finished.set()
            self._done()


class TeacherCaller:
    """Calls a teacher within `timeout` seconds, retrying `retries` times with doubling backoff.

    Each request runs on its own daemon thread, and its `timeout` starts when it is sent: a
    request still running after `timeout` is abandoned (its answer, if one comes, is dropped)
    and the next request does not wait behind it. At most `max_in_flight` requests run at once,
    abandoned ones included; a request that finds them all busy waits up to `timeout` for one to
    end and is otherwise refused unsent (``TimeoutError``), so a teacher that hangs on every
    request costs that many threads, never more. A failed request (an exception: HTTP 500, a
    refused connection) is retried; a timed-out one is not, so a slow teacher is not asked
    again while it is still working on the same notes. An answer longer than `max_answer_chars`
    is refused (`AnswerTooLarge`, not retried). `stop` (an event) cuts waits short when the
    owner shuts down.
    """

    def __init__(self, teacher: Teacher, *, timeout: float, retries: int = 0, backoff: float = 1.0,
                 max_backoff: float = 30.0, stop: threading.Event | None = None, max_in_flight: int = 4,
                 max_answer_chars: int = MAX_ANSWER_CHARS) -> None:
        if max_in_flight < 1 or max_answer_chars < 1:
            raise UserError("max_in_flight and max_answer_chars must be at least 1")
        self.teacher, self.timeout, self.retries = teacher, timeout, retries
        self.backoff, self.max_backoff = backoff, max_backoff
        self.max_in_flight, self.max_answer_chars = max_in_flight, max_answer_chars
        self.stop = stop or threading.Event()
        self._slots = threading.BoundedSemaphore(max_in_flight)
        self._count_lock = threading.Lock()
        self._running = 0
        self.on_retry: Any = None
        """Called as ``on_retry(attempt, delay, error)`` before each retry (progress lines)."""

    def in_flight(self) -> int:
        """Requests running now, abandoned ones included."""
        with self._count_lock:
            return self._running

    def _ended(self) -> None:
        with self._count_lock:
            self._running -= 1
        self._slots.release()

    def _send(self, messages: list[dict[str, str]], attempt: int) -> str:
        """One request; `_Unanswered` when no answer came within `timeout` of sending it."""
        if not self._wait(self._slots.acquire, attempt):
            raise _Unanswered(f"{self.max_in_flight} earlier requests are still unanswered after "
                               f"{self.timeout:g} s; this one was not sent")
        with self._count_lock:
            self._running += 1
        try:
            call = _Call(self.teacher, messages, self._ended)
        except BaseException:
            self._ended()
            raise
        if not self._wait(call.finished.wait, attempt):
            raise _Unanswered(f"no answer within {self.timeout:g} s")
        if call.error is not None:
            raise call.error
        answer = call.answer
        if isinstance(answer, str) and len(answer) > self.max_answer_chars:
            raise AnswerTooLarge(f"the answer has {len(answer):,} characters, more than the cap of {self.max_answer_chars:,}")
        return answer  # type: ignore[return-value]

    def _wait(self, wait: Any, attempt: int) -> bool:
        """`wait(seconds)` until it returns True or `timeout` passes, in slices that notice `stop`."""
        deadline = time.monotonic() + self.timeout
        while True:
            left = deadline - time.monotonic()
            if wait(timeout=max(0.0, min(left, 0.1))):
                return True
            if self.stop.is_set():
                raise TeacherError("the consolidator was closed before the teacher answered", attempts=attempt, stopped=True)
            if left <= 0:
                return False

    def __call__(self, messages: list[dict[str, str]]) -> str:
        """The teacher's answer; `TeacherError` once every attempt failed."""
        attempts = self.retries + 1
        for attempt in range(1, attempts + 1):
            if self.stop.is_set():
                raise TeacherError("the consolidator was closed before the teacher answered", attempts=attempt - 1, stopped=True)
            try:
                return self._send(messages, attempt)
            except TeacherError:  # closed meanwhile
                raise
            except (_Unanswered, AnswerTooLarge) as exc:  # asking again would not help
                error: BaseException = exc
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
        kind = "TimeoutError" if isinstance(error, _Unanswered) else type(error).__name__
        raise TeacherError(f"{kind}: {error}"[:500], attempts=attempt, unreachable=is_unreachable(error)) from error

    def close(self) -> None:
        """Stop waiting; a request still running keeps its (daemon) thread until the teacher returns."""
        self.stop.set()
