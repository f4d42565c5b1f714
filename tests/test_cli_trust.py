"""The real `evoharness` command line: ordinary mistakes give one line and no traceback; an
interrupted run keeps its results and resumes to the figures of an uninterrupted one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

CLI = [sys.executable, "-m", "evoharness_bpe.lab.cli"]


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], cwd=cwd, capture_output=True, text=True, timeout=300, env=dict(os.environ))


def _one_line_error(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert result.returncode != 0, result.stdout
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert "Traceback" not in result.stderr, result.stderr
    assert lines and all(n in lines[-1] for n in needles), result.stderr
    assert len([line for line in lines if "error" in line]) == 1, result.stderr


def test_ordinary_mistakes_are_one_line_naming_the_flag(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    (tmp_path / "empty-model").mkdir()
    bad_model = tmp_path / "bad-model"
    bad_model.mkdir()
    (bad_model / "config.json").write_text("{not json")
    quick = ["run", "--env", "crm-migration", "--policy", "expert", "--harness", "bpe"]
    _one_line_error(_cli(*quick, "--out", "afile", cwd=tmp_path), "--out", "is a file")
    _one_line_error(_cli(*quick, "--out", "afile/below", cwd=tmp_path), "--out", "cannot be created")
    _one_line_error(_cli(*quick, "--out", "/proc/evoharness-run", cwd=tmp_path), "--out")
    _one_line_error(_cli("run", "--epsilon", "2", cwd=tmp_path), "--epsilon")
    _one_line_error(_cli("run", "--policy", "local", "--model", "empty-model", cwd=tmp_path), "--model", "holds no model")
    _one_line_error(_cli("run", "--policy", "local", "--model", "bad-model", "--env", "crm-migration", "--out", "m", cwd=tmp_path),
                    "--model", "could not be loaded")
    _one_line_error(_cli("run", "--env", "no-such-env", cwd=tmp_path), "--env")
    _one_line_error(_cli("run", "--game", "nothing.z8", "--env", "textworld", cwd=tmp_path), "--game")
    _one_line_error(_cli("report", "nowhere", cwd=tmp_path), "nowhere")
    _one_line_error(_cli("view", "nowhere.jsonl", cwd=tmp_path), "nowhere.jsonl")
    assert _cli("--version", cwd=tmp_path).stdout.startswith("evoharness ")
    assert "(default: http://127.0.0.1:8000/v1)" in " ".join(_cli("run", "--help", cwd=tmp_path).stdout.split())


def test_a_second_run_into_the_same_folder_is_refused_unless_resume_or_overwrite(tmp_path: Path) -> None:
    args = ["run", "--env", "crm-migration", "--policy", "expert", "--harness", "bpe", "--out", "r"]
    assert _cli(*args, cwd=tmp_path).returncode == 0
    before = (tmp_path / "r" / "traces.jsonl").read_text()
    _one_line_error(_cli(*args, cwd=tmp_path), "--resume", "--overwrite")
    assert (tmp_path / "r" / "traces.jsonl").read_text() == before          # nothing destroyed
    assert _cli(*args, "--resume", cwd=tmp_path).returncode == 0           # nothing left to run
    assert (tmp_path / "r" / "traces.jsonl").read_text() == before
    assert _cli(*args, "--overwrite", cwd=tmp_path).returncode == 0
    assert (tmp_path / "r" / "traces.jsonl").read_text() != before         # a new episode id


def test_report_rebuilds_a_corrupt_metrics_file_from_the_traces(tmp_path: Path) -> None:
    assert _cli("run", "--env", "crm-migration", "--policy", "expert", "--harness", "none", "bpe", "--out", "r", cwd=tmp_path).returncode == 0
    good = json.loads((tmp_path / "r" / "metrics.json").read_text())["summary"]
    (tmp_path / "r" / "metrics.json").write_text("{corrupt")
    result = _cli("report", "r", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    rebuilt = json.loads((tmp_path / "r" / "metrics.json").read_text())["summary"]
    assert _figures(rebuilt) == _figures(good)


def _figures(summary: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in row.items() if k != "mean_wall_time_s"} for row in summary]


def _episodes(folder: Path) -> list[dict[str, Any]]:
    rows = json.loads((folder / "metrics.json").read_text())["episodes"]
    return [{k: v for k, v in r.items() if k not in ("episode_id", "wall_time_s")} for r in rows]


RUN = ["run", "--env", "compliance-review", "--policy", "noisy", "--harness", "bpe", "--difficulty", "3", "--episodes", "4"]


@pytest.mark.slow
@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_an_interrupted_run_keeps_results_and_resumes_to_the_same_figures(tmp_path: Path, signum: int, code: int) -> None:
    assert _cli(*RUN, "--out", "whole", cwd=tmp_path).returncode == 0
    proc = subprocess.Popen([*CLI, *RUN, "--out", "cut"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=dict(os.environ))
    traces = tmp_path / "cut" / "traces.jsonl"
    deadline = time.monotonic() + 120
    while not (traces.exists() and traces.read_text().count("\n") >= 1):
        assert proc.poll() is None and time.monotonic() < deadline, "the run ended before it could be interrupted"
        time.sleep(0.02)
    proc.send_signal(signum)
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err
    last = err.strip().splitlines()[-1]
    assert "Traceback" not in err and last.startswith("evoharness: interrupted after ") and "--resume" in last, err
    metrics = json.loads((tmp_path / "cut" / "metrics.json").read_text())
    assert 1 <= metrics["finished"] < metrics["planned"] == 4
    assert (tmp_path / "cut" / "report.md").exists()
    resumed = _cli(*RUN, "--out", "cut", "--resume", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert _episodes(tmp_path / "cut") == _episodes(tmp_path / "whole")
