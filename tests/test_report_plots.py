"""The report's plots read right: values on every bar (0% and "skipped" too), legends outside the
axes in the table's order, the x axis named like the table's column, integer ticks, a distinct
look per line, and how many episodes each line averages."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from evoharness_bpe.lab.runner.metrics import summarize
from evoharness_bpe.lab.runner.report import PLOTS, build_figures, write_report

pytest.importorskip("matplotlib")


def _row(env: str, harness: str, framework: str, seed: int, *, success: bool, calls: int) -> dict[str, Any]:
    return {"episode_id": f"{env}-{harness}-{framework}-{seed}", "env": env, "policy": "expert", "harness": harness,
            "framework": framework, "seed": seed, "difficulty": 1, "success": success, "score": float(success),
            "steps": calls - 1, "invalid_actions": 0, "model_calls": calls,
            "meta_actions": {"track": 0, "commit": 0, "recall": 0, "note": 0},
            "meta_actions_per_step": [0] * calls, "prompt_tokens_per_step": [100 * (i + 1) for i in range(calls)],
            "wall_time_s": 0.0}


@pytest.fixture(scope="module")
def rows() -> list[dict[str, Any]]:
    out = []
    for seed in (0, 1):
        for env in ("crm-migration", "compliance-review"):
            out.append(_row(env, "none", "core", seed, success=True, calls=3))
            out.append(_row(env, "append", "core", seed, success=False, calls=3))   # 0%: must still show
            out.append(_row(env, "bpe", "core", seed, success=True, calls=3))
            out.append(_row(env, "none", "langgraph", seed, success=True, calls=3))  # same curve as none / core
            out.append(_row(env, "bpe", "langgraph", seed, success=True, calls=3))   # append skipped here
    return out


@pytest.fixture(scope="module")
def figures(rows: list[dict[str, Any]]) -> Any:
    figs = build_figures(rows, summarize(rows))
    for fig in figs.values():
        fig.canvas.draw()
    yield figs
    import matplotlib.pyplot as plt

    for fig in figs.values():
        plt.close(fig)


def _outside_right(legend: Any, ax: Any) -> bool:
    return legend.get_window_extent().x0 >= ax.get_window_extent().x1


def test_every_bar_says_its_value_including_zero_and_skipped(figures: dict[str, Any]) -> None:
    ax = figures[PLOTS[0]].axes[0]
    labels = [t.get_text() for t in ax.texts]
    assert labels.count("0%\nn=2") == 2                     # append / core in both environments
    assert labels.count("skipped") == 2                     # append / langgraph in both environments
    assert labels.count("100%\nn=2") == 8
    legend = ax.get_legend()
    assert [t.get_text() for t in legend.get_texts()] == ["none", "append", "bpe"]
    assert _outside_right(legend, ax)
    assert ax.get_ylabel() and ax.get_xlabel()


@pytest.mark.parametrize("name", PLOTS[1:])
def test_line_plots_name_the_model_call_and_keep_the_table_order(figures: dict[str, Any], name: str) -> None:
    fig = figures[name]
    axes = [ax for ax in fig.axes if ax.get_title()]
    assert [ax.get_title() for ax in axes] == ["compliance-review", "crm-migration"]
    for ax in axes:
        assert ax.get_xlabel() == "model call"
        ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
        assert ticks and all(float(t).is_integer() for t in ticks), ticks
        looks = {(line.get_color(), line.get_linestyle(), line.get_marker()) for line in ax.get_lines()}
        assert len(looks) == len(ax.get_lines()) == 5      # identical curves still look different
    legend = axes[-1].get_legend()
    texts = [t.get_text() for t in legend.get_texts()]
    assert texts == ["none / core (mean of 2 episodes)", "none / langgraph (mean of 2 episodes)",
                     "append / core (mean of 2 episodes)", "bpe / core (mean of 2 episodes)",
                     "bpe / langgraph (mean of 2 episodes)"]
    assert _outside_right(legend, axes[-1])


def test_the_table_counts_model_calls_beside_environment_steps(tmp_path: Path, rows: list[dict[str, Any]]) -> None:
    import json

    (tmp_path / "metrics.json").write_text(json.dumps({"episodes": rows}))
    text = write_report(tmp_path).read_text()
    assert "| env steps | model calls |" in text
    assert "| crm-migration | expert | bpe | core | 2 | 100% | 2.0 | 3.0 |" in text
    assert all((tmp_path / p).read_bytes()[:4] == b"\x89PNG" for p in PLOTS)
