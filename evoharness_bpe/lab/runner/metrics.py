"""Per-episode metrics from traces, whichever framework produced them."""

from __future__ import annotations

import statistics
from collections import Counter
from typing import Any

from ...trace import Trace
from ...actions import PARTS
from ...harness import META_ACTIONS, approx_prompt_tokens, parts_label

__all__ = ["episode_metrics", "summarize", "HARNESS_ORDER", "ABLATIONS", "trace_parts", "variant"]

HARNESS_ORDER = ("none", "append", "panels", "bpe")
"""The order harnesses appear in tables and plots."""
ABLATIONS = ("full", "-belief", "-progress", "-experience")
"""The reference's ablation table: every part, then each part switched off alone."""


def trace_parts(trace: Trace) -> tuple[str, ...]:
    """The parts an episode ran with (a trace without the record ran with all three)."""
    parts = trace.metadata.get("parts")
    return tuple(p for p in PARTS if p in parts) if isinstance(parts, list) else PARTS


def variant(harness: str, parts: tuple[str, ...]) -> str:
    """The name tables give a harness with its ablation: ``bpe``, ``bpe-belief``, ``panels-experience``."""
    label = parts_label(parts)
    return harness if label == "full" else f"{harness}{label}"


def _meta_per_call(trace: Trace) -> list[int]:
    if isinstance(trace.metadata.get("meta_actions_per_call"), list):
        return list(trace.metadata["meta_actions_per_call"])
    return [sum(1 for c in mc.response.get("tool_calls") or [] if (c.get("function") or {}).get("name") in META_ACTIONS)
            for mc in trace.model_calls]


def episode_metrics(trace: Trace, *, policy: str | None = None) -> dict[str, Any]:
    """Success, steps, invalid actions, meta-actions by type, prompt tokens per step, wall time."""
    tokens = trace.metadata.get("prompt_tokens")
    if not isinstance(tokens, list):
        tokens = [mc.prompt_tokens or approx_prompt_tokens(mc.messages, trace.tools) for mc in trace.model_calls]
    by_type = Counter({name: 0 for name in META_ACTIONS})
    if isinstance(trace.metadata.get("meta_actions"), dict):
        by_type.update(trace.metadata["meta_actions"])
    elif trace.model_calls:
        for mc in trace.model_calls:
            for c in mc.response.get("tool_calls") or []:
                name = (c.get("function") or {}).get("name")
                if name in META_ACTIONS:
                    by_type[name] += 1
    else:
        by_type.update(e.name for e in trace.meta_actions)
    info = trace.outcome.info
    return {
        "episode_id": trace.episode_id,
        "env": trace.env,
        "harness": variant(trace.harness, trace_parts(trace)),
        "base_harness": trace.harness,
        "ablation": parts_label(trace_parts(trace)),
        "charge_meta_actions": trace.metadata.get("charge_meta_actions", True),
        "max_meta_actions": trace.metadata.get("max_meta_actions"),
        "framework": trace.framework,
        "policy": policy or trace.metadata.get("policy"),
        "seed": trace.metadata.get("seed"),
        "difficulty": trace.metadata.get("difficulty"),
        "success": bool(trace.outcome.success),
        "score": trace.outcome.score,
        "steps": int(info.get("steps", 0)),
        "invalid_actions": int(info.get("invalid_actions", 0)),
        "model_calls": len(tokens),
        "meta_actions": dict(by_type),
        "meta_actions_per_step": _meta_per_call(trace),
        "prompt_tokens_per_step": [int(t) for t in tokens],
        "wall_time_s": trace.metadata.get("wall_time_s"),
    }


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (env, policy, harness, framework): success rate and means.

    ``mean_steps`` counts environment steps; ``mean_model_calls`` counts model calls (the plots' x axis).
    """
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["env"], r["policy"], r["harness"], r["framework"]), []).append(r)
    out = []
    ordered = sorted(groups.items(), key=lambda kv: (str(kv[0][0]), str(kv[0][1]), _rank(kv[0][2]), str(kv[0][3])))
    for (env, policy, harness, framework), rs in ordered:
        tokens = [t for r in rs for t in r["prompt_tokens_per_step"]]
        out.append({
            "env": env, "policy": policy, "harness": harness, "framework": framework, "episodes": len(rs),
            "success_rate": sum(r["success"] for r in rs) / len(rs),
            "mean_steps": statistics.fmean(r["steps"] for r in rs),
            "mean_model_calls": statistics.fmean(r.get("model_calls", len(r["prompt_tokens_per_step"])) for r in rs),
            "mean_invalid_actions": statistics.fmean(r["invalid_actions"] for r in rs),
            "mean_meta_actions": {k: statistics.fmean(r["meta_actions"].get(k, 0) for r in rs) for k in META_ACTIONS},
            "mean_prompt_tokens_per_step": statistics.fmean(tokens) if tokens else 0.0,
            "max_prompt_tokens": max(tokens, default=0),
            "mean_wall_time_s": statistics.fmean(float(r["wall_time_s"] or 0.0) for r in rs),
        })
    return out


def _rank(harness: str) -> tuple[int, int]:
    base, _, ablated = harness.partition("-")
    order = ABLATIONS.index(f"-{ablated}") if f"-{ablated}" in ABLATIONS else len(ABLATIONS)
    return (HARNESS_ORDER.index(base) if base in HARNESS_ORDER else len(HARNESS_ORDER), 0 if not ablated else order)
