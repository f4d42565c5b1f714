"""`evoharness consolidate`: the consolidator's offline batch, against a loopback OpenAI-compatible teacher.

Incremental (each pair appended as it finishes), retried with backoff, resumable after a failure
or a kill -9: no pair lost, none duplicated. The command's teacher is `OpenAITeacher` (the
``openai`` SDK, installed with the dev requirements).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from evoharness_bpe import TraceWriter, Workspace
from evoharness_bpe.consolidator import ConsolidationFailed, consolidate_traces
from evoharness_bpe.exceptions import UserError
from evoharness_bpe.lab.cli import main

TOPICS = ["phone formats", "rate limits", "weekend maintenance", "duplicate emails", "currency rounding", "time zones"]


class Teacher:
    """A loopback OpenAI-compatible server whose answers keep every note; scripted failures."""

    def __init__(self) -> None:
        self.requests = 0
        self.fail_on: set[int] = set()      # request numbers answered with HTTP 500
        self.hang_after: int | None = None  # requests after this many hang (a kill happens meanwhile)
        self.lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with owner.lock:
                    owner.requests += 1
                    number = owner.requests
                if number in owner.fail_on:
                    self._send(500, {"error": {"message": "teacher overloaded"}}, {"retry-after-ms": "10"})
                    return
                if owner.hang_after is not None and number > owner.hang_after:
                    time.sleep(30)
                notes = json.loads(body["messages"][-1]["content"])["notes"]
                content = json.dumps({"decisions": [{"op": "keep", "id": n["id"]} for n in notes]})
                self._send(200, {"id": f"c{number}", "object": "chat.completion", "created": 0, "model": body["model"],
                                 "choices": [{"index": 0, "finish_reason": "stop",
                                              "message": {"role": "assistant", "content": content}}]})

            def _send(self, code: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
                data = json.dumps(payload).encode()
                self.send_response(code)
                for key, value in {"Content-Type": "application/json", **(headers or {})}.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def teacher():
    server = Teacher()
    yield server
    server.close()


@pytest.fixture
def traces(tmp_path: Path) -> Path:
    path = tmp_path / "traces.jsonl"
    with TraceWriter(path) as writer:
        for i, topic in enumerate(TOPICS):
            ws = Workspace(f"Migrate batch {i}")
            ws.act("note", {"text": f"Check {topic} before the upload", "kind": "pitfall", "tags": ["crm"]})
            ws.finish(True)
            writer.write(ws.trace())
        writer.write(Workspace("An episode without notes").trace())
    return path


def _pairs(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "consolidation.jsonl").read_text().splitlines()]


def _episodes(traces: Path) -> list[str]:
    return [json.loads(line)["episode_id"] for line in traces.read_text().splitlines()][: len(TOPICS)]


def test_a_500_on_request_4_loses_no_pair(teacher: Teacher, traces: Path, tmp_path: Path, capsys) -> None:
    teacher.fail_on = {4}
    out = tmp_path / "out"
    assert main(["consolidate", str(traces), "--base-url", teacher.url, "--model", "big", "--out", str(out),
                 "--backoff", "0.01"]) == 0
    pairs = _pairs(out)
    assert [p["episode_id"] for p in pairs] == _episodes(traces)       # in order, each once
    assert teacher.requests == len(TOPICS) + 1                          # the failed request was asked again
    row = pairs[0]
    assert row["prompt"][0]["role"] == "system" and json.loads(row["completion"][0]["content"])["decisions"][0]["op"] == "keep"
    captured = capsys.readouterr()
    assert f"{len(TOPICS)} new pair(s)" in captured.out and captured.err.count(": written") == len(TOPICS)


def test_retries_run_out_then_resume_finishes_without_duplicates(teacher: Teacher, traces: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    teacher.fail_on = set(range(4, 40))  # from request 4 on, every attempt fails
    code = main(["consolidate", str(traces), "--base-url", teacher.url, "--out", str(out), "--retries", "1", "--backoff", "0.01"])
    err = capsys.readouterr().err
    assert code == 1 and "3 finished pair(s) kept" in err and "--resume" in err and "retry 1 of 1" in err
    assert len(_pairs(out)) == 3
    # without --resume an existing dataset is not touched
    assert main(["consolidate", str(traces), "--base-url", teacher.url, "--out", str(out)]) == 1
    assert "--resume" in capsys.readouterr().err and len(_pairs(out)) == 3
    teacher.fail_on = set()
    assert main(["consolidate", str(traces), "--base-url", teacher.url, "--out", str(out), "--resume"]) == 0
    assert [p["episode_id"] for p in _pairs(out)] == _episodes(traces)
    assert "3 done before" in capsys.readouterr().out


def test_killed_mid_way_then_resumed(teacher: Teacher, traces: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    teacher.hang_after = 2
    proc = subprocess.Popen([sys.executable, "-m", "evoharness_bpe.lab.cli", "consolidate", str(traces),
                             "--base-url", teacher.url, "--out", str(out)], env=dict(os.environ),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while teacher.requests < 3 and time.monotonic() < deadline:  # two pairs written, the third request hangs
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert len(_pairs(out)) == 2
    with open(out / "consolidation.jsonl", "a") as f:  # as if the kill had torn a line mid-write
        f.write('{"prompt": [{"role": "sys')
    teacher.hang_after = None
    assert main(["consolidate", str(traces), "--base-url", teacher.url, "--out", str(out), "--resume"]) == 0
    assert [p["episode_id"] for p in _pairs(out)] == _episodes(traces)


def test_an_unreachable_teacher_says_what_to_do(traces: Path, tmp_path: Path, capsys) -> None:
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code = main(["consolidate", str(traces), "--base-url", f"http://127.0.0.1:{port}/v1", "--out", str(tmp_path / "o"),
                 "--retries", "0", "--timeout", "5"])
    err = capsys.readouterr().err
    assert code == 1
    assert f"is the teacher running at http://127.0.0.1:{port}/v1? Start it, or pass the --base-url" in err
    assert main(["consolidate", str(traces), "--base-url", "127.0.0.1:8000", "--out", str(tmp_path / "o")]) == 1
    assert "must start with http://" in capsys.readouterr().err


def test_batch_with_a_callable_teacher(traces: Path, tmp_path: Path) -> None:
    calls: list[int] = []

    def flaky(messages: list[dict[str, str]]) -> str:
        calls.append(1)
        if len(calls) == 2:
            raise ConnectionResetError("teacher went away")
        notes = json.loads(messages[-1]["content"])["notes"]
        if "currency" in notes[0]["text"]:
            return "I would rather not."                     # refused: recorded, not retried, not in the dataset
        if "time zones" in notes[0]["text"]:
            return json.dumps({"decisions": [{"op": "delete", "id": "0123456789abcdef"}]})   # an invented id
        return json.dumps({"decisions": [{"op": "add", "text": "Distilled: " + notes[0]["text"]}]})

    result = consolidate_traces(traces, flaky, tmp_path / "o", backoff=0)
    assert (result.written, result.rejected, result.without_notes, result.total) == (4, 2, 1, 4)
    rejected = [json.loads(line) for line in (tmp_path / "o" / "rejected.jsonl").read_text().splitlines()]
    assert [r["reason"][:12] for r in rejected] == ["the answer h", "unknown id '"]
    again = consolidate_traces(traces, pytest.fail, tmp_path / "o", resume=True)   # nothing left to ask
    assert (again.written, again.skipped) == (0, 6)
    with pytest.raises(UserError, match="--resume"):
        consolidate_traces(traces, flaky, tmp_path / "o")

    def down(messages: list[dict[str, str]]) -> str:
        raise ConnectionRefusedError(111, "Connection refused")

    with pytest.raises(ConsolidationFailed) as info:
        consolidate_traces(traces, down, tmp_path / "p", retries=2, backoff=0)
    assert info.value.unreachable and info.value.result.written == 0 and "after 3 attempt(s)" in str(info.value)
