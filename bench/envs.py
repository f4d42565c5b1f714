"""Environments benchmark: expert success, prompt tokens by harness, the embedded model's raw success.

    python bench/envs.py [--seeds 50] [--parts expert,tokens,compact,model] [--figures docs/figures]

* expert — the scripted expert on `--seeds` seeds of every built-in environment at every
  difficulty (bpe harness; TextWorld on `--tw-seeds` tw-make games per difficulty, each made
  offline in a few seconds);
* tokens — prompt tokens per step of `crm-migration` for 20, 200 and 2,000 records under the
  three harnesses (the expert acts, so every harness runs the same task): the ratio bpe / none at
  step 100 and the bpe curve's growth, measured against `none` in the same run; writes a plot;
* model — the embedded SmolLM2-135M-Instruct, untrained, on difficulty 1 of every environment
  under the three harnesses (success, valid tool calls).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from evoharness_bpe.lab.envs import make_env
from evoharness_bpe.lab.frameworks import EpisodeConfig
from evoharness_bpe.lab.policies import ExpertPolicy
from evoharness_bpe.lab.runner.core import run_episode

ENVS = ("crm-migration", "compliance-review", "alfworld", "textworld")


def expert_part(seeds: int, tw_seeds: int) -> None:
    print("## expert success (bpe harness)")
    print("| env | difficulty | seeds | success | mean env steps | mean meta-actions | s/episode |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name in ENVS:
        for difficulty in (1, 2, 3):
            env = make_env(name, difficulty)
            n = tw_seeds if name == "textworld" else seeds
            wins, steps, metas = 0, [], []
            started = time.perf_counter()
            for seed in range(n):
                trace = run_episode(env, ExpertPolicy(env), None, EpisodeConfig(harness="bpe", seed=seed, max_steps=env.step_budget))
                wins += bool(trace.outcome.success)
                steps.append(trace.outcome.info["steps"])
                metas.append(len(trace.meta_actions))
            getattr(env, "close", lambda: None)()
            per = (time.perf_counter() - started) / n
            print(f"| {name} | {difficulty} | {n} | {wins / n:.0%} | {statistics.fmean(steps):.1f} | {statistics.fmean(metas):.1f} | {per:.2f} |", flush=True)


class _CountedExpert(ExpertPolicy):
    """The expert, with each prompt counted as SmolLM2 sees it: its tokenizer over the chat
    template fine-tuning renders (Qwen3's, with the tool section)."""

    tokenizer = None

    def count_prompt_tokens(self, messages, tools):
        chat = [{**m, "content": m.get("content") or ""} for m in messages]
        text = self.tokenizer.apply_chat_template(chat, tools=tools or None, add_generation_prompt=True, tokenize=False,
                                                  enable_thinking=False)
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])


def _smollm2_tokenizer():
    from transformers import AutoTokenizer

    from evoharness_bpe.lab.policies.transformers import EMBEDDED_GGUF, embedded_model_dir
    from evoharness_bpe_training.tiny import qwen3_chat_template

    tokenizer = AutoTokenizer.from_pretrained(embedded_model_dir(), gguf_file=EMBEDDED_GGUF)
    tokenizer.chat_template = qwen3_chat_template()
    return tokenizer


def tokens_part(figures: Path | None) -> None:
    print("\n## crm-migration prompt tokens per step (expert actions; SmolLM2 tokens, chat template and tool section included)")
    _CountedExpert.tokenizer = _smollm2_tokenizer()
    curves: dict[tuple[int, str], list[int]] = {}
    for records, difficulty in ((20, 1), (200, 2), (2000, 3)):
        for harness in ("none", "append", "bpe"):
            env = make_env("crm-migration", difficulty, records=records)
            trace = run_episode(env, _CountedExpert(env), None, EpisodeConfig(harness=harness, seed=0, max_steps=env.step_budget))
            assert trace.outcome.success and trace.metadata["prompt_token_source"] == "exact"
            curves[(records, harness)] = trace.metadata["prompt_tokens"]
    print("| records | harness | model calls | tokens at step 10 | at step 100 | max | mean |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    for (records, harness), c in curves.items():
        at = lambda i: str(c[i - 1]) if len(c) >= i else "—"  # noqa: E731
        print(f"| {records} | {harness} | {len(c)} | {at(10)} | {at(100)} | {max(c)} | {statistics.fmean(c):.0f} |")
    none, bpe, append = (curves[(2000, h)] for h in ("none", "bpe", "append"))
    print(f"\nstep 100 of the 2,000-record episode: bpe / none = {bpe[99] / none[99]:.3f} (target <= 0.2), "
          f"append / none = {append[99] / none[99]:.3f}")
    late = bpe[len(bpe) // 2 :]
    print(f"bpe flatness: max tokens 20 / 200 / 2,000 records = {max(curves[(20, 'bpe')])} / {max(curves[(200, 'bpe')])} / {max(bpe)}; "
          f"second half of the 2,000-record episode: {min(late)}..{max(late)} tokens ({len(bpe)} calls); "
          f"none grows to {max(none)}")
    if figures is not None:
        _plot_curves(curves, figures)


def compact_part() -> None:
    """Every difficulty-1 `bpe` prompt against the 1,024-token target, by spec style, window and template."""
    _CountedExpert.tokenizer = _CountedExpert.tokenizer or _smollm2_tokenizer()
    print("\n### compact style, bpe harness, difficulty 1 (seeds 0-19): every prompt against the 1,024 target")
    print("| spec style | window | dashboard tokens | chat template | min | mean | max | prompts over 1,024 |")
    print("|---|---:|---:|---|---:|---:|---:|---:|")
    from evoharness_bpe_training.student import student_chat_template
    from evoharness_bpe_training.tiny import qwen3_chat_template

    templates = {"Qwen3 (JSON tool specs)": qwen3_chat_template(), "compact (a signature line per tool)": student_chat_template()}
    for style, window, dashboard, template in (("full", 12, 600, "Qwen3 (JSON tool specs)"), ("compact", 12, 600, "Qwen3 (JSON tool specs)"),
                                               ("compact", 4, 120, "Qwen3 (JSON tool specs)"),
                                               ("compact", 4, 120, "compact (a signature line per tool)")):
        _CountedExpert.tokenizer.chat_template = templates[template]
        tokens: list[int] = []
        for seed in range(20):
            env = make_env("crm-migration", 1)
            trace = run_episode(env, _CountedExpert(env), None, EpisodeConfig(
                seed=seed, spec_style=style, window=window, dashboard_tokens=dashboard))
            tokens += trace.metadata["prompt_tokens"]
        over = sum(t > 1024 for t in tokens)
        print(f"| {style} | {window} | {dashboard} | {template} | {min(tokens)} | {statistics.fmean(tokens):.0f} | {max(tokens)} | {over} of {len(tokens)} |")


def _plot_curves(curves: dict[tuple[int, str], list[int]], figures: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figures.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(7, 4))
    styles = {"none": "-", "append": ":", "bpe": "--"}
    colors = {20: "tab:green", 200: "tab:orange", 2000: "tab:blue"}
    for (records, harness), c in curves.items():
        ax.plot(range(1, len(c) + 1), c, styles[harness], color=colors[records], label=f"{records} records, {harness}", linewidth=1.3)
    ax.set_yscale("log")
    ax.set_xlabel("step (model call)")
    ax.set_ylabel("prompt tokens (log)")
    ax.set_title("crm-migration: prompt tokens per step")
    ax.legend(fontsize=7, ncol=3)
    fig.tight_layout()
    fig.savefig(figures / "crm_prompt_tokens_per_step.png", dpi=110)
    print(f"wrote {figures / 'crm_prompt_tokens_per_step.png'}")


def model_part(seeds: int, max_steps: int, envs: list[str]) -> None:
    from evoharness_bpe.lab.policies import TransformersPolicy

    print(f"\n## embedded SmolLM2-135M-Instruct, raw ({seeds} seed(s), {max_steps} model calls, difficulty 1)")
    policy = TransformersPolicy()
    print("| env | harness | success | env steps | invalid actions | calls with a valid tool call | s/call |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for name in envs:
        env = make_env(name, 1)
        for harness in ("none", "append", "bpe"):
            wins = steps = invalid = calls = valid = 0
            started = time.perf_counter()
            for seed in range(seeds):
                trace = run_episode(env, policy, None, EpisodeConfig(harness=harness, seed=seed, max_steps=max_steps))
                wins += bool(trace.outcome.success)
                steps += trace.outcome.info["steps"]
                invalid += trace.outcome.info["invalid_actions"]
                calls += len(trace.model_calls)
                valid += sum(bool(c.response.get("tool_calls")) for c in trace.model_calls)
            per = (time.perf_counter() - started) / max(1, calls)
            print(f"| {name} | {harness} | {wins}/{seeds} | {steps} | {invalid} | {valid}/{calls} | {per:.1f} |", flush=True)
        getattr(env, "close", lambda: None)()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=50)
    parser.add_argument("--tw-seeds", type=int, default=10)
    parser.add_argument("--model-seeds", type=int, default=1)
    parser.add_argument("--model-steps", type=int, default=8)
    parser.add_argument("--model-envs", default=",".join(ENVS))
    parser.add_argument("--parts", default="expert,tokens,compact,model")
    parser.add_argument("--figures", type=Path, default=Path("docs/figures"))
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    if "expert" in parts:
        expert_part(args.seeds, args.tw_seeds)
    if "compact" in parts:
        compact_part()
    if "tokens" in parts:
        tokens_part(args.figures)
    if "model" in parts:
        model_part(args.model_seeds, args.model_steps, args.model_envs.split(","))


if __name__ == "__main__":
    main()
