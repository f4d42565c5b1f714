"""How likely a trained policy is to skip consulting its harness where it consulted.

    python bench/consulting_probe.py runs/miniature            # the SFT policy of a reproduction run
    python bench/consulting_probe.py runs/miniature --stage grpo

Reads the run's GRPO states (``grpo-states.json``: the prompts where the SFT policy called a
meta-action, each ending with the reply's opening ``<tool_call>\\n{"name": "``) and scores every
tool name the prompt offers as the next tokens: P(tool) is the probability of the name and its
closing quote, normalised over the tools. P(skip) = the mass on environment tools. At sampling
temperature T the names are tempered as wholes (log P / T, normalised): exact for one-token
names, an estimate otherwise. GRPO can prefer a cheaper path only if its samples contain one, so
the expected skips per group (generations × P(skip)) bound what annealing can learn per update.

With ``--play-skips`` each state is also played with the skip forced: the policy's own next
environment action of that episode in place of the meta-action, then the policy plays on
greedily (GRPO's continuation, its budget included). Whether a skip still succeeds, and at how
many meta-actions, says whether exploration alone would let GRPO anneal.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import re
import statistics
from pathlib import Path

from evoharness_bpe import META_ACTIONS as META


def tool_names(prompt: str) -> list[str]:
    """The tools the prompt's tool section lists (one signature line per tool, compact template)."""
    section = prompt.split("# Tools", 1)[-1].split("Call one as", 1)[0]
    return re.findall(r"^(\w+)\(", section, flags=re.MULTILINE)


def tool_logprobs(model, tokenizer, prompt: str) -> dict[str, float]:  # noqa: ANN001 - a bench script
    """log P(name and its closing quote) as the reply's next tokens, for each tool the prompt lists."""
    import torch

    ids = tokenizer(prompt, return_tensors="pt", add_special_tokens=False)["input_ids"]
    logp = {}
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=True)
        past, last = out.past_key_values, torch.log_softmax(out.logits[0, -1].float(), -1)
        for name in tool_names(prompt):
            tokens = tokenizer(name + '"', add_special_tokens=False)["input_ids"]
            total = float(last[tokens[0]])
            if len(tokens) > 1:
                cont = model(input_ids=torch.tensor([tokens[:-1]]), past_key_values=copy.deepcopy(past), use_cache=True)
                steps = torch.log_softmax(cont.logits[0].float(), -1)
                total += sum(float(steps[i, tokens[i + 1]]) for i in range(len(tokens) - 1))
            logp[name] = total
    return logp


def skip_probability(logp: dict[str, float], temperature: float) -> float:
    """The mass on environment tools, the names tempered as wholes and normalised over the tools."""
    top = max(v / temperature for v in logp.values())
    weights = {k: math.exp(v / temperature - top) for k, v in logp.items()}
    return sum(w for k, w in weights.items() if k not in META) / sum(weights.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run", type=Path, help="a reproduction run folder with grpo-states.json")
    parser.add_argument("--stage", default="sft", choices=("sft", "grpo"))
    parser.add_argument("--temperatures", default="1.0,1.3")
    parser.add_argument("--generations", type=int, default=0, help="samples per GRPO group (default: the run's)")
    parser.add_argument("--play-skips", action="store_true", help="also play each state with the skip forced")
    args = parser.parse_args()

    from evoharness_bpe_training.reproduce import _base_model, _load_trained

    from evoharness_bpe_training.reproduce_config import resume_config

    config = resume_config(args.run)
    states = json.loads((args.run / "grpo-states.json").read_text("utf-8"))
    base, tokenizer = _base_model(config, args.run, None)
    model = _load_trained(base, args.run / args.stage / "model").eval()
    temperatures = [float(t) for t in args.temperatures.split(",")]
    generations = args.generations or config.grpo_generations
    skips: dict[float, list[float]] = {t: [] for t in temperatures}
    print(f"| state (seed, call) | recorded | P(skip) at T={' / '.join(map(str, temperatures))} | most likely environment tool |")
    print("|---|---|---|---|")
    for state in states:
        logp = tool_logprobs(model, tokenizer, state["prompt"])
        row = []
        for t in temperatures:
            skip = skip_probability(logp, t)
            skips[t].append(skip)
            row.append(f"{skip:.4f}")
        env_best = max((k for k in logp if k not in META), key=logp.get)
        print(f"| {state['seed']}, {state['position']} | {state['called']} | {' / '.join(row)} | {env_best} |")
    print()
    for t in temperatures:
        values = skips[t]
        print(f"T={t}: P(skip) median {statistics.median(values):.4f}, max {max(values):.4f}; expected skips per group of "
              f"{generations}: {generations * statistics.mean(values):.2f}; over {len(values)} states × {generations} samples: "
              f"{generations * sum(values):.1f}")
    if args.play_skips:
        play_skips(args.run, config, model, tokenizer, states)


def play_skips(run: Path, config, model, tokenizer, states: list[dict]) -> None:  # noqa: ANN001 - a bench script
    """Play every state with its episode's next environment action forced in place of the meta-action."""
    from evoharness_bpe import read_traces
    from evoharness_bpe.lab.envs import make_env
    from evoharness_bpe_training.continuation import ContinuationReward, episode_cost
    from evoharness_bpe_training.exploration import completion_text, skip_action
    from evoharness_bpe_training.grpo import CHAT_TEMPLATE_KWARGS
    from evoharness_bpe_training.reproduce_episodes import policy_for
    from evoharness_bpe_training.speed import inference_copy, resolve_precision

    episodes = {int(t.metadata["seed"]): t for t in read_traces(run / "grpo-states.jsonl")}
    player = policy_for(inference_copy(model, resolve_precision(config.precision)), tokenizer, config)
    texts, rows, recorded = [], [], []
    for state in states:
        trace = episodes[int(state["seed"])]
        action = skip_action(trace, int(state["position"]))
        if action is None:
            continue
        texts.append(completion_text(tokenizer, action, player.prefill, CHAT_TEMPLATE_KWARGS))
        rows.append(state)
        recorded.append(episode_cost(trace))
    reward = ContinuationReward(make_env=lambda name, level: make_env(name, level), config=config.episode_config(),
                                continuation_calls=config.grpo_continuation_calls or None, prefill=player.prefill)
    reward.policy = player
    reward([r["prompt"] for r in rows], texts, seed=[r["seed"] for r in rows], difficulty=[r["difficulty"] for r in rows],
           replies=[r["replies"] for r in rows], env=[r["env"] for r in rows])
    print()
    print("| state (seed, call) | skipped | forced action | success | meta-calls (recorded episode's) |")
    print("|---|---|---|---|---|")
    for row, text, log, cost in zip(rows, texts, reward.log, recorded):
        print(f"| {row['seed']}, {row['position']} | {row['called']} | {text.split(chr(34))[0]} | {log['success']:.0f} | "
              f"{log['meta_calls']} ({cost.meta_calls}) |")
    wins = [log for log, cost in zip(reward.log, recorded) if log["success"] and log["meta_calls"] < cost.meta_calls]
    print(f"\nforced skips: {len(rows)}; succeeded {sum(1 for log in reward.log if log['success'])}; "
          f"succeeded with fewer meta-actions than the recorded episode: {len(wins)}")


if __name__ == "__main__":
    main()
