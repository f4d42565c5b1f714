"""`report.md` and its plots from a run folder's ``metrics.json`` (matplotlib: extra ``[run]``)."""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path
from typing import Any

from ...exceptions import UserError
from ...trace import read_traces
from .metrics import HARNESS_ORDER, episode_metrics, summarize

__all__ = ["write_report", "load_metrics", "PLOTS"]

PLOTS = ("success_by_harness.png", "prompt_tokens_per_step.png", "meta_actions_per_step.png")


_HATCHES = ("", "//", "..", "xx")
_STYLES = ("-", "--", ":", "-.")
_MARKERS = ("o", "s", "^", "D")


def _order(label: str) -> tuple[int, str]:
    first = label.split(" / ")[-1]
    return (HARNESS_ORDER.index(first) if first in HARNESS_ORDER else len(HARNESS_ORDER), label)


def _label(r: dict[str, Any], keys: tuple[str, ...]) -> str:
    return " / ".join(str(r[k]) for k in keys)


def _varying(rows: list[dict[str, Any]]) -> tuple[str, ...]:
    keys = tuple(k for k in ("env", "policy", "harness", "framework") if len({r[k] for r in rows}) > 1)
    return keys or ("harness",)


def _mean_curve(series: list[list[float]], *, hold: bool = False) -> list[float]:
    """The mean at each step over the episodes still running (or all, holding last values)."""
    length = max((len(s) for s in series), default=0)
    out = []
    for i in range(length):
        vals = [s[i] if i < len(s) else s[-1] for s in series if s and (hold or i < len(s))]
        out.append(sum(vals) / len(vals))
    return out


def _plots(rows: list[dict[str, Any]], summary: list[dict[str, Any]], out: Path) -> list[str]:
    try:
        import matplotlib  # noqa: PLC0415

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
        from matplotlib.ticker import MaxNLocator  # noqa: PLC0415
    except ImportError:
        return []
    keys = _varying(rows)
    curve_keys = tuple(k for k in keys) or ("harness",)
    # success by harness: one bar group per (env, policy, framework), one bar per harness, in table order
    groups = sorted({(s["env"], s["policy"], s["framework"]) for s in summary})
    present = {s["harness"] for s in summary}
    harnesses = [h for h in HARNESS_ORDER if h in present] + sorted(present - set(HARNESS_ORDER))
    fig, ax = plt.subplots(figsize=(max(5, 1.6 * len(groups) + 3), 3.8))
    width = 0.8 / max(1, len(harnesses))
    for j, h in enumerate(harnesses):
        xs, vals, labels = [], [], []
        for i, g in enumerate(groups):
            row = next((s for s in summary if (s["env"], s["policy"], s["framework"]) == g and s["harness"] == h), None)
            xs.append(i + j * width)
            vals.append(row["success_rate"] if row else 0.0)
            labels.append(f"{row['success_rate']:.0%}\nn={row['episodes']}" if row else "skipped")
        bars = ax.bar(xs, [max(v, 0.005) for v in vals], width, label=h, hatch=_HATCHES[j % len(_HATCHES)], edgecolor="black", linewidth=0.5)
        ax.bar_label(bars, labels=labels, fontsize=6, padding=1)
    ax.set_xticks([i + width * (len(harnesses) - 1) / 2 for i in range(len(groups))])
    ax.set_xticklabels(["\n".join(str(x) for x in g) for g in groups], fontsize=7)
    ax.set_ylim(0, 1.2)
    ax.set_ylabel("success rate (mean of n episodes)")
    ax.set_title("Success by harness")
    ax.legend(title="harness", fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(out / PLOTS[0], dpi=110, bbox_inches="tight")
    plt.close(fig)
    envs = sorted({str(r["env"]) for r in rows})
    curve_keys = tuple(k for k in curve_keys if k != "env") or ("harness",)
    for name, field, ylabel, cumulative in (
        (PLOTS[1], "prompt_tokens_per_step", "prompt tokens", False),
        (PLOTS[2], "meta_actions_per_step", "meta-action calls (cumulative)", True),
    ):
        fig, axes = plt.subplots(1, len(envs), figsize=(4.2 * len(envs) + 1, 3.8), squeeze=False)
        for ax, env in zip(axes[0], envs):
            series: dict[str, list[list[float]]] = defaultdict(list)
            for r in rows:
                if str(r["env"]) != env:
                    continue
                values = [float(v) for v in r[field]]
                if cumulative:
                    total, acc = 0.0, []
                    for v in values:
                        total += v
                        acc.append(total)
                    values = acc
                series[_label(r, curve_keys)].append(values)
            for k, (label, curves) in enumerate(sorted(series.items(), key=lambda kv: _order(kv[0]))):
                curve = _mean_curve(curves, hold=cumulative)
                ax.plot(range(1, len(curve) + 1), curve, label=f"{label} (mean of {len(curves)})", linewidth=1.4,
                        linestyle=_STYLES[k % len(_STYLES)], marker=_MARKERS[k % len(_MARKERS)], markevery=max(1, len(curve) // 8))
            ax.set_xlabel("model call")
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_title(env, fontsize=10)
            if series:
                ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(0.0, -0.24), ncol=1)
        axes[0][0].set_ylabel(ylabel)
        fig.suptitle(ylabel.capitalize() + " per model call", fontsize=11)
        fig.tight_layout()
        fig.savefig(out / name, dpi=110, bbox_inches="tight")
        plt.close(fig)
    return list(PLOTS)


def load_metrics(out: Path) -> dict[str, Any]:
    """``metrics.json`` of a run folder, rebuilt from ``traces.jsonl`` when missing or corrupt."""
    path = out / "metrics.json"
    if path.exists():
        try:
            data = json.loads(path.read_text("utf-8"))
            if isinstance(data, dict) and isinstance(data.get("episodes"), list):
                return data
        except (OSError, ValueError):
            pass
    traces = out / "traces.jsonl"
    if not traces.exists():
        if not out.is_dir():
            raise UserError(f"{out} is not a run folder: pass the --out folder of `evoharness run`")
        raise UserError(f"{out} holds neither metrics.json nor traces.jsonl: pass the --out folder of `evoharness run`")
    rows = [episode_metrics(t) for t in read_traces(traces)]
    data = {"note": "Metrics rebuilt from traces.jsonl.", "skipped": [], "summary": summarize(rows), "episodes": rows}
    path.write_text(json.dumps(data, indent=1), "utf-8")
    return data


def write_report(folder: str | os.PathLike[str]) -> Path:
    """(Re)write ``report.md`` and the PNG plots of a run folder; returns the report's path."""
    out = Path(folder)
    data = load_metrics(out)
    rows = data.get("episodes", [])
    summary = summarize(rows) if rows else []
    plots = _plots(rows, summary, out) if rows else []
    lines = ["# evoharness run", ""]
    if data.get("note"):
        lines += [data["note"], ""]
    lines += ["| env | policy | harness | framework | episodes | success | steps | invalid | track/commit/recall/note | prompt tokens/step (mean, max) | wall s |",
              "|---|---|---|---|---:|---:|---:|---:|---|---|---:|"]
    for s in summary:
        m = s["mean_meta_actions"]
        lines.append(
            f"| {s['env']} | {s['policy']} | {s['harness']} | {s['framework']} | {s['episodes']} | {s['success_rate']:.0%} | "
            f"{s['mean_steps']:.1f} | {s['mean_invalid_actions']:.1f} | {m['track']:.1f}/{m['commit']:.1f}/{m['recall']:.1f}/{m['note']:.1f} | "
            f"{s['mean_prompt_tokens_per_step']:.0f}, {s['max_prompt_tokens']} | {s['mean_wall_time_s']:.1f} |")
    lines.append("")
    for line in data.get("skipped") or []:
        lines.append(f"- skipped {line}")
    if data.get("skipped"):
        lines.append("")
    if plots:
        lines += [f"![{p[:-4].replace('_', ' ')}]({p})" for p in plots]
    else:
        lines.append("Plots need matplotlib: `pip install 'evoharness-bpe[run]'`, then `evoharness report " + str(out) + "`.")
    report = out / "report.md"
    report.write_text("\n".join(lines) + "\n", "utf-8")
    return report
