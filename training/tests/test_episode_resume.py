"""A stage that plays episodes, stopped part-way: the episodes that ended are kept, the others played."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

SEEDS = {1: [10_000, 10_001], 2: [10_000, 10_001]}


def _content(trace) -> tuple:  # noqa: ANN001 - a Trace
    """What an episode played: its moves and outcome (not its id, clock, wall time or note ids)."""
    moves = [m for m in trace.messages if m["role"] == "assistant"]
    return (trace.metadata["difficulty"], trace.metadata["seed"], json.dumps(moves, default=str),
            trace.outcome.model_dump_json(), len(trace.model_calls))


def _expert(config, played: list[int], stop_at: int | None = None):  # noqa: ANN001, ANN202
    """The run's scripted expert, counting the episodes it starts; Ctrl-C as episode `stop_at` starts."""
    from evoharness_bpe_training.reproduce_episodes import expert_for

    make = expert_for(config)

    def per_env(env):  # noqa: ANN001, ANN202
        played.append(env.difficulty)
        if stop_at is not None and len(played) == stop_at:
            raise KeyboardInterrupt
        return make(env)
    return per_env


def test_episodes_that_ended_before_a_stop_are_kept_and_the_rest_played(tmp_path: Path) -> None:
    from evoharness_bpe import read_traces
    from evoharness_bpe_training.reproduce_config import load_reproduce_preset
    from evoharness_bpe_training.reproduce_episodes import play_seeds

    config = load_reproduce_preset("tiny", out=str(tmp_path), max_steps=80)
    whole = play_seeds(None, config, SEEDS, tmp_path / "whole.jsonl", per_env=_expert(config, []))

    keep, first = tmp_path / "scratch", []
    with pytest.raises(KeyboardInterrupt):
        play_seeds(None, config, SEEDS, tmp_path / "stopped.jsonl", per_env=_expert(config, first, stop_at=3), keep=keep)
    assert sorted(p.name for p in keep.iterdir()) == ["d1-seed10000.json", "d1-seed10001.json"]
    assert not (tmp_path / "stopped.jsonl").exists()

    second, lines = [], []
    resumed = play_seeds(None, config, SEEDS, tmp_path / "stopped.jsonl", per_env=_expert(config, second), keep=keep,
                         log=lines.append, stage="sft")
    assert second == [2, 2]  # the two difficulty-1 episodes were not played again
    assert "[sft] 2 of 4 episodes kept from an interrupted try; playing the other 2" in lines
    assert [_content(t) for t in resumed] == [_content(t) for t in whole]
    assert [_content(t) for t in read_traces(tmp_path / "stopped.jsonl")] == [_content(t) for t in whole]
    assert all(t.outcome.success for t in whole)  # the comparison is of whole episodes, not of empty ones


def test_an_episode_file_that_is_not_whole_is_played_again(tmp_path: Path) -> None:
    from evoharness_bpe_training.reproduce_config import load_reproduce_preset
    from evoharness_bpe_training.reproduce_episodes import play_seeds

    config = load_reproduce_preset("tiny", out=str(tmp_path), max_steps=80)
    keep = tmp_path / "scratch"
    play_seeds(None, config, {1: [10_000, 10_001]}, tmp_path / "first.jsonl", per_env=_expert(config, []), keep=keep)
    (keep / "d1-seed10001.json").write_text('{"schema_version": 1, "task": "cut sho')
    played: list[int] = []
    traces = play_seeds(None, config, {1: [10_000, 10_001]}, tmp_path / "again.jsonl", per_env=_expert(config, played), keep=keep)
    assert played == [1] and [t.metadata["seed"] for t in traces] == [10_000, 10_001]
    assert json.loads((keep / "d1-seed10001.json").read_text())["metadata"]["seed"] == 10_001  # saved whole this time


def test_a_stage_scratch_folder_outlives_a_stop_and_goes_when_the_stage_or_another_one_runs(tmp_path: Path) -> None:
    from evoharness_bpe_training.stages import StageFolder

    folder = StageFolder.open(tmp_path, {"x": 1})
    assert folder.scratch("eval") == tmp_path / "unfinished" / "eval" and not folder.scratch("eval").exists()

    def stopped() -> dict:
        folder.scratch("eval").mkdir(parents=True)
        (folder.scratch("eval") / "episode.json").write_text("{}")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        folder.run("eval", stopped, lambda line: None)
    resumed = StageFolder.open(tmp_path, {"x": 1}, resume=True)

    def again() -> dict:
        assert (resumed.scratch("eval") / "episode.json").exists()  # its own saves are there to pick up
        return {"ok": True}

    assert resumed.run("eval", again, lambda line: None) == {"ok": True}
    assert not (tmp_path / "unfinished").exists()  # gone with the finished stage

    resumed.scratch("later").mkdir(parents=True)  # a stage's saves, then an earlier stage run again:
    assert resumed.run("train", lambda: {"ok": True}, lambda line: None) == {"ok": True}
    assert not resumed.scratch("later").exists()  # made from what that stage replaced


@pytest.mark.slow
def test_a_stop_in_an_evaluation_stage_resumes_with_the_episodes_it_finished(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C in the ``raw`` evaluation after its first episode: ``--resume`` plays the others only,
    and the stage ends with the traces and summary of a run never stopped."""
    from dataclasses import replace

    from evoharness_bpe_training import reproduce as module
    from evoharness_bpe_training import stages

    settings = {"stages": "raw", "eval_episodes": 2, "lockstep": False}
    whole = module.reproduce(module.load_reproduce_preset("tiny", out=str(tmp_path / "whole"), **settings), log=lambda line: None)

    real = stages.Progress.advance

    def stop_after_the_first(self, n: int = 1, note: str = "") -> None:  # noqa: ANN001
        real(self, n, note)
        if self.stage == "raw" and self.count == 1:
            raise KeyboardInterrupt

    out = tmp_path / "stopped"
    with monkeypatch.context() as patch:
        patch.setattr(stages.Progress, "advance", stop_after_the_first)
        with pytest.raises(KeyboardInterrupt):
            module.reproduce(module.load_reproduce_preset("tiny", out=str(out), **settings), log=lambda line: None)
    assert [p.name for p in (out / "unfinished" / "raw").iterdir()] == ["d1-seed10000.json"]

    lines: list[str] = []
    resumed = module.reproduce(module.resume_config(out), log=lines.append, resume=True)
    assert "[raw] 1 of 4 episodes kept from an interrupted try; playing the other 3" in lines
    assert not (out / "unfinished").exists()
    assert (out / "eval-raw.jsonl").read_text().count("\n") == 4
    drop = ("wall_s", "wall_per_model_call_s")
    assert [{k: v for k, v in r.items() if k not in drop} for r in resumed["results"]] == \
        [{k: v for k, v in r.items() if k not in drop} for r in whole["results"]]
    assert replace(module.resume_config(out), out="x") == replace(module.resume_config(tmp_path / "whole"), out="x")
