"""Does a trained policy read its dashboard when it decides to finish? (the CRM migration)

    python bench/finish_probe.py runs/miniature                # the SFT policy, its own evaluation
    python bench/finish_probe.py runs/miniature --stage grpo --episodes 5

At the decision after batch 1 is committed and noted (send batch 2, or `finish`?), the prompt is
scored as played and with one part changed to what it reads after the last batch: the
dashboard (PROGRESS all done, no NEXT), or the recent window (the commit and its result naming
the last batch). P(tool) is normalised over the offered tools (`consulting_probe.tool_logprobs`).
A policy that reads its workspace moves its mass from `submit_batch` to `finish` when the
dashboard says nothing is left; one that decides from the window's shape does not.
"""

from __future__ import annotations

import argparse
import json
import math
import re
from pathlib import Path

from consulting_probe import tool_logprobs


def _name(call) -> str | None:  # noqa: ANN001 - a trace's model call
    calls = call.response.get("tool_calls") or []
    return calls[0]["function"]["name"] if calls else None


def decision_after_first_note(trace) -> int | None:  # noqa: ANN001 - a trace
    """Index of the call after the first `note` that follows a `commit` (batch 1's end), if any."""
    names = [_name(c) for c in trace.model_calls]
    for i in range(1, len(names) - 1):
        if names[i] == "note" and "commit" in names[:i]:
            return i + 1
    return None


def as_if_last_batch(prompt: str) -> dict[str, str]:
    """The prompt with the dashboard, or the window, changed to the state after the last batch."""
    todo, done = (int(x) for x in re.search(r"PROGRESS: (\d+) todo, \d+ doing, (\d+) done", prompt).groups())
    total = todo + done
    dashboard = re.sub(r"PROGRESS: \d+ todo, (\d+) doing, \d+ done", rf"PROGRESS: 0 todo, \1 doing, {total} done", prompt)
    dashboard = re.sub(r"NEXT:\n(- \[todo\][^\n]*\n)+", "", dashboard)
    window = re.sub(r'"subgoal": "batch \d+", "status": "done"', f'"subgoal": "batch {total}", "status": "done"', prompt)
    window = re.sub(
        r"batch-\d+: todo → done \(\d+ done, [^)]*\)", f"batch-{total}: todo → done ({total} done, nothing open)", window
    )
    return {"dashboard: all done": dashboard, "window: last batch": window}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run", type=Path, help="a reproduction run folder")
    parser.add_argument("--stage", default="sft", choices=("sft", "grpo"))
    parser.add_argument("--episodes", type=int, default=3, help="evaluation episodes to probe")
    args = parser.parse_args()

    from evoharness_bpe import read_traces
    from evoharness_bpe_training.reproduce import _base_model, _load_trained
    from evoharness_bpe_training.reproduce_config import resume_config
    from evoharness_bpe_training.reproduce_episodes import policy_for

    config = resume_config(args.run)
    base, tokenizer = _base_model(config, args.run, None)
    model = _load_trained(base, args.run / args.stage / "model").eval()
    render = policy_for(model, tokenizer, config).render_prompt
    print("| episode (seed, call) | prompt | P(finish) | P(submit_batch) |")
    print("|---|---|---|---|")
    probed = 0
    for trace in read_traces(args.run / f"eval-{args.stage}.jsonl"):
        index = decision_after_first_note(trace)
        if index is None or probed == args.episodes:
            continue
        probed += 1
        prompt = render(trace.model_calls[index].messages, trace.tools)
        for label, text in {"as played": prompt, **as_if_last_batch(prompt)}.items():
            logp = tool_logprobs(model, tokenizer, text)
            total = sum(math.exp(v) for v in logp.values())
            p = {k: math.exp(v) / total for k, v in logp.items()}
            seed = trace.metadata.get("seed", "?")
            print(f"| {seed}, {index} | {label} | {p.get('finish', 0):.3f} | {p.get('submit_batch', 0):.3f} |", flush=True)
    if not probed:
        print(json.dumps({"probed": 0, "why": "no evaluation episode committed and noted a batch"}))


if __name__ == "__main__":
    main()
