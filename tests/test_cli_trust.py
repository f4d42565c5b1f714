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
    _one_line_error(_cli("demo", "--out", "afile", cwd=tmp_path), "--out afile", "is a file")
    _one_line_error(_cli("report", "nowhere", cwd=tmp_path), "nowhere")
    _one_line_error(_cli("view", "nowhere.jsonl", cwd=tmp_path), "nowhere.jsonl")
    assert _cli("--version", cwd=tmp_path).stdout.startswith("evoharness ")
    assert "(default: http://127.0.0.1:8000/v1)" in " ".join(_cli("run", "--help", cwd=tmp_path).stdout.split())
    for command, default in (("consolidate", "(default: http://127.0.0.1:8000/v1)"), ("view", "(default: 0)"),
                             ("demo", "(default: evoharness-demo)")):
        assert default in " ".join(_cli(command, "--help", cwd=tmp_path).stdout.split()), command


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


def _only_line(result: subprocess.CompletedProcess[str], *needles: str) -> str:
    """The whole of stderr is one line (no usage dump, no traceback) holding every needle."""
    assert result.returncode != 0, result.stdout
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert all(n in lines[0] for n in needles), lines[0]
    return lines[0]


def _refusing_port() -> int:
    import socket

    with socket.socket() as s:  # a port nothing listens on once this closes
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_bad_flag_values_are_one_line_without_the_usage(tmp_path: Path) -> None:
    quick = ["run", "--env", "crm-migration", "--policy", "expert", "--harness", "bpe"]
    _only_line(_cli("run", "--epsilon", "2", cwd=tmp_path), "--epsilon", "[0, 1)", "evoharness run --help")
    _only_line(_cli("run", "--epsilon", "1", cwd=tmp_path), "--epsilon", "[0, 1)")  # 1: the noisy expert never finishes
    _only_line(_cli(*quick, "--window", "0", "--out", "w", cwd=tmp_path), "--window", "at least 2")
    _only_line(_cli(*quick, "--max-steps", "0", "--out", "w", cwd=tmp_path), "--max-steps", "at least 1")
    _only_line(_cli(*quick, "--max-steps", "-3", "--out", "w", cwd=tmp_path), "--max-steps")
    _only_line(_cli("consolidate", "x.jsonl", "--retries", "-1", cwd=tmp_path), "--retries", "at least 0")
    _only_line(_cli("consolidate", "x.jsonl", "--timeout", "0", cwd=tmp_path), "--timeout")
    _only_line(_cli("run", "--no-such-flag", cwd=tmp_path), "--no-such-flag")
    assert not (tmp_path / "w").exists()                     # refused before anything is written


def test_an_unusable_store_or_endpoint_is_one_line_naming_the_flag(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    (tmp_path / "a-folder").mkdir()
    quick = ["run", "--env", "crm-migration", "--policy", "expert", "--harness", "bpe"]
    _only_line(_cli(*quick, "--out", "s1", "--store", "afile/x.db", cwd=tmp_path), "--store afile/x.db", "cannot be opened")
    _only_line(_cli(*quick, "--out", "s2", "--store", "a-folder", cwd=tmp_path), "--store a-folder", "cannot be opened")
    openai = ["run", "--env", "crm-migration", "--policy", "openai", "--model", "m", "--harness", "bpe"]
    _only_line(_cli(*openai, "--out", "o1", "--base-url", "localhost:9", cwd=tmp_path), "--base-url", "http://")
    url = f"http://127.0.0.1:{_refusing_port()}/v1"
    line = _only_line(_cli(*openai, "--out", "o2", "--base-url", url, cwd=tmp_path), url, "Start it", "--base-url", "--resume")
    assert "Traceback" not in line
    _only_line(_cli("consolidate", "nothing.jsonl", cwd=tmp_path), "nothing.jsonl", "does not exist")
    (tmp_path / "t.jsonl").write_text("")
    _only_line(_cli("consolidate", "t.jsonl", "--out", "afile", cwd=tmp_path), "--out afile", "is a file")
    _only_line(_cli("consolidate", "t.jsonl", "--out", "afile/below", cwd=tmp_path), "--out afile/below", "cannot be created")


def test_a_dsn_password_is_never_echoed_or_saved(tmp_path: Path) -> None:
    from evoharness_bpe.lab.runner.suite import hide_password

    assert hide_password("postgresql://ann:s3cret@db:5432/x") == "postgresql://ann:***@db:5432/x"
    assert hide_password("host=db dbname=x password=s3cret user=ann") == "host=db dbname=x password=*** user=ann"
    assert hide_password("postgresql://db/x") == "postgresql://db/x"
    result = _cli("run", "--env", "crm-migration", "--policy", "expert", "--harness", "bpe", "--out", "r",
                  "--store", "postgresql://ann:s3cret@127.0.0.1:1/x?connect_timeout=1", cwd=tmp_path)
    assert result.returncode == 1 and "s3cret" not in result.stderr and "--store" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_output_for_logs_is_plain_lines_and_warnings_carry_no_source_line(tmp_path: Path) -> None:
    result = _cli("run", "--env", "crm-migration", "--policy", "expert", "noisy", "--harness", "none", "bpe", "--out", "r",
                  cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "\r" not in result.stdout + result.stderr and "\x1b[" not in result.stdout + result.stderr  # no bars, no colour
    progress = [line for line in result.stdout.splitlines() if " seed 0: " in line]
    assert len(progress) == 4 and all(line.split(": ")[1].startswith(("success", "failure")) for line in progress), result.stdout
    assert result.stdout.splitlines()[-1].startswith("wrote ")
    code = ("import warnings\nfrom evoharness_bpe.lab.cli import quiet_third_parties\nquiet_third_parties()\n"
            "warnings.warn('check this', UserWarning)\nwarnings.warn('old api', FutureWarning)\n"
            "import os\nprint(os.environ['TRL_EXPERIMENTAL_SILENCE'], os.environ['HF_DATASETS_DISABLE_PROGRESS_BARS'])\n"
            "from tqdm import tqdm\nprint(sum(tqdm(range(3), desc='de-quantizing')))\n")  # the GGUF loader's bar
    env = {k: v for k, v in os.environ.items() if k not in ("TRL_EXPERIMENTAL_SILENCE", "HF_DATASETS_DISABLE_PROGRESS_BARS", "TQDM_DISABLE")}
    warned = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert warned.stderr == "warning: check this\n"          # no file:line, no source, no FutureWarning, no bar
    assert warned.stdout.split() == ["1", "1", "3"]          # TRL's experimental notice and datasets' bars are off


def test_run_plays_given_textworld_games_and_keeps_the_store_where_store_says(tmp_path: Path) -> None:
    pytest.importorskip("textworld")
    from evoharness_bpe.lab.envs.textworld import make_game
    from evoharness_bpe.trace import read_traces

    game = make_game(tmp_path / "mine.z8", seed=3)
    result = _cli("run", "--env", "textworld", "--game", str(game), "--policy", "expert", "--harness", "bpe",
                  "--out", "tw", "--store", "shared.db", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    (trace,) = list(read_traces(tmp_path / "tw" / "traces.jsonl"))
    assert trace.outcome.success and trace.env == "textworld"
    from evoharness_bpe.lab.envs import make_env

    env = make_env("textworld", 1, games=[game])
    assert trace.task == env.reset(0)[0]                     # the game given, not a generated one
    env.close()
    assert (tmp_path / "shared.db").exists() and not (tmp_path / "tw" / "experience.db").exists()
    assert json.loads((tmp_path / "tw" / "metrics.json").read_text())["config"]["games"] == [str(game)]


def test_identical_commands_into_fresh_folders_report_identical_figures(tmp_path: Path) -> None:
    args = ["run", "--env", "crm-migration", "--policy", "noisy", "--harness", "bpe", "--episodes", "2"]
    assert _cli(*args, "--out", "a", cwd=tmp_path).returncode == 0
    assert _cli(*args, "--out", "b", cwd=tmp_path).returncode == 0
    assert (tmp_path / "a" / "experience.db").exists() and (tmp_path / "b" / "experience.db").exists()
    assert _episodes(tmp_path / "a") == _episodes(tmp_path / "b")


def test_a_missing_framework_names_the_flag_and_only_real_packages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    line = _only_line(_cli("run", "--framework", "langchain", "--policy", "expert", "--out", "f", cwd=tmp_path),
                      "--framework", "langchain", "package.module:function")
    assert "evoharness-bpe-langchain" not in line and not (tmp_path / "f").exists()
    from evoharness_bpe.exceptions import UserError
    from evoharness_bpe.lab import registry

    def missing(name: str, *_args: object) -> object:
        raise UserError(f"unknown framework {name!r}")

    monkeypatch.setattr(registry, "_resolve", missing)   # as if the LangGraph integration were not installed
    with pytest.raises(UserError, match=r"pip install -e integrations/langgraph \(the evoharness-bpe-langgraph package\)"):
        registry.load_framework("langgraph")


def test_a_value_error_no_check_caught_is_one_line_and_verbose_shows_the_traceback(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from evoharness_bpe.lab import cli
    from evoharness_bpe.lab.frameworks import EpisodeConfig

    def pydantic_error(_args: object) -> int:
        EpisodeConfig(window=0)
        return 0

    def plain_error(_args: object) -> int:
        raise ValueError("epsilon must be in [0, 1)\nsecond line")

    monkeypatch.setattr(cli, "_report", pydantic_error)
    assert cli.main(["report", "x"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("evoharness: error: window: ") and "--verbose" in err[0], err
    monkeypatch.setattr(cli, "_report", plain_error)
    assert cli.main(["report", "x"]) == 1
    assert capsys.readouterr().err == ("evoharness: error: epsilon must be in [0, 1) "
                                       "(run again with --verbose for the traceback)\n")
    with pytest.raises(ValueError, match="epsilon"):
        cli.main(["--verbose", "report", "x"])


def test_an_os_error_from_any_command_names_the_flag_of_its_path(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from evoharness_bpe.lab import cli

    def blocked(_args: object) -> int:                     # a command that writes under its --out without checking it
        (tmp_path / "afile").write_text("x")
        (tmp_path / "afile" / "deeper").mkdir(parents=True)
        return 0

    monkeypatch.setattr(cli, "_demo", blocked)
    assert cli.main(["demo", "--out", str(tmp_path / "afile" / "deeper")]) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"evoharness: error: --out {tmp_path / 'afile' / 'deeper'} cannot be used ("), err
    assert err[0].endswith("choose another --out")
    assert cli._flag_of("a/b.db", ["mcp", "--store=a/b.db"]) == ("--store", "a/b.db")
    assert cli._flag_of("a", ["reproduce", "--out", "a/b"]) == ("--out", "a/b")
    assert cli._flag_of("elsewhere/x", ["run", "--out", "r", "--store", "s.db"]) is None
    assert cli._flag_of("a/x", ["run", "--out", "."]) is None
