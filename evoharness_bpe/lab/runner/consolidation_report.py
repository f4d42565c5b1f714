"""The report's sections on how a run's bank changed and on episodes the infrastructure lost.

An evolving run (``--bank evolving``) records one row per consolidation window in
``metrics.json`` (``consolidation``): the edits applied by kind (add, update, merge, delete) and
those refused (unknown id, a full kind, the delete veto). The report shows them as a table and
as ``consolidation_edits.png``, stacked bars per window, one panel per combination, so a bank
that fills can be seen moving from adding entries to updating them.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from ...consolidator.window import EDIT_KINDS, REFUSALS

__all__ = ["CONSOLIDATION_PLOT", "consolidation_lines", "infrastructure_lines", "consolidation_figure"]

CONSOLIDATION_PLOT = "consolidation_edits.png"
_COLORS = {"add": "tab:green", "update": "tab:blue", "merge": "tab:purple", "delete": "tab:red",
           "unknown": "lightgray", "capacity": "tab:orange", "vetoed": "tab:brown"}


def _combo(w: dict[str, Any]) -> tuple[str, str, str, str]:
    return str(w["env"]), str(w["policy"]), str(w["harness"]), str(w["framework"])


def _active(windows: list[dict[str, Any]]) -> dict[tuple[str, str, str, str], list[dict[str, Any]]]:
    """The windows of each combination whose bank was used at all (notes, credit or entries)."""
    by_combo: dict[tuple[str, str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for w in windows:
        by_combo[_combo(w)].append(w)
    return {c: ws for c, ws in by_combo.items() if any(w["notes"] or w["credited"] or w["size"] for w in ws)}


def consolidation_figure(windows: list[dict[str, Any]]) -> Any:
    """Stacked bars of edits by kind per window, one panel per combination (None without
    matplotlib or without a used bank)."""
    active = _active(windows)
    if not active:
        return None
    try:
        import matplotlib  # noqa: PLC0415

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
        from matplotlib.ticker import MaxNLocator  # noqa: PLC0415
    except ImportError:
        return None
    fig, axes = plt.subplots(1, len(active), figsize=(4.2 * len(active) + 1.5, 3.6), squeeze=False)
    for ax, (combo, ws) in zip(axes[0], sorted(active.items())):
        xs = [int(w["window"]) + 1 for w in ws]
        bottom = [0.0] * len(ws)
        for kind in (*EDIT_KINDS, *REFUSALS):
            values = [float(w.get(kind, 0)) for w in ws]
            if not any(values):
                continue
            refused = kind in REFUSALS
            ax.bar(xs, values, bottom=bottom, color=_COLORS[kind], edgecolor="black", linewidth=0.4,
                   hatch="//" if refused else "", label=f"{kind} (refused)" if refused else kind)
            bottom = [b + v for b, v in zip(bottom, values)]
        ax.set_title(" / ".join(combo), fontsize=9)
        ax.set_xlabel("window")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel("edits")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="upper right")
    fig.suptitle("Consolidation edits by kind per window", fontsize=11)
    fig.tight_layout()
    return fig


def consolidation_lines(data: dict[str, Any], out: Path) -> list[str]:
    """The report's consolidation section (and its plot, written to `out`); empty unless evolving."""
    windows = data.get("consolidation") or []
    active = _active(windows) if isinstance(windows, list) else {}
    if not active:
        return []
    lines = ["## Bank consolidation", "",
             "The bank was frozen inside each window and consolidated when the window ended. Refused: an id that does "
             "not exist (unknown), a kind at its cap (capacity), an entry recalled too often to delete (vetoed).", "",
             "| env | policy | harness | framework | window | episodes | notes | credited | add | update | merge | delete "
             "| unknown | capacity | vetoed | entries after | fallback |",
             "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for combo, ws in sorted(active.items()):
        for w in ws:
            counts = " | ".join(str(w.get(k, 0)) for k in (*EDIT_KINDS, *REFUSALS))
            fallback = str(w.get("fallback") or "").replace("|", "/")[:80]
            lines.append(f"| {' | '.join(combo)} | {int(w['window']) + 1} | {w['episodes']} | {w['notes']} | {w['credited']} | "
                         f"{counts} | {w['size']} | {fallback} |")
    lines.append("")
    fig = consolidation_figure(windows)
    if fig is not None:
        import matplotlib.pyplot as plt  # noqa: PLC0415

        fig.savefig(out / CONSOLIDATION_PLOT, dpi=110, bbox_inches="tight")
        plt.close(fig)
        lines += [f"![consolidation edits]({CONSOLIDATION_PLOT})", ""]
    return lines


def infrastructure_lines(data: dict[str, Any]) -> list[str]:
    """The report's list of episodes that failed for infrastructure reasons (not task failures)."""
    failed = data.get("infrastructure_errors") or []
    if not isinstance(failed, list) or not failed:
        return []
    lines = ["## Infrastructure errors", "",
             f"{len(failed)} episode(s) failed because the model server did (5xx, timeout, unreachable) on every attempt. "
             "They are not in the table above and not counted as task failures; `--resume` retries them.", ""]
    for e in failed:
        lines.append(f"- {e.get('env')} / {e.get('policy')} / {e.get('harness')} / {e.get('framework')} seed {e.get('seed')}, "
                     f"{e.get('attempts')} attempt(s): {str(e.get('error', '')).replace(chr(10), ' ')[:200]}")
    return [*lines, ""]
