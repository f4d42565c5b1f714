"""Run folders that are not what they seem: `evoharness run --resume` and `evoharness report` check
what they read, and answer a folder they cannot use in one line, changing nothing."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from evoharness_bpe.lab.cli import main

QUICK = ["run", "--env", "crm-migration", "--policy", "expert", "--harness", "bpe"]


def _one_line(capsys: pytest.CaptureFixture[str], *needles: str) -> str:
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1, err
    assert err[0].startswith("evoharness: error: ") and all(n in err[0] for n in needles), err[0]
    return err[0]


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


@pytest.fixture
def run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    out = tmp_path / "r"
    assert main([*QUICK, "--out", str(out)]) == 0
    capsys.readouterr()
    return out


def test_a_traces_line_that_is_json_but_no_episode_is_refused_on_resume(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with (run / "traces.jsonl").open("a") as fh:
        fh.write('{"hello": "world"}\n')
    before = _files(run)
    assert main([*QUICK, "--out", str(run), "--resume"]) == 1
    _one_line(capsys, "traces.jsonl line 2 is not an episode", "--overwrite")
    assert _files(run) == before


def test_a_traces_line_that_is_no_episode_is_refused_by_report(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (run / "metrics.json").unlink()
    with (run / "traces.jsonl").open("a") as fh:
        fh.write('[1, 2]\n')
    assert main(["report", str(run)]) == 1
    _one_line(capsys, "line 2 is not an episode", "not an object")


def test_a_torn_last_line_is_still_skipped_on_resume(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with (run / "traces.jsonl").open("a") as fh:
        fh.write('{"schema_version": 1, "episode_id": "cut')   # a crashed writer's last line
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        assert main([*QUICK, "--out", str(run), "--resume"]) == 0


@pytest.mark.parametrize("field", ["success", "prompt_tokens_per_step", "env"])
def test_report_on_metrics_missing_a_field_is_one_line(run: Path, capsys: pytest.CaptureFixture[str], field: str) -> None:
    data = json.loads((run / "metrics.json").read_text())
    del data["episodes"][0][field]
    (run / "metrics.json").write_text(json.dumps(data))
    (run / "traces.jsonl").unlink()
    before = _files(run)
    assert main(["report", str(run)]) == 1
    _one_line(capsys, "metrics.json is unusable", f"episode 0 has no {field!r}", "no traces.jsonl")
    assert _files(run) == before


def test_report_rebuilds_metrics_missing_a_field_from_the_traces_and_says_so(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = json.loads((run / "metrics.json").read_text())
    broken = json.loads(json.dumps(good))
    broken["episodes"][0]["steps"] = "many"
    (run / "metrics.json").write_text(json.dumps(broken))
    with pytest.warns(UserWarning, match="'steps' is not a whole number.*rebuilt it from traces.jsonl"):
        assert main(["report", str(run)]) == 0
    rebuilt = json.loads((run / "metrics.json").read_text())
    assert rebuilt["episodes"][0]["steps"] == good["episodes"][0]["steps"]


def test_an_unparseable_metrics_file_is_not_reported_as_missing(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (run / "metrics.json").write_text("{corrupt")
    (run / "traces.jsonl").unlink()
    assert main(["report", str(run)]) == 1
    line = _one_line(capsys, "metrics.json is unusable", "not valid JSON")
    assert "holds neither" not in line


@pytest.mark.parametrize("make", [True, False])
def test_resume_in_a_folder_without_a_run_says_there_is_nothing_to_resume(tmp_path: Path, capsys: pytest.CaptureFixture[str], make: bool) -> None:
    out = tmp_path / "empty"
    if make:
        out.mkdir()
    assert main([*QUICK, "--out", str(out), "--resume"]) == 1
    _one_line(capsys, f"--out {out} holds no run", "nothing to resume", "drop --resume")
    assert (out.exists() and not any(out.iterdir())) if make else not out.exists()


@pytest.mark.parametrize(("flag", "value"), [("--env", "compliance-review"), ("--policy", "noisy"), ("--harness", "none"),
                                             ("--difficulty", "2")])
def test_resume_refuses_other_settings_than_the_folders(run: Path, capsys: pytest.CaptureFixture[str], flag: str, value: str) -> None:
    before = _files(run)
    args = {"--env": "crm-migration", "--policy": "expert", "--harness": "bpe", "--difficulty": "1"}
    args[flag] = value
    assert main(["run", *[x for kv in args.items() for x in kv], "--out", str(run), "--resume"]) == 1
    _one_line(capsys, f"--resume: {flag} {value} differs from the run in {run}", "--overwrite")
    assert _files(run) == before   # metrics and report untouched


def test_resume_of_a_run_stopped_before_its_metrics_checks_the_episodes(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (run / "metrics.json").unlink()   # killed before it wrote them: the finished episodes tell the settings
    assert main(["run", "--env", "compliance-review", "--policy", "expert", "--harness", "bpe", "--out", str(run), "--resume"]) == 1
    _one_line(capsys, "--resume: --env compliance-review differs", "it holds an episode of --env crm-migration")
    assert main([*QUICK, "--out", str(run), "--resume"]) == 0
