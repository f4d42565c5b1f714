"""How much of what the scripted expert sends is in its prompt, by recent-message window.

    python bench/window_reach.py                                  # the cpu preset at windows 4, 6, 8, 10, 12
    python bench/window_reach.py --preset cpu --difficulties 1,2 --windows 4,10

Plays the scripted expert (the SFT teacher of ``evoharness reproduce``) on the run's held-out
seeds at each window and counts its environment actions with a list argument whose every item
appears in the prompt the model would see: the system prompt with its dashboard
and the last `window` messages. A value outside it has to be inferred or remembered, not copied
(a `crm-migration` batch's ids once its page has left the window). With ``--tokens`` it also
prints the SFT data the expert's training episodes would give at that window, in SmolLM2 tokens
(the row count does not change with the window; the prompts do; the totals move by a few dozen
tokens between runs, as the harness's note ids are random). No model runs: seconds.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Iterator
from typing import Any

from evoharness_bpe import META_ACTIONS


def _listed(arguments: dict[str, Any]) -> Iterator[str]:
    """The string items of a tool call's list arguments (a batch's ids): values copied, not
    composed (a free-text reason may join several the prompt holds apart)."""
    for value in arguments.values():
        if isinstance(value, list):
            yield from (item for item in value if isinstance(item, str))


def reach(traces: list[Any]) -> dict[int, tuple[int, int]]:
    """Difficulty → (environment actions whose listed values are all in their prompt, those with any)."""
    counts: dict[int, list[int]] = {}
    for trace in traces:
        seen_total = counts.setdefault(int(trace.metadata.get("difficulty") or 1), [0, 0])
        for call in trace.model_calls:
            for tool_call in call.response.get("tool_calls") or []:
                if tool_call["function"]["name"] in META_ACTIONS:
                    continue
                arguments = tool_call["function"]["arguments"]
                values = list(_listed(json.loads(arguments) if isinstance(arguments, str) else arguments))
                if not values:
                    continue
                prompt = json.dumps(call.messages, ensure_ascii=False)
                seen_total[0] += all(json.dumps(v, ensure_ascii=False)[1:-1] in prompt for v in values)
                seen_total[1] += 1
    return {level: (seen, total) for level, (seen, total) in sorted(counts.items())}


def sft_tokens(traces: list[Any], tokenizer: Any) -> tuple[int, int, int]:
    """(rows, tokens, median tokens a row) of the SFT dataset `traces` give, through the chat template."""
    from evoharness_bpe_training.datasets import traces_to_sft_dataset
    from evoharness_bpe_training.grpo import CHAT_TEMPLATE_KWARGS

    rows = traces_to_sft_dataset(traces, deduplicate=True, balance_positions=True, eval_fraction=0.0)["train"]
    lengths = []
    for row in rows:
        tools = json.loads(row["tools"]) if isinstance(row.get("tools"), str) else row.get("tools")
        text = tokenizer.apply_chat_template(row["prompt"] + row["completion"], tools=tools, tokenize=False,
                                             **CHAT_TEMPLATE_KWARGS)
        lengths.append(len(tokenizer(text, add_special_tokens=False)["input_ids"]))
    lengths.sort()
    return len(lengths), sum(lengths), lengths[len(lengths) // 2]


def main() -> None:
    from evoharness_bpe_training.models import smollm2_tokenizer
    from evoharness_bpe_training.reproduce_config import load_reproduce_preset
    from evoharness_bpe_training.reproduce_episodes import expert_traces, held_out_seeds, training_seeds

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="cpu")
    parser.add_argument("--difficulties", default="1,2")
    parser.add_argument("--windows", default="4,6,8,10,12")
    parser.add_argument("--train-episodes", default="16,4", help="the expert's training episodes per difficulty (--tokens)")
    parser.add_argument("--tokens", action="store_true", help="also count the SFT data's SmolLM2 tokens")
    args = parser.parse_args()
    tokenizer = smollm2_tokenizer() if args.tokens else None
    base = load_reproduce_preset(args.preset, difficulties=args.difficulties, train_episodes=args.train_episodes)
    levels = [int(level) for level in args.difficulties.split(",")]
    print(f"window | {' | '.join(f'difficulty {level}: actions with every listed value in the prompt' for level in levels)}"
          + (" | SFT rows, tokens, median row" if tokenizer else ""))
    for window in (int(w) for w in args.windows.split(",")):
        config = dataclasses.replace(base, window=window)
        cells = [f"{seen}/{total}" for seen, total in reach(expert_traces(config, held_out_seeds(config, levels))).values()]
        if tokenizer is not None:
            rows, tokens, median = sft_tokens(expert_traces(config, training_seeds(config)), tokenizer)
            cells.append(f"{rows}, {tokens:,}, {median:,}")
        print(f"{window} | {' | '.join(cells)}", flush=True)


if __name__ == "__main__":
    main()
