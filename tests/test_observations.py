"""`EpisodeConfig.observations_in_belief`: an environment result copied into Belief as well as kept
whole in the recent window (the default), or kept in the window only; and the per-call progress
lines of model-backed policies in `evoharness run`."""

from __future__ import annotations

import statistics

import pytest

from evoharness_bpe.exceptions import UserError
from evoharness_bpe.harness import META_ACTIONS
from evoharness_bpe.lab.envs import make_env
from evoharness_bpe.lab.frameworks import EpisodeConfig
from evoharness_bpe.lab.policies import ExpertPolicy
from evoharness_bpe.lab.registry import load_framework
from evoharness_bpe.lab.runner.suite import RunConfig, _Progress
from evoharness_bpe.testing.scripted import ScriptedPolicy, tool_call


def _episode(copy: bool | None, policy_for=ExpertPolicy):  # noqa: ANN001, ANN202
    env = make_env("crm-migration", 1)
    options = {} if copy is None else {"observations_in_belief": copy}
    return load_framework("core")(env, policy_for(env), None, EpisodeConfig(harness="bpe", seed=0, **options))


def test_by_default_a_result_is_in_the_window_and_in_belief() -> None:
    trace = _episode(None)
    assert any("tool:fetch_page:last" in d.text for d in trace.dashboards)
    assert trace.metadata["observations_in_belief"] is True


def test_without_the_copy_a_result_is_in_the_window_only_and_prompts_are_smaller() -> None:
    copied, window_only = _episode(True), _episode(False)
    assert not any("tool:" in d.text for d in window_only.dashboards)
    assert window_only.metadata["observations_in_belief"] is False
    # the same episode (the expert does not read Belief), each result still whole in the conversation
    assert window_only.outcome.success == copied.outcome.success
    def results(trace):  # noqa: ANN001, ANN202 - the environment's answers (meta-action answers carry fresh ids)
        return [m["content"] for m in trace.messages if m.get("role") == "tool" and m.get("name") not in META_ACTIONS]

    assert results(window_only) == results(copied) and results(copied)
    assert statistics.fmean(window_only.metadata["prompt_tokens"]) < statistics.fmean(copied.metadata["prompt_tokens"])


def test_without_the_copy_an_error_still_opens_an_exception() -> None:
    script = [tool_call("fetch_page", {"page": "first"}), tool_call("fetch_page", {"page": 1})]
    trace = _episode(False, lambda env: ScriptedPolicy(script))
    after_error = trace.dashboards[1].text
    assert "tool:fetch_page" in after_error and "must be a integer" in after_error
    assert "tool:fetch_page:last" not in trace.dashboards[-1].text  # the success that follows is not copied


def test_frameworks_that_cannot_leave_results_out_say_so() -> None:
    env = make_env("crm-migration", 1)
    with pytest.raises(UserError, match="observations_in_belief=False with framework 'core'"):
        load_framework("langgraph")(env, ExpertPolicy(env), None, EpisodeConfig(observations_in_belief=False))


def test_the_run_command_passes_the_choice_on() -> None:
    from evoharness_bpe.lab.cli import build_parser

    args = build_parser().parse_args(["run", "--no-observations-in-belief"])
    assert args.observations_in_belief is False
    assert build_parser().parse_args(["run"]).observations_in_belief is True
    assert RunConfig().observations_in_belief is True


def test_a_model_backed_episode_prints_a_line_per_model_call(capsys: pytest.CaptureFixture[str]) -> None:
    progress = _Progress(1)  # stdout is not a terminal here: plain lines
    tick = progress.start("crm-migration local bpe core seed 0", 3, calls=True)
    tick()
    tick()
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("crm-migration local bpe core seed 0: model call 1 of at most 3 (")
    assert lines[1].startswith("crm-migration local bpe core seed 0: model call 2 of at most 3 (")
    quiet = progress.start("crm-migration expert bpe core seed 0", 3)
    quiet()
    assert capsys.readouterr().out == ""  # the scripted policies' calls take microseconds: no line each
