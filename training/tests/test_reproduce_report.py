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
