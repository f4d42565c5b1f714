"""Traces: JSONL round trip, torn lines, concurrent writers."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings

import pytest

from evoharness_bpe import Outcome, Trace, TraceWriter, Workspace, read_traces
from evoharness_bpe.trace import TornTraceWarning


def make_trace(i: int) -> Trace:
    ws = Workspace(f"episode {i}")
    ws.act("track", {"key": "i", "value": str(i)})
    ws.dashboard()
    return ws.trace(
        messages=[
            {"role": "user", "content": f"task {i}"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "track", "arguments": '{"key":"i","value":"1"}'}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "tracked"},
        ],
        outcome=Outcome(success=i % 2 == 0, score=0.5),
    )


def test_roundtrip(tmp_path) -> None:
    path = tmp_path / "traces.jsonl"
    traces = [make_trace(i) for i in range(3)]
    with TraceWriter(path) as writer:
        for t in traces:
            writer.write(t)
    assert list(read_traces(path)) == traces
    assert path.read_text().count("\n") == 3


def test_torn_last_line_is_skipped_with_warning(tmp_path) -> None:
    path = tmp_path / "traces.jsonl"
    with TraceWriter(path) as writer:
        writer.write(make_trace(0))
        writer.write(make_trace(1))
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 40])  # a crash in the middle of the last line
    with pytest.warns(TornTraceWarning):
        got = list(read_traces(path))
    assert [t.task for t in got] == ["episode 0"]


def test_garbage_lines_never_raise(tmp_path) -> None:
    path = tmp_path / "traces.jsonl"
    path.write_bytes(b'{"schema_version": 99}\n\xff\xfe\n\n' + make_trace(5).model_dump_json().encode() + b"\n")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = list(read_traces(path))
    assert [t.task for t in got] == ["episode 5"] and len(caught) == 2


def test_closed_writer_refuses(tmp_path) -> None:
    writer = TraceWriter(tmp_path / "t.jsonl")
    writer.close()
    with pytest.raises(ValueError):
        writer.write(make_trace(0))


def _write_many(path: str, offset: int) -> None:
    with TraceWriter(path) as writer:
        for i in range(20):
            writer.write(make_trace(offset + i))


def test_processes_writing_one_file_do_not_interleave(tmp_path) -> None:
    path = str(tmp_path / "shared.jsonl")
    procs = [mp.get_context("spawn").Process(target=_write_many, args=(path, n * 100)) for n in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
        assert p.exitcode == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tasks = sorted(t.task for t in read_traces(path))
    assert tasks == sorted(f"episode {n * 100 + i}" for n in range(3) for i in range(20))


CHILD = textwrap.dedent(
    """
    import os, sys, time
    from evoharness_bpe import Trace, TraceWriter

    real_write = os.write

    def slow_write(fd, data):  # a slow device: os.write may write less than asked
        written = real_write(fd, bytes(data[:65536]))
        time.sleep(0.002)
        return written

    with TraceWriter(sys.argv[1]) as writer:
        for i in range(3):
            writer.write(Trace(task=f"child-{i}"))
            print(f"written child-{i}", flush=True)
        os.write = slow_write
        print("huge", flush=True)
        writer.write(Trace(task="huge", metadata={"blob": "z" * 32_000_000}))
        print("written huge", flush=True)
    """
)


def test_kill_9_mid_write_then_a_new_writer_loses_nothing(tmp_path) -> None:
    path = tmp_path / "traces.jsonl"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(path)], stdout=subprocess.PIPE, text=True, env=env)
    reported = []
    try:
        for line in child.stdout:
            if line.startswith("written "):
                reported.append(line.split()[1])
            if line.strip() == "huge":
                break
        start = path.stat().st_size
        deadline = time.monotonic() + 60
        while path.stat().st_size < start + 1_000_000:  # well into the huge line
            assert time.monotonic() < deadline and child.poll() is None
            time.sleep(0.005)
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.wait()
    assert child.returncode == -signal.SIGKILL
    assert reported == ["child-0", "child-1", "child-2"]
    assert not path.read_bytes().endswith(b"\n")  # the kill left a torn line

    with TraceWriter(path) as writer:
        for i in range(3):
            writer.write(Trace(task=f"after-{i}"))
            reported.append(f"after-{i}")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tasks = [t.task for t in read_traces(path)]
    assert tasks == reported
    assert len([w for w in caught if issubclass(w.category, TornTraceWarning)]) == 1


def test_core_imports_and_writes_without_fcntl(tmp_path) -> None:
    code = textwrap.dedent(
        """
        import sys
        sys.modules["fcntl"] = None  # as on Windows
        from evoharness_bpe import Trace, TraceWriter, read_traces
        with TraceWriter(sys.argv[1]) as writer:
            writer.write(Trace(task="a"))
            writer.write(Trace(task="b"))
        print(",".join(t.task for t in read_traces(sys.argv[1])))
        """
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "t.jsonl")], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "a,b"
