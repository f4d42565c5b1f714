"""The reproduction's verdicts on the targets."""

from __future__ import annotations

from typing import Any


def _level(success: float, meta_calls: float, per_step: float) -> dict[str, float]:
    return {"success": success, "meta_calls": meta_calls, "meta_per_env_step": per_step}


def test_targets_b_and_c_are_not_judged_on_policies_that_never_succeed() -> None:
    from evoharness_bpe_training.reproduce_report import targets

    def results(sft_success: float, grpo_d2_success: float) -> list[dict[str, Any]]:
        return [{"stage": "raw", "levels": {"1": _level(0.0, 0.0, 0.0)}},
                {"stage": "sft", "levels": {"1": _level(sft_success, 8.0, 1.0)}},
                {"stage": "grpo", "levels": {"1": _level(sft_success, 4.0, 0.5), "2": _level(grpo_d2_success, 6.0, 0.9)}}]

    judged = {t["target"][:3]: t for t in targets(results(0.6, 0.3))}
    assert judged["(b)"]["met"] and judged["(c)"]["met"]
    unjudged = {t["target"][:3]: t for t in targets(results(0.0, 0.0))}
    assert not unjudged["(b)"]["met"] and "not judged: the SFT policy succeeds in no episode" in unjudged["(b)"]["measured"]
    assert not unjudged["(c)"]["met"] and "not judged" in unjudged["(c)"]["measured"]
    assert not unjudged["(a)"]["met"]


def test_the_report_lists_grpos_validations_and_the_kept_update(tmp_path) -> None:  # noqa: ANN001
    from evoharness_bpe_training.reproduce_report import targets, write_report

    level = {**_level(0.7, 8.0, 1.0), "score": 0.7, "meta_by_action": {}, "env_steps": 8.0, "harness_tokens": 300.0,
             "invalid_actions": 0.0, "prompt_tokens_mean": 900.0, "prompt_tokens_max": 1000}
    results = [{"stage": "sft", "levels": {"1": level}}, {"stage": "grpo", "levels": {"1": level}}]
    selection = [{"step": 0, "score": 0.45, "success": 0.7, "meta_calls": 8.4, "episodes": 10, "best_step": 0},
                 {"step": 3, "score": 0.52, "success": 0.7, "meta_calls": 6.1, "episodes": 10, "best_step": 3},
                 {"step": 6, "score": 0.10, "success": 0.2, "meta_calls": 3.0, "episodes": 10, "best_step": 3}]
    summary = {"config": {"model": "smollm2-135m", "env": "crm-migration", "eval_episodes": 10}, "wall_s": 60.0,
               "results": results, "targets": targets(results), "grpo_selection": selection,
               "grpo_curve": [{"step": s, "reward": 0.4, "success": 0.7, "meta_calls": 8.0} for s in range(6)]}
    text = write_report(summary, tmp_path).read_text()
    assert "the stage kept the weights of update 3" in text
    rows = [line for line in text.splitlines() if line.startswith("| 3 |") or line.startswith("| 6 |")]
    assert rows == ["| 3 | 0.520 | 0.70 | 6.1 | yes |", "| 6 | 0.100 | 0.20 | 3.0 |  |"]


def test_the_report_says_which_budget_cuts_a_difficulty(tmp_path) -> None:  # noqa: ANN001
    from evoharness_bpe_training.reproduce_report import write_report

    summary = {"config": {"model": "smollm2-135m", "env": "crm-migration", "eval_episodes": 10}, "wall_s": 60.0,
               "results": [], "targets": []}
    assert "Budget:" not in write_report(summary, tmp_path).read_text()
    problem = "difficulty 2: the expert's 10 held-out episodes need replies of up to 197 tokens (--max-new-tokens 128)"
    text = write_report({**summary, "budget_problems": [problem]}, tmp_path).read_text()
    assert f"Budget: {problem}." in text.splitlines()
