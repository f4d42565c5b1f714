"""How far GRPO's skip exploration moves a policy, without playing a single continuation.

    python bench/consulting_probe.py runs/miniature --play-skips > skips.md
    python bench/skip_calibration.py runs/miniature skips.md --lr 2e-4 --steps 6

The groups GRPO would see under ``--grpo-skip-samples 1`` with ``--grpo-generations 4``: at each
consulting state (``grpo-states.json``), three samples that consult as the recorded episode did
and one skip (its next environment action). Rewards come from the forced-skip table
(`consulting_probe.py --play-skips`): a consult scores the recorded episode (success, its
meta-actions), a skip what its forced continuation scored, both with the cost reward at λ 0.03.
The script takes `--steps` Adam steps at a constant `--lr` on GRPO's loss (group-normalised
advantages, token-mean, temperature 1.3, `--states` states a step) on the SFT adapter, then prints
P(skip) at every state (as `consulting_probe.py` does), split by whether the skip succeeded there.
A learning rate for the real run: one that raises P(skip) where skipping pays, and not elsewhere.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import time
from pathlib import Path


ROW = re.compile(r"\| (\d+), (\d+) \| \w+ \| \w+ \| (\d) \| (\d+) \((\d+)\) \|")


def forced_skips(table: Path) -> dict[tuple[int, int], tuple[int, int, int]]:
    """(seed, call) → (skip succeeded, its meta-actions, the recorded episode's) from the probe's table."""
    rows = (ROW.match(line) for line in table.read_text("utf-8").splitlines())
    return {(int(m[1]), int(m[2])): (int(m[3]), int(m[4]), int(m[5])) for m in rows if m}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("skips", type=Path, help="the output of consulting_probe.py RUN --play-skips")
    parser.add_argument("--lr", type=float, default=2e-4)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--states", type=int, default=5, help="states per step")
    parser.add_argument("--lam", type=float, default=0.03)
    args = parser.parse_args()

    import torch

    from evoharness_bpe import read_traces
    from evoharness_bpe_training.exploration import completion_text, skip_action
    from evoharness_bpe_training.grpo import CHAT_TEMPLATE_KWARGS
    from evoharness_bpe_training.reproduce import _base_model, _load_trained
    from evoharness_bpe_training.reproduce_config import resume_config
    from evoharness_bpe_training.reproduce_episodes import policy_for
    from consulting_probe import skip_probability, tool_logprobs

    config = resume_config(args.run)
    base, tokenizer = _base_model(config, args.run, None)
    model = _load_trained(base, args.run / "sft" / "model")
    prefill = policy_for(model, tokenizer, config).prefill

    def completion(reply: dict) -> str:  # as GRPO trains on it
        return completion_text(tokenizer, reply, prefill, CHAT_TEMPLATE_KWARGS)

    states = json.loads((args.run / "grpo-states.json").read_text("utf-8"))
    episodes = {int(t.metadata["seed"]): t for t in read_traces(args.run / "grpo-states.jsonl")}
    table = forced_skips(args.skips)
    groups = []
    for state in states:
        trace = episodes[int(state["seed"])]
        succeeded, meta, recorded = table[int(state["seed"]), int(state["position"])]
        rewards = torch.tensor([1 - args.lam * recorded] * 3 + [succeeded - args.lam * meta])
        advantages = (rewards - rewards.mean()) / (rewards.std() + 1e-4)
        texts = [completion(trace.model_calls[state["position"]].response)] * 3
        texts.append(completion(skip_action(trace, int(state["position"]))))
        groups.append((state, texts, advantages))

    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=args.lr, weight_decay=0.0)
    order = torch.randperm(len(groups), generator=torch.Generator().manual_seed(config.seed)).tolist()
    started = time.perf_counter()
    model.train()
    for step in range(args.steps):
        batch = [groups[order[(step * args.states + i) % len(groups)]] for i in range(args.states)]
        weights: dict[tuple[str, str], float] = {}
        for state, texts, advantages in batch:
            for text, advantage in zip(texts, advantages.tolist()):
                weights[state["prompt"], text] = weights.get((state["prompt"], text), 0.0) + advantage
        tokens = sum(len(tokenizer(text, add_special_tokens=False)["input_ids"]) for _, texts, _ in batch for text in texts)
        optimizer.zero_grad()
        for (prompt, text), advantage in weights.items():
            prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
            completion_ids = tokenizer(text, add_special_tokens=False)["input_ids"]
            logits = model(input_ids=torch.tensor([prompt_ids + completion_ids])).logits[0, len(prompt_ids) - 1:-1].float()
            logp = torch.log_softmax(logits / 1.3, -1).gather(1, torch.tensor(completion_ids)[:, None]).sum()
            (-advantage * logp / tokens).backward()
        optimizer.step()
        print(f"step {step + 1}: {time.perf_counter() - started:.0f} s", flush=True)
    model.eval()
    pays, fails = [], []
    print("| state (seed, call) | recorded | forced skip succeeded | P(skip) at T=1 |")
    print("|---|---|---|---|")
    for state in states:
        probability = skip_probability(tool_logprobs(model, tokenizer, state["prompt"]), 1.0)
        succeeded = table[int(state["seed"]), int(state["position"])][0]
        (pays if succeeded else fails).append(probability)
        print(f"| {state['seed']}, {state['position']} | {state['called']} | {bool(succeeded)} | {probability:.4f} |")
    print(f"\nlr {args.lr} (constant), {args.steps} steps of {args.states} states: P(skip) where the skip succeeds: median "
          f"{statistics.median(pays):.3f}, min {min(pays):.3f}; where it fails: median {statistics.median(fails):.3f}, "
          f"max {max(fails):.3f}")


if __name__ == "__main__":
    main()
