"""Log-friendly output of the training commands: no blank lines, no third-party bars unless --verbose."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from evoharness_bpe import TraceWriter


def _cli(*args: str) -> subprocess.CompletedProcess:
    # as a user's shell would start it: without the quieting an in-process CLI test may have left in os.environ
    env = {k: v for k, v in os.environ.items() if k not in ("HF_DATASETS_DISABLE_PROGRESS_BARS", "TRANSFORMERS_VERBOSITY",
                                                             "TRANSFORMERS_NO_ADVISORY_WARNINGS", "TQDM_DISABLE")}
    return subprocess.run([sys.executable, "-m", "evoharness_bpe_training.cli", *args], capture_output=True, text=True,
                          timeout=300, env=env)


def test_export_prints_plain_lines_and_datasets_bars_only_with_verbose(tmp_path: Path, sft_traces) -> None:
    traces = tmp_path / "traces.jsonl"
    with TraceWriter(traces) as writer:
        for trace in sft_traces:
            writer.write(trace)
    quiet = _cli("export", str(traces), "--out", str(tmp_path / "quiet"))
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stderr == ""                                  # no "Creating parquet" bars, no warnings
    lines = quiet.stdout.splitlines()
    assert lines and all(line.strip() for line in lines), quiet.stdout   # no blank line left by a progress bar
    assert lines[0].startswith("train: ") and lines[-1].startswith("wrote ")
    assert "\r" not in quiet.stdout and "\x1b[" not in quiet.stdout
    loud = _cli("--verbose", "export", str(traces), "--out", str(tmp_path / "loud"))
    assert loud.returncode == 0 and "Creating parquet" in loud.stderr, loud.stderr


def test_export_help_shows_the_defaults() -> None:
    text = " ".join(_cli("export", "--help").stdout.split())
    assert "(default: parquet)" in text and "(default: 0.1)" in text
