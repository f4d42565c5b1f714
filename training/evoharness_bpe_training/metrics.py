"""Harness metrics: how much the policy consults its harness, over training and by difficulty.

*Harness annealing*: meta-action calls per episode (in total and per type) over training steps.
*Harness evolution*: the same, split by task difficulty. Both come with success and token
figures, from episode records (one dict per rollout, as `run_grpo` writes them to
``episodes.jsonl``) or from traces.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from evoharness_bpe import META_ACTIONS, Trace

__all__ = ["EpisodeRecord", "episode_record", "harness_metrics", "plot_harness_metrics", "read_jsonl"]

EpisodeRecord = dict[str, Any]
"""``{"step", "difficulty", "success", "score", "meta_calls", "by_action", "harness_tokens", "invalid"}``."""


def episode_record(trace: Trace, *, step: int | None = None) -> EpisodeRecord:
    """The episode record of a trace (step and difficulty from its metadata when present)."""
    by_action = {name: 0 for name in META_ACTIONS}
    for event in trace.meta_actions:
        if event.name in by_action:
            by_action[event.name] += 1
    ledger = trace.ledger
    return {
        "step": step if step is not None else int(trace.metadata.get("step", 0)),
        "difficulty": int(trace.metadata.get("difficulty", 0)),
        "success": bool(trace.outcome.success),
        "score": float(trace.outcome.score or (1.0 if trace.outcome.success else 0.0)),
        "meta_calls": len(trace.meta_actions),
        "by_action": by_action,
        "harness_tokens": ledger.harness_tokens if ledger else 0,
        "invalid": int(trace.outcome.info.get("invalid_actions", 0)) + sum(not e.ok for e in trace.meta_actions),
    }


def _summary(records: list[EpisodeRecord]) -> dict[str, Any]:
    n = len(records)
    per_type = {name: sum(r["by_action"].get(name, 0) for r in records) / n for name in META_ACTIONS}
    return {
        "episodes": n,
        "success_rate": sum(bool(r["success"]) for r in records) / n,
        "meta_calls_per_episode": sum(r["meta_calls"] for r in records) / n,
        "meta_calls_per_type": per_type,
        "harness_tokens_per_episode": sum(r["harness_tokens"] for r in records) / n,
        "invalid_per_episode": sum(r.get("invalid", 0) for r in records) / n,
    }


def harness_metrics(episodes: Iterable[EpisodeRecord | Trace]) -> dict[str, Any]:
    """Summaries overall, per training step (annealing) and per difficulty (evolution).

    >>> m = harness_metrics([{"step": 1, "difficulty": 1, "success": True, "meta_calls": 2,
    ...                       "by_action": {"track": 2}, "harness_tokens": 40}])
    >>> m["overall"]["meta_calls_per_episode"], m["by_step"][0]["step"]
    (2.0, 1)
    """
    records = [episode_record(e) if isinstance(e, Trace) else e for e in episodes]
    if not records:
        return {"overall": None, "by_step": [], "by_difficulty": []}
    by_step: dict[int, list[EpisodeRecord]] = defaultdict(list)
    by_difficulty: dict[int, list[EpisodeRecord]] = defaultdict(list)
    for r in records:
        by_step[int(r.get("step", 0))].append(r)
        by_difficulty[int(r.get("difficulty", 0))].append(r)
    return {
        "overall": _summary(records),
        "by_step": [{"step": s, **_summary(rs)} for s, rs in sorted(by_step.items())],
        "by_difficulty": [{"difficulty": d, **_summary(rs)} for d, rs in sorted(by_difficulty.items())],
    }


def plot_harness_metrics(metrics: dict[str, Any], out_dir: str | os.PathLike[str]) -> list[Path]:
    """Write ``harness_annealing.png`` and ``harness_evolution.png``; return their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for key, axis, name, title in (
        ("by_step", "step", "harness_annealing.png", "Meta-action calls per episode over training"),
        ("by_difficulty", "difficulty", "harness_evolution.png", "Meta-action calls per episode by difficulty"),
    ):
        rows = metrics.get(key) or []
        fig, (ax, ax2) = plt.subplots(1, 2, figsize=(10, 4))
        xs = [r[axis] for r in rows]
        ax.plot(xs, [r["meta_calls_per_episode"] for r in rows], marker="o", label="all", color="black")
        for action in META_ACTIONS:
            ax.plot(xs, [r["meta_calls_per_type"][action] for r in rows], marker=".", label=action)
        ax.set_xlabel(axis)
        ax.set_ylabel("calls per episode")
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=7)
        ax2.plot(xs, [r["success_rate"] for r in rows], marker="o", label="success rate")
        ax2.set_xlabel(axis)
        ax2.set_ylim(-0.05, 1.05)
        twin = ax2.twinx()
        twin.plot(xs, [r["harness_tokens_per_episode"] for r in rows], marker="x", color="gray", label="harness tokens")
        ax2.set_title("success and harness tokens", fontsize=9)
        fig.tight_layout()
        path = out / name
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)
    return written


def read_jsonl(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The JSON objects of a JSONL file (blank lines skipped)."""
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]
