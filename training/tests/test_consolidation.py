"""Consolidation data from a teacher behind a local OpenAI-compatible server."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from evoharness_bpe import Workspace
from evoharness_bpe.exceptions import UserError
from evoharness_bpe_training.consolidation import TeacherClient, TeacherError, consolidation_dataset


class _Teacher(BaseHTTPRequestHandler):
    requests: list[dict] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _Teacher.requests.append(body)
        if self.path != "/v1/chat/completions":
            self.send_error(404)
            return
        notes = [line for line in body["messages"][-1]["content"].splitlines() if line.startswith("- ")]
        reply = {"choices": [{"message": {"role": "assistant", "content": f"lesson: {len(notes)} notes condensed"}}]}
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def teacher_url():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Teacher)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def _trace_with_notes(n: int):
    ws = Workspace("Migrate records")
    for i in range(n):
        ws.act("note", {"text": f"Batch uploads above {i + 5} per second hit 429", "kind": "pitfall"})
    ws.finish(True)
    return ws.trace()


def test_pairs_become_an_sft_dataset(teacher_url, tmp_path, workspace_trace) -> None:
    traces = [_trace_with_notes(2), _trace_with_notes(1), workspace_trace]  # the last has no notes
    ds = consolidation_dataset(traces, TeacherClient(teacher_url, model="big"), out_dir=tmp_path, eval_fraction=0.5)
    rows = [*ds["train"], *ds["eval"]]
    assert len(rows) == 2 and len(ds["eval"]) == 1
    by_notes = sorted(r["completion"][0]["content"] for r in rows)
    assert by_notes == ["lesson: 1 notes condensed", "lesson: 2 notes condensed"]
    assert rows[0]["prompt"][0]["role"] == "system" and "Notes written" in rows[0]["prompt"][1]["content"]
    assert _Teacher.requests[-1]["model"] == "big"
    assert (tmp_path / "train.parquet").exists()


def test_command_and_failures(teacher_url, tmp_path, capsys) -> None:
    from evoharness_bpe import TraceWriter
    from evoharness_bpe.lab.cli import main

    path = tmp_path / "t.jsonl"
    with TraceWriter(path) as writer:
        writer.write(_trace_with_notes(3))
    assert main(["consolidate", str(path), "--teacher", teacher_url, "--out", str(tmp_path / "out")]) == 0
    assert "train: 1 rows" in capsys.readouterr().out
    with pytest.raises(TeacherError, match="404"):
        TeacherClient(teacher_url.removesuffix("/v1")).complete([{"role": "user", "content": "x"}])
    with pytest.raises(UserError, match="http"):
        TeacherClient("127.0.0.1:1")
    with pytest.raises(UserError, match="no trace wrote any note"):
        consolidation_dataset([], TeacherClient(teacher_url))
