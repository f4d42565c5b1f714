"""Asking the teacher: one stuck request does not fail the queue, a huge answer is refused while read."""

from __future__ import annotations

import json
import threading
import time
import tracemalloc
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from evoharness_bpe import MemoryExperienceStore, ModelConsolidator, Workspace
from evoharness_bpe.consolidator import AnswerTooLarge, OpenAITeacher, TeacherCaller, TeacherError

NS = ("acme", "agent")
TOPICS = ["phone formats", "rate limits", "weekend maintenance", "duplicate emails", "currency rounding", "time zones"]


def _keep(messages: list[dict[str, str]]) -> str:
    notes = json.loads(messages[-1]["content"])["notes"]
    return json.dumps({"decisions": [{"op": "keep", "id": n["id"]} for n in notes]})


def test_a_teacher_that_hangs_once_fails_one_job_not_the_queue() -> None:
    """The first request hangs for 12 s, the timeout is 2 s: 1 of 6 jobs falls back, none waits behind it."""
    store, release, lock = MemoryExperienceStore(), threading.Event(), threading.Lock()
    calls: list[str] = []

    def hangs_once(messages: list[dict[str, str]]) -> str:
        with lock:
            calls.append(json.loads(messages[-1]["content"])["notes"][0]["text"])
            first = len(calls) == 1
        if first:
            release.wait(12)
        return _keep(messages)

    consolidator = ModelConsolidator(hangs_once, store, timeout=2.0, retries=2, backoff=0.01)
    try:
        started = time.monotonic()
        for topic in TOPICS:
            ws = Workspace("Task", store=store, namespace=NS, consolidator=consolidator)
            ws.act("note", {"text": f"Check {topic} before a bulk upload"})
            ws.finish(success=True)
        assert consolidator.flush(timeout=30)
        elapsed = time.monotonic() - started
        counts = consolidator.journal.counts()
        assert counts.get("fallback", 0) <= 1 and counts.get("done", 0) >= 5, counts
        assert elapsed < 8, elapsed                      # the five others did not wait for the stuck one
        assert len(calls) == 6                           # each job asked once: the timed-out one is not re-sent
    finally:
        release.set()
        consolidator.close()


def test_requests_in_flight_are_bounded_when_the_teacher_always_hangs() -> None:
    release = threading.Event()
    sent: list[int] = []

    def never(messages: list[dict[str, str]]) -> str:
        sent.append(1)
        release.wait(30)
        return "{}"

    caller = TeacherCaller(never, timeout=0.3, max_in_flight=2)
    try:
        for _ in range(4):
            with pytest.raises(TeacherError, match="TimeoutError"):
                caller([{"role": "user", "content": "x"}])
        assert len(sent) == 2 and caller.in_flight() == 2   # the last two were refused unsent
    finally:
        release.set()
        caller.close()


class _Huge(BaseHTTPRequestHandler):
    size = 40_000_000
    declare_length = True

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        self.rfile.read(int(self.headers["Content-Length"]))
        head = b'{"id": "c", "object": "chat.completion", "created": 0, "model": "m", "choices": [{"index": 0, ' \
               b'"finish_reason": "stop", "message": {"role": "assistant", "content": "'
        tail = b'"}}]}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        if self.declare_length:
            self.send_header("Content-Length", str(len(head) + self.size + len(tail)))
        self.end_headers()
        try:
            self.wfile.write(head)
            chunk = b"x" * 1_000_000
            for _ in range(self.size // len(chunk)):
                self.wfile.write(chunk)
            self.wfile.write(tail)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client stopped reading: what the cap is for
        self.close_connection = True

    def log_message(self, *args: Any) -> None:
        pass


@pytest.mark.parametrize("declare_length", [True, False], ids=["content-length", "chunked"])
def test_a_40_mb_teacher_answer_is_refused_while_it_is_read(declare_length: bool) -> None:
    handler = type("Huge", (_Huge,), {"declare_length": declare_length})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        teacher = OpenAITeacher("m", f"http://127.0.0.1:{httpd.server_address[1]}/v1", api_key="k", retries=0, timeout=30)
        caller = TeacherCaller(teacher, timeout=30, retries=2, backoff=0.01)
        with pytest.raises(TeacherError, match="AnswerTooLarge"):  # once unmeasured: the SDK's lazy imports
            caller([{"role": "user", "content": "consolidate"}])
        tracemalloc.start()
        try:
            with pytest.raises(TeacherError, match="AnswerTooLarge") as refused:
                caller([{"role": "user", "content": "consolidate"}])
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert refused.value.attempts == 1               # refused, not asked again
        assert peak < 8_000_000, peak                    # before: the whole body and its parse, +516 MB
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_a_callable_teachers_huge_answer_is_refused_before_parsing() -> None:
    caller = TeacherCaller(lambda messages: "x" * 3_000_000, timeout=5, retries=3)
    with pytest.raises(TeacherError, match="AnswerTooLarge") as refused:
        caller([{"role": "user", "content": "x"}])
    assert refused.value.attempts == 1
    with pytest.raises(AnswerTooLarge):
        raise AnswerTooLarge("type is exported")
