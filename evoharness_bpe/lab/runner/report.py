"""`report.md` and its plots from a run folder's ``metrics.json`` (matplotlib: extra ``[run]``)."""

from __future__ import annotations

import json
import os
import warnings
from collections import defaultdict
from pathlib import Path
from typing import Any

from ...exceptions import UserError
from .folder import read_run_traces
from .consolidation_report import consolidation_lines, infrastructure_lines
from .metrics import HARNESS_ORDER, episode_metrics, summarize

__all__ = ["write_report", "load_metrics", "build_figures", "PLOTS"]

PLOTS = ("success_by_harness.png", "prompt_tokens_per_step.png", "meta_actions_per_step.png")


_HATCHES = ("", "//", "..", "xx")
_STYLES = ("-", "--", ":", "-.")
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
_COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:gray",
           "tab:olive", "tab:cyan")


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


def _style(k: int) -> dict[str, Any]:
    """The k-th series' look: color, line style and marker all change, so no two of the first 40 look alike."""
    return {"color": _COLORS[k % len(_COLORS)], "linestyle": _STYLES[k % len(_STYLES)],
            "marker": _MARKERS[(k // len(_STYLES) + k) % len(_MARKERS)]}


def _episodes_note(counts: set[int]) -> str:
    if counts == {1}:
        return "1 episode"
    low, high = min(counts), max(counts)
    return f"mean of {high} episodes" if low == high else f"mean of {low}–{high} episodes"


def build_figures(rows: list[dict[str, Any]], summary: list[dict[str, Any]]) -> dict[str, Any]:
    """The report's matplotlib figures by file name (empty without matplotlib).

    Bars carry their value (``0%`` included) or ``skipped``; legends sit outside the axes, in the
    table's order (env, policy, harness none/append/bpe, framework); the line plots' x axis is the
    model call, with integer ticks, and each line says how many episodes it averages.
    """
    try:
        import matplotlib  # noqa: PLC0415

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
        from matplotlib.ticker import MaxNLocator  # noqa: PLC0415
    except ImportError:
        return {}
    figures: dict[str, Any] = {}
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
        bars = ax.bar(xs, [max(v, 0.005) for v in vals], width, label=h, hatch=_HATCHES[j % len(_HATCHES)],
                      color=_COLORS[j % len(_COLORS)], edgecolor="black", linewidth=0.5)
        ax.bar_label(bars, labels=labels, fontsize=6, padding=1)
    ax.set_xticks([i + width * (len(harnesses) - 1) / 2 for i in range(len(groups))])
    ax.set_xticklabels(["\n".join(str(x) for x in g) for g in groups], fontsize=7)
    ax.set_xlabel("environment / policy / framework")
    ax.set_ylim(0, 1.2)
    ax.set_ylabel("success rate (mean of n episodes)")
    ax.set_title("Success by harness")
    ax.legend(title="harness", fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    figures[PLOTS[0]] = fig
    envs = sorted({str(r["env"]) for r in rows})
    curve_keys = tuple(k for k in _varying(rows) if k != "env") or ("harness",)
    # the series in the table's order; one look per series, the same in every panel
    table = [_label(s, curve_keys) for s in summary]
    labels_in_order = list(dict.fromkeys(table))
    for name, field, ylabel, cumulative in (
        (PLOTS[1], "prompt_tokens_per_step", "prompt tokens", False),
        (PLOTS[2], "meta_actions_per_step", "meta-action calls (cumulative)", True),
    ):
        height = max(3.8, 0.24 * len(labels_in_order) + 1.2)
        fig, axes = plt.subplots(1, len(envs), figsize=(4.2 * len(envs) + 1, height), squeeze=False)
        handles: dict[str, Any] = {}
        counts: dict[str, set[int]] = defaultdict(set)
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
            for label in labels_in_order:
                if label not in series:
                    continue
                curves = series[label]
                curve = _mean_curve(curves, hold=cumulative)
                (line,) = ax.plot(range(1, len(curve) + 1), curve, linewidth=1.4, markevery=max(1, len(curve) // 8),
                                  **_style(labels_in_order.index(label)))
                handles.setdefault(label, line)
                counts[label].add(len(curves))
            ax.set_xlabel("model call")
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_title(env, fontsize=10)
        axes[0][0].set_ylabel(ylabel)
        order = [label for label in labels_in_order if label in handles]
        if order:
            axes[0][-1].legend([handles[label] for label in order],
                               [f"{label} ({_episodes_note(counts[label])})" for label in order],
                               title=" / ".join(curve_keys), fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))
        fig.suptitle(ylabel.capitalize() + " per model call", fontsize=11)
        fig.tight_layout()
        figures[name] = fig
    return figures


def _plots(rows: list[dict[str, Any]], summary: list[dict[str, Any]], out: Path) -> list[str]:
    figures = build_figures(rows, summary)
    if not figures:
        return []
    import matplotlib.pyplot as plt  # noqa: PLC0415

    for name, fig in figures.items():
        fig.savefig(out / name, dpi=110, bbox_inches="tight")
        plt.close(fig)
    return list(figures)


# What the report reads of each episode row of metrics.json, and the kind of JSON value it must be.
_ROW_FIELDS = {
    "env": "text", "policy": "text or null", "harness": "text", "framework": "text", "success": "true or false",
    "steps": "a whole number", "invalid_actions": "a whole number", "meta_actions": "an object of counts",
    "meta_actions_per_step": "a list of counts", "prompt_tokens_per_step": "a list of counts",
    "wall_time_s": "a number or null",
}


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _fits(value: Any, kind: str) -> bool:
    checks = {
        "text": lambda v: isinstance(v, str),
        "text or null": lambda v: v is None or isinstance(v, str),
        "true or false": lambda v: isinstance(v, bool),
        "a whole number": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "an object of counts": lambda v: isinstance(v, dict) and all(_is_number(x) for x in v.values()),
        "a list of counts": lambda v: isinstance(v, list) and all(_is_number(x) for x in v),
        "a number or null": lambda v: v is None or _is_number(v),
    }
    return checks[kind](value)


def _metrics_problem(data: Any) -> str | None:
    """What makes parsed ``metrics.json`` content unusable for the report, or None."""
    if not isinstance(data, dict):
        return f"a JSON {type(data).__name__}, not an object"
    rows = data.get("episodes")
    if not isinstance(rows, list):
        return "no 'episodes' list"
    if not isinstance(data.get("note"), str | type(None)):
        return "'note' is not text"
    skipped = data.get("skipped")
    if skipped is not None and not (isinstance(skipped, list) and all(isinstance(x, str) for x in skipped)):
        return "'skipped' is not a list of texts"
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            return f"episode {i} is not an object"
        for key, kind in _ROW_FIELDS.items():
            if key not in row:
                return f"episode {i} has no {key!r}"
            if not _fits(row[key], kind):
                return f"episode {i}: {key!r} is not {kind}"
    return None


def load_metrics(out: Path) -> dict[str, Any]:
    """``metrics.json`` of a run folder, checked; rebuilt from ``traces.jsonl`` when missing or unusable.

    A rebuild of an unusable file says why in a warning. Without ``traces.jsonl`` to rebuild from,
    an unusable file is a `UserError` that says what is wrong with it.
    """
    path = out / "metrics.json"
    problem = None
    if path.exists():
        try:
            data = json.loads(path.read_text("utf-8"))
        except (OSError, ValueError) as exc:
            problem = f"not valid JSON ({getattr(exc, 'strerror', None) or exc})"
        else:
            problem = _metrics_problem(data)
            if problem is None:
                return data
    traces = out / "traces.jsonl"
    if not traces.exists():
        if not out.is_dir():
            raise UserError(f"{out} is not a run folder: pass the --out folder of `evoharness run`")
        if problem is not None:
            raise UserError(f"{path} is unusable: {problem[:200]}; and there is no traces.jsonl to rebuild it from")
        raise UserError(f"{out} holds neither metrics.json nor traces.jsonl: pass the --out folder of `evoharness run`")
    rows = [episode_metrics(t) for t in read_run_traces(traces)]
    if problem is not None:
        warnings.warn(f"{path} is unusable ({problem[:200]}): rebuilt it from traces.jsonl", UserWarning, stacklevel=2)
    note = "Metrics rebuilt from traces.jsonl." + (f" (metrics.json was unusable: {problem[:200]}.)" if problem else "")
    data = {"note": note, "skipped": [], "summary": summarize(rows), "episodes": rows}
    path.write_text(json.dumps(data, indent=1), "utf-8")
    return data


def _ablation_table(summary: list[dict[str, Any]]) -> list[str]:
    """The reference's ablation table: success of full / −Belief / −Progress / −Experience per
    environment, policy, harness and framework (only when the run switched parts off)."""
    from .metrics import ABLATIONS  # noqa: PLC0415

    cells: dict[tuple[Any, ...], dict[str, dict[str, Any]]] = defaultdict(dict)
    for s in summary:
        base, _, ablated = str(s["harness"]).partition("-")
        cells[(s["env"], s["policy"], base, s["framework"])][f"-{ablated}" if ablated else "full"] = s
    rows = {k: v for k, v in cells.items() if len(v) > 1 or "full" not in v}
    if not rows:
        return []
    names = {"full": "full", "-belief": "−Belief", "-progress": "−Progress", "-experience": "−Experience"}
    lines = ["## Ablations", "", "Success rate (mean model calls) with one part of the workspace switched off.", "",
             "| env | policy | harness | framework | " + " | ".join(names[a] for a in ABLATIONS) + " |",
             "|---|---|---|---|" + "---:|" * len(ABLATIONS)]
    for (env, policy, base, framework), by in sorted(rows.items(), key=lambda kv: tuple(map(str, kv[0]))):
        shown = [f"{by[a]['success_rate']:.0%} ({by[a]['mean_model_calls']:.1f})" if a in by else "–" for a in ABLATIONS]
        lines.append(f"| {env} | {policy} | {base} | {framework} | " + " | ".join(shown) + " |")
    return [*lines, ""]


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
    lines += ["| env | policy | harness | framework | episodes | success | env steps | model calls | invalid | track/commit/recall/note | prompt tokens/model call (mean, max) | wall s |",
              "|---|---|---|---|---:|---:|---:|---:|---:|---|---|---:|"]
    for s in summary:
        m = s["mean_meta_actions"]
        lines.append(
            f"| {s['env']} | {s['policy']} | {s['harness']} | {s['framework']} | {s['episodes']} | {s['success_rate']:.0%} | "
            f"{s['mean_steps']:.1f} | {s['mean_model_calls']:.1f} | {s['mean_invalid_actions']:.1f} | {m['track']:.1f}/{m['commit']:.1f}/{m['recall']:.1f}/{m['note']:.1f} | "
            f"{s['mean_prompt_tokens_per_step']:.0f}, {s['max_prompt_tokens']} | {s['mean_wall_time_s']:.1f} |")
    lines.append("")
    lines += _ablation_table(summary)
    lines += infrastructure_lines(data)
    lines += consolidation_lines(data, out)
    for line in data.get("skipped") or []:
        lines.append(f"- skipped {line}")
    if data.get("skipped"):
        lines.append("")
    if plots:
        lines += ["Means over the episodes of each row. The plots' x axis is the model call (one prompt, one reply); "
                  "an environment step is one action the environment carried out.", ""]
        lines += [f"![{p[:-4].replace('_', ' ')}]({p})" for p in plots]
    else:
        lines.append("Plots need matplotlib: `pip install 'evoharness-bpe[run]'`, then `evoharness report " + str(out) + "`.")
    report = out / "report.md"
    report.write_text("\n".join(lines) + "\n", "utf-8")
    return report
