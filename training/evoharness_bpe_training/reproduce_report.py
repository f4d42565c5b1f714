"""The reproduction's verdicts and report: a table per stage and difficulty, the targets, plots."""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["targets", "write_report"]

_META = ("track", "commit", "recall", "note")


def _level(results: list[dict[str, Any]], stage: str, level: str) -> dict[str, Any] | None:
    for result in results:
        if result["stage"] == stage:
            return result["levels"].get(level)
    return None


def targets(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The three effects the method predicts, each with the figures it was judged on.

    (a) success after SFT ≥ raw + 0.50 at difficulty 1; (b) after GRPO, meta-action calls per
    episode ≤ 0.7× SFT's with success within 0.05 of SFT's (difficulty 1); (c) for the final
    policy, meta-action calls per environment step higher at difficulty 2 than at 1.

    (b) and (c) compare how policies that do the task consult: a policy with no success where it
    is judged (SFT's for (b), the final one at either difficulty for (c)) is not judged, and the
    target counts as unmet with the reason in ``measured``.
    """
    verdicts = []
    raw, sft, grpo = (_level(results, s, "1") for s in ("raw", "sft", "grpo"))
    if raw and sft:
        verdicts.append({"target": "(a) success after SFT ≥ raw + 50 points (difficulty 1)",
                         "measured": f"raw {raw['success']:.2f}, SFT {sft['success']:.2f}",
                         "met": sft["success"] >= raw["success"] + 0.5})
    if sft and grpo:
        ratio = grpo["meta_calls"] / sft["meta_calls"] if sft["meta_calls"] else float("inf")
        verdicts.append({"target": "(b) GRPO meta-calls/episode ≤ 0.7× SFT, success within 5 points (difficulty 1)",
                         "measured": f"{ratio:.2f}× ({grpo['meta_calls']:.1f} vs {sft['meta_calls']:.1f}); success "
                                     f"{grpo['success']:.2f} vs {sft['success']:.2f}",
                         "met": ratio <= 0.7 and grpo["success"] >= sft["success"] - 0.05})
        _unjudged(verdicts[-1], sft["success"] > 0, "the SFT policy succeeds in no episode")
    final = next((s for s in ("grpo", "sft") if _level(results, s, "1") and _level(results, s, "2")), "grpo" if grpo else "sft")
    one, two = _level(results, final, "1"), _level(results, final, "2")
    if one and two:
        verdicts.append({"target": f"(c) meta-calls per env step higher at difficulty 2 than at 1 ({final} policy)",
                         "measured": f"d1 {one['meta_per_env_step']:.3f}, d2 {two['meta_per_env_step']:.3f}",
                         "met": two["meta_per_env_step"] > one["meta_per_env_step"]})
        _unjudged(verdicts[-1], one["success"] > 0 and two["success"] > 0, f"the {final} policy succeeds in no episode at a difficulty")
    return verdicts


def _unjudged(verdict: dict[str, Any], judged: bool, reason: str) -> None:
    """Mark `verdict` unmet when the policies it compares never did the task."""
    if not judged:
        verdict["measured"] += f" (not judged: {reason})"
        verdict["met"] = False


def write_report(summary: dict[str, Any], out: Path) -> Path:
    """``report.md`` with the table, the verdicts and the plots (PNG files beside it)."""
    results = summary["results"]
    smoke = summary["config"].get("eval_episodes", 0) < 5
    lines = ["# Miniature reproduction" + (" (a smoke test of the pipeline, not a result)" if smoke else ""), "",
             f"Policy `{summary['config']['model']}`, environment `{summary['config']['env']}`, harness `bpe`, "
             f"{summary['config']['eval_episodes']} held-out episodes per stage and difficulty; wall time "
             f"{summary['wall_s']:.0f} s.", "",
             *_stage_lines(summary),
             "| stage | difficulty | success | score | meta-calls/ep | track | commit | recall | note | env steps/ep "
             "| meta/step | harness tokens/ep | invalid/ep | prompt tokens mean / max |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for result in results:
        for level, v in result["levels"].items():
            by = v["meta_by_action"]
            lines.append(f"| {result['stage']} | {level} | {v['success']:.2f} | {v['score']:.2f} | {v['meta_calls']:.1f} | "
                         + " | ".join(f"{by.get(a, 0):.1f}" for a in _META)
                         + f" | {v['env_steps']:.1f} | {v['meta_per_env_step']:.3f} | {v['harness_tokens']:.0f} | "
                         f"{v['invalid_actions']:.1f} | {v['prompt_tokens_mean']:.0f} / {v['prompt_tokens_max']} |")
    lines += [line for problem in summary.get("budget_problems") or [] for line in ("", f"Budget: {problem}.")]
    lines += _exploration_lines(summary.get("grpo_curve") or [])
    lines += _selection_lines(summary.get("grpo_selection") or [])
    lines += ["", "## Targets", "", "| target | measured | met |", "|---|---|---|"]
    lines += [f"| {t['target']} | {t['measured']} | {'yes' if t['met'] else 'no'} |" for t in summary["targets"]]
    plots = _plots(summary, out)
    if plots:
        lines += ["", "## Plots", ""] + [f"![{p.stem}]({p.name})" for p in plots]
    path = out / "report.md"
    path.write_text("\n".join(lines) + "\n", "utf-8")
    return path


def exploration(curve: list[dict[str, Any]]) -> dict[str, Any] | None:
    """What GRPO's samples did in states where the recorded policy called a meta-action: how many
    called one too, how many acted on the environment instead (skipped consulting), and how many of
    those skips still succeeded; None when the log does not say what the states called. Skips put
    in the groups by guided exploration (``forced``) are counted apart from sampled ones."""
    consulting = [r for r in curve if r.get("state_called") in _META]
    if not consulting:
        return None
    forced = [r for r in consulting if r.get("forced")]
    sampled = [r for r in consulting if not r.get("forced")]
    skips = [r for r in sampled if r.get("action") and r["action"] not in _META]
    seen = {"samples": len(sampled), "meta": sum(1 for r in sampled if r.get("action") in _META),
            "skips": len(skips), "successful_skips": sum(1 for r in skips if r.get("success"))}
    if forced:
        seen |= {"forced_skips": len(forced), "successful_forced_skips": sum(1 for r in forced if r.get("success"))}
    return seen


def _exploration_lines(curve: list[dict[str, Any]]) -> list[str]:
    seen = exploration(curve)
    if seen is None:
        return []
    return ["", f"GRPO samples in states where the SFT policy consulted its harness: {seen['samples']}; "
                f"{seen['meta']} called a meta-action too, {seen['skips']} acted on the environment instead "
                f"({seen['successful_skips']} of them still succeeded), the rest called nothing valid."] + (
        [f"Skips put in the groups (guided exploration): {seen['forced_skips']}, {seen['successful_forced_skips']} of them "
         f"succeeded."] if "forced_skips" in seen else [])


def _selection_lines(selection: list[dict[str, Any]]) -> list[str]:
    """The validations of --grpo-select-every, the kept update marked."""
    if not selection:
        return []
    kept = selection[-1]["best_step"]
    lines = ["", f"GRPO's validations ({selection[0].get('episodes', '?')} greedy episodes each, scored with GRPO's reward); "
                 f"the stage kept the weights of update {kept}:", "",
             "| after update | score | success | meta-calls/ep | kept |", "|---|---|---|---|---|"]
    return lines + [f"| {r['step']} | {r['score']:.3f} | {r.get('success', float('nan')):.2f} | {r.get('meta_calls', float('nan')):.1f} | "
                    f"{'yes' if r['step'] == kept else ''} |" for r in selection]


def _stage_lines(summary: dict[str, Any]) -> list[str]:
    """Wall time of every stage and the machine's load, when the run recorded them."""
    walls = summary.get("stage_wall_s") or {}
    if not walls:
        return []
    machine = summary.get("machine") or {}
    lines = ["| stage | wall time |", "|---|---|"] + [f"| {stage} | {wall / 60:.1f} min |" for stage, wall in walls.items()]
    if machine:
        device = f" on {machine['device']}" if machine.get("device", "cpu") != "cpu" else ""
        lines += ["", f"Precision {machine.get('precision')}{device}, {machine.get('threads')} torch threads, load average "
                      f"{machine.get('load_at_start')} at the start and {machine.get('load_at_end')} at the end."]
    return lines + [""]


def _plots(summary: dict[str, Any], out: Path) -> list[Path]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    results = summary["results"]
    stages = [r["stage"] for r in results]
    levels = sorted({level for r in results for level in r["levels"]})
    written = []

    def bars(key: str, title: str, ylabel: str, name: str, fmt: str) -> None:
        fig, ax = plt.subplots(figsize=(6.5, 3.6))
        width = 0.8 / max(1, len(levels))
        for i, level in enumerate(levels):
            values = [r["levels"].get(level, {}).get(key, 0.0) for r in results]
            xs = [n + i * width for n in range(len(stages))]
            drawn = ax.bar(xs, values, width, label=f"difficulty {level}")
            ax.bar_label(drawn, labels=[format(v, fmt) for v in values], fontsize=8)  # 0 stays visible as a label
        ax.set_xticks([n + width * (len(levels) - 1) / 2 for n in range(len(stages))], stages)
        ax.set_title(title)
        ax.set_ylabel(ylabel)
        top = max([r["levels"].get(level, {}).get(key, 0.0) for r in results for level in levels] + [0.0])
        ax.set_ylim(0.0, 1.05 if key == "success" else max(top * 1.15, 1e-9) if top > 0 else 1.0)  # rates and counts start at 0
        ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
        fig.tight_layout()
        path = out / name
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)

    n = summary["config"]["eval_episodes"]
    bars("success", f"Success (mean of {n} episodes)", "success rate", "success.png", ".2f")
    bars("harness_tokens", f"Harness tokens per episode (mean of {n})", "tokens", "harness_tokens.png", ".0f")
    bars("meta_per_env_step", f"Meta-action calls per environment step (mean of {n})", "calls / step", "meta_per_step.png", ".2f")

    fig, ax = plt.subplots(figsize=(6.5, 3.6))
    labels = [f"{r['stage']}\nd{level}" for r in results for level in levels]
    bottom = [0.0] * len(labels)
    for action in _META:
        values = [r["levels"].get(level, {}).get("meta_by_action", {}).get(action, 0.0) for r in results for level in levels]
        ax.bar(range(len(labels)), values, bottom=bottom, label=action)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    for x, total in enumerate(bottom):
        ax.annotate(f"{total:.1f}", (x, total), ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(labels)), labels, fontsize=8)
    ax.set_title(f"Meta-action calls per episode by kind (mean of {n})")
    ax.set_ylabel("calls")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    fig.tight_layout()
    path = out / "meta_by_kind.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    written.append(path)

    curve = [r for r in summary.get("grpo_curve") or [] if not r.get("forced")]  # the policy's own samples
    if curve:
        steps = sorted({r["step"] for r in curve})
        mean = lambda key, s: sum(r[key] for r in curve if r["step"] == s) / max(1, sum(1 for r in curve if r["step"] == s))  # noqa: E731
        fig, left = plt.subplots(figsize=(8, 3.8))
        left.plot(steps, [mean("reward", s) for s in steps], "-o", markersize=3, label="reward")
        left.plot(steps, [mean("success", s) for s in steps], "--s", markersize=3, label="success")  # a one-step curve is a point
        left.set_xlabel("GRPO step")
        left.set_ylabel("reward / success")
        right = left.twinx()
        right.plot(steps, [mean("meta_calls", s) for s in steps], ":^", markersize=3, color="tab:red", label="meta-calls/episode")
        right.set_ylim(bottom=0.0)
        right.set_ylabel("meta-action calls per episode")
        selection = summary.get("grpo_selection") or []
        if selection:  # the greedy validations (--grpo-select-every), the kept update marked
            left.plot([r["step"] for r in selection], [r["success"] for r in selection], "D", markersize=5, color="tab:green",
                      label="validation success (greedy)")
            right.plot([r["step"] for r in selection], [r["meta_calls"] for r in selection], "x", markersize=6, color="tab:purple",
                       label="validation meta-calls/episode")
            left.axvline(selection[-1]["best_step"], color="grey", linewidth=0.8, linestyle="--")
        left.xaxis.get_major_locator().set_params(integer=True)
        handles = left.get_legend_handles_labels()[0] + right.get_legend_handles_labels()[0]
        left.legend(handles, [h.get_label() for h in handles], loc="upper left", bbox_to_anchor=(1.12, 1.0), fontsize=8)
        left.set_title("Cost-aware GRPO over training (mean of each step's sampled actions)", fontsize=10)
        fig.tight_layout()
        path = out / "grpo_curves.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written
