"""Training-side overheads: building SFT rows from traces, the harness in a rollout step, and
where SmolLM2-135M's time goes on a CPU.

    python bench/training.py            # 1 and 2 (seconds)
    python bench/training.py --speed    # 3: the reproduction's old path and its new one (a few minutes)
    python bench/training.py --prefix   # 4: the prompt layout and the kept prefix (a few minutes)
    python bench/training.py --frozen-cache  # 5: SFT with the frozen layers' output kept (about 5 minutes)

1. `traces_to_sft_dataset` on 200 episodes of 10 model calls, against the baseline of
   serialising the same traces to JSON (the least any export must do).
2. One environment tool call through the rollout environment class (workspace observation and
   a refreshed dashboard included), against the bare `Env.step`.
3. SmolLM2-135M (the embedded GGUF) on a real difficulty-1 row of the compact template: one
   optimizer step of the old path (every weight, fp32) and of the new (LoRA r16 on the top 10
   layers, bf16 autocast where the CPU has it), the same step through TRL's fused LM head with
   every position scored and with the reply's only, and held-out replies one after another in
   fp32 against 10 prompts in one batched generation from a bf16 copy; printed side by side as ratios.
4. Held-out prompts of ten episodes at different points, under the compact template and under
   `compact-tools-first` (the tool section ahead of the system text and dashboard), in one batch
   and one at a time, each with and without the prefix kept from the call before
   (`TransformersPolicy(keep_prefix=)`): seconds per reply against the compact layout without it.
5. The reproduction's SFT stage on a few of its rows, without and with the output of the frozen
   layers below LoRA kept after each row's first pass (`frozen_layers`): seconds per row pass
   against the uncached run, and how far the two adapters differ.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from evoharness_bpe import ModelCall, Outcome, Workspace
from evoharness_bpe.lab.envs.base import EnvOutcome, StepResult


class CounterEnv:
    """Call `add(n)` until the total reaches the target."""

    name = "counter"

    def __init__(self, difficulty: int = 1) -> None:
        self.difficulty = difficulty
        self.total = 0

    def reset(self, seed: int) -> tuple[str, str]:
        self.total = 0
        return f"Reach {10 * self.difficulty} with add(n).", "Total: 0"

    def tools(self) -> list[dict[str, Any]]:
        return [{"type": "function", "function": {"name": "add", "description": "Add n to the total.",
                 "parameters": {"type": "object", "properties": {"n": {"type": "integer", "description": "Amount."}}, "required": ["n"]}}}]

    def step(self, tool_call: dict[str, Any]) -> StepResult:
        self.total += int(tool_call["arguments"].get("n", 0))
        return StepResult(observation=f"Total: {self.total}", done=self.total >= 10 * self.difficulty)

    def outcome(self) -> EnvOutcome:
        return EnvOutcome(success=self.total >= 10 * self.difficulty, score=min(1.0, self.total / (10 * self.difficulty)))


def _trace(i: int):
    ws = Workspace(f"Episode {i}: reach 100", subgoals=["first half", "second half"])
    history: list[dict[str, Any]] = [{"role": "user", "content": f"Reach 100 (episode {i})."}]
    calls = []
    for step in range(10):
        prompt = [{"role": "system", "content": ws.dashboard()}, *history[-12:]]
        reply = {"role": "assistant", "content": None, "tool_calls": [
            {"id": f"c{step}", "type": "function", "function": {"name": "track", "arguments": f'{{"key": "k{step}", "value": "{i}"}}'}}]}
        calls.append(ModelCall(messages=prompt, response=reply))
        history += [reply, {"role": "tool", "tool_call_id": f"c{step}", "content": ws.act("track", {"key": f"k{step}", "value": str(i)}).content}]
    trace = ws.trace(messages=history, outcome=Outcome(success=True), env="counter")
    trace.model_calls = calls
    return trace


def _best(fn, repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    from evoharness_bpe_training.datasets import traces_to_sft_dataset
    from evoharness_bpe_training.environment import harness_environment

    traces = [_trace(i) for i in range(200)]
    build = _best(lambda: traces_to_sft_dataset(traces, eval_fraction=0.1), repeat=3)
    dump = _best(lambda: [t.model_dump_json() for t in traces], repeat=3)
    print(f"SFT rows from 200 traces (2,000 rows): {build * 1000:.0f} ms; JSON dump of the traces: {dump * 1000:.0f} ms; ratio {build / dump:.1f}x")

    env = CounterEnv(1000)
    env.reset(0)
    bare = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(1000):
            env.step({"name": "add", "arguments": {"n": 1}})
        bare.append((time.perf_counter() - start) / 1000)
    cls = harness_environment(lambda: CounterEnv(1000))
    wrapped_env = cls()
    wrapped_env.reset(seed=0)
    wrapped = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(200):
            wrapped_env.add(n=1)
        wrapped.append((time.perf_counter() - start) / 200)
    b, w = statistics.median(bare), statistics.median(wrapped)
    print(f"env tool call: bare {b * 1e6:.1f} µs; through the rollout environment (observe + dashboard) {w * 1e6:.0f} µs; ratio {w / b:.0f}x")


TARGET_ROW_TOKENS = 850
"""The row length the LoRA-step target is set at (issue: a LoRA step on an 850-token row ≤ 2.5 s)."""


def _rows_and_prompts(tokenizer: Any, count: int) -> tuple[list[tuple[Any, int]], list[Any]]:
    """Every real SFT row of one expert episode as ``(token ids, prompt length)``, and `count` held-out prompts."""
    import json

    from evoharness_bpe.lab.envs import make_env
    from evoharness_bpe.lab.frameworks import EpisodeConfig
    from evoharness_bpe.lab.policies import ExpertPolicy
    from evoharness_bpe.lab.runner.core import run_episode
    from evoharness_bpe_training.datasets import trace_rows
    from evoharness_bpe_training.grpo import CHAT_TEMPLATE_KWARGS
    from evoharness_bpe_training.student import render_rows

    config = EpisodeConfig(harness="bpe", window=4, dashboard_tokens=160, spec_style="compact", system_prompt="Call exactly one tool per reply.")
    traces = []
    for s in range(count):
        env = make_env("crm-migration", 1)
        traces.append(run_episode(env, ExpertPolicy(env), None, config.model_copy(update={"seed": 10_000 + s})))
    rows = trace_rows(traces[0])
    texts = render_rows(rows, tokenizer, **CHAT_TEMPLATE_KWARGS)
    encoded = []
    for row, text in zip(rows, texts):
        prompt_text = tokenizer.apply_chat_template(row["prompt"], tools=json.loads(row["tools"]), add_generation_prompt=True,
                                                    tokenize=False, **CHAT_TEMPLATE_KWARGS)
        ids = tokenizer(text, return_tensors="pt", add_special_tokens=False)["input_ids"]
        encoded.append((ids, len(tokenizer(prompt_text)["input_ids"])))
    prompts = [(t.model_calls[len(t.model_calls) // 2].messages, t.tools) for t in traces]
    return encoded, prompts


def _step_time(model: Any, ids: Any, prompt_len: int, *, bf16: bool = False, fused: bool = False, repeat: int = 2) -> float:
    """Median seconds of one optimizer step on the reply's tokens: the model's own loss, or with
    `fused` the log-probabilities of TRL's fused LM head, as its SFT trainer takes them."""
    import torch

    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=1e-5)
    labels = ids.clone()
    labels[:, :prompt_len] = -100
    times = []
    for _ in range(repeat + 1):  # the first is a warm-up
        start = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            if fused:
                loss = -model(input_ids=ids, labels=labels, fused_lm_head=True).log_probs.sum() / (labels != -100).sum()
            else:
                loss = model(input_ids=ids, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:])


def speed() -> None:
    """3: the old path and the new one, side by side, on the same machine and in the same process."""
    import copy
    import os

    import torch
    from peft import get_peft_model

    from evoharness_bpe.lab.policies import TransformersPolicy
    from evoharness_bpe_training.grpo import CHAT_TEMPLATE_KWARGS
    from evoharness_bpe_training.models import load_model_and_tokenizer
    from evoharness_bpe_training.speed import bf16_supported, inference_copy, lora_config
    from evoharness_bpe_training.student import student_chat_template

    bf16 = bf16_supported()
    base, tokenizer = load_model_and_tokenizer("smollm2-135m", dtype="float32")
    tokenizer.chat_template = student_chat_template()
    rows, prompts = _rows_and_prompts(tokenizer, 10)
    ids, prompt_len = max(rows, key=lambda row: row[0].shape[1])
    near_ids, near_prompt_len = min(rows, key=lambda row: abs(row[0].shape[1] - TARGET_ROW_TOKENS))
    print(f"machine: {torch.get_num_threads()} torch threads, native bf16 {bf16}, load {os.getloadavg()[0]:.1f}; "
          f"row {ids.shape[1]} tokens ({ids.shape[1] - prompt_len} trained)")

    full = copy.deepcopy(base)
    old_step = _step_time(full, ids, prompt_len, bf16=False)
    del full
    lora_all = get_peft_model(copy.deepcopy(base), lora_config(base, r=16, alpha=32))
    lora_all_step = _step_time(lora_all, ids, prompt_len, bf16=False)
    del lora_all
    lora_top = get_peft_model(copy.deepcopy(base), lora_config(base, r=16, alpha=32, top_layers=10))
    new_step = _step_time(lora_top, ids, prompt_len, bf16=bf16)
    print("| optimizer step, one row | seconds | vs old |\n|---|---|---|")
    print(f"| old: every weight, fp32 | {old_step:.2f} | 1.00 |")
    print(f"| LoRA r16 all layers, fp32 | {lora_all_step:.2f} | {lora_all_step / old_step:.2f} |")
    print(f"| new: LoRA r16 top 10 layers, {'bf16 autocast' if bf16 else 'fp32'} | {new_step:.2f} | {new_step / old_step:.2f} |")
    from trl.trainer.utils import add_fused_lm_head

    from evoharness_bpe_training.speed import score_trained_positions_only

    fused = copy.deepcopy(base)
    add_fused_lm_head(fused, outputs=("log_probs", "entropy", "is_top1"))  # as TRL's SFT trainer adds it
    fused = get_peft_model(fused, lora_config(base, r=16, alpha=32, top_layers=10))
    every_position = _step_time(fused, ids, prompt_len, fused=True)
    score_trained_positions_only()
    compact = _step_time(fused, ids, prompt_len, fused=True)
    near = _step_time(fused, near_ids, near_prompt_len, fused=True)
    del fused
    print(f"| TRL's SFT step (fused LM head), top 10 layers, every position scored | {every_position:.2f} | {every_position / old_step:.2f} |")
    print(f"| the same, the reply's positions only (`score_trained_positions_only`) | {compact:.2f} | {compact / old_step:.2f} |")
    print(f"| the same, on the row nearest {TARGET_ROW_TOKENS} tokens ({near_ids.shape[1]} tokens, "
          f"{near_ids.shape[1] - near_prompt_len} trained; target ≤ 2.5 s) | {near:.2f} | {near / old_step:.2f} |")

    kwargs = dict(tokenizer=tokenizer, native_tools=True, chat_template_kwargs=CHAT_TEMPLATE_KWARGS, max_new_tokens=160)
    sequential = TransformersPolicy(lora_top.merge_and_unload().eval(), static_cache=False, **kwargs)
    one = prompts[:3]
    start = time.perf_counter()
    replies = [sequential.complete(m, t) for m, t in one]
    old_reply = (time.perf_counter() - start) / len(one)
    old_tokens = sum(len(tokenizer(str(r))["input_ids"]) for r in replies) / len(one)
    copy_for_inference = inference_copy(sequential.model, "bf16" if bf16 else "fp32")
    whole = TransformersPolicy(copy_for_inference, share_prefix=0, static_cache=False, **kwargs)
    whole.complete_batch(prompts[:2])  # warm-up
    start = time.perf_counter()
    whole_replies = whole.complete_batch(prompts)
    whole_reply = (time.perf_counter() - start) / len(prompts)
    growing = TransformersPolicy(copy_for_inference, static_cache=False, **kwargs)
    start = time.perf_counter()
    growing_replies = growing.complete_batch(prompts)
    shared_reply = (time.perf_counter() - start) / len(prompts)
    batched = TransformersPolicy(copy_for_inference, **kwargs)
    start = time.perf_counter()
    replies = batched.complete_batch(prompts)
    new_reply = (time.perf_counter() - start) / len(prompts)
    def calls(replies: list) -> list:
        return [[c["function"] for c in r.get("tool_calls") or []] or r.get("content") for r in replies]

    assert calls(replies) == calls(whole_replies) == calls(growing_replies), "the shared prefix or the static cache changed a reply"
    from evoharness_bpe.lab.policies.transformers import _prefix_plan

    prompt_ids = [tokenizer(batched.render_prompt(m, t), add_special_tokens=False)["input_ids"] for m, t in prompts]
    shared, length, groups = _prefix_plan(prompt_ids, batched.share_prefix)
    plan = f"the {shared}-token common prefix prefilled once" + (
        f", then up to token {length} once for each of {max(groups) + 1} groups" if length > shared else "")
    new_tokens = sum(len(tokenizer(str(r))["input_ids"]) for r in replies) / len(prompts)
    mean_prompt = statistics.mean(batched.prompt_tokens[-len(prompts):])
    print(f"\n| held-out reply ({mean_prompt:.0f}-token prompts) | seconds per reply | reply tokens/s | vs old |\n|---|---|---|---|")
    print(f"| old: one at a time, fp32, the cache grown token by token | {old_reply:.2f} | {old_tokens / old_reply:.1f} | 1.00 |")
    print(f"| {len(prompts)} in one batch, every row prefills its whole prompt, {'bf16 weights' if bf16 else 'fp32'} | "
          f"{whole_reply:.2f} | {new_tokens / whole_reply:.1f} | {whole_reply / old_reply:.2f} |")
    print(f"| {len(prompts)} in one batch, {plan}, the cache grown token by token | "
          f"{shared_reply:.2f} | {new_tokens / shared_reply:.1f} | {shared_reply / old_reply:.2f} |")
    print(f"| new: the same with a static cache (allocated once, written in place) | "
          f"{new_reply:.2f} | {new_tokens / new_reply:.1f} | {new_reply / old_reply:.2f} |")


def prefix_reuse() -> None:
    """4: the tool section as the shared prefix, and the prefix kept from one call to the next."""
    import os

    import torch

    from evoharness_bpe.lab.envs import make_env
    from evoharness_bpe.lab.frameworks import EpisodeConfig
    from evoharness_bpe.lab.policies import ExpertPolicy, TransformersPolicy
    from evoharness_bpe.lab.runner.core import run_episode
    from evoharness_bpe_training.grpo import CHAT_TEMPLATE_KWARGS
    from evoharness_bpe_training.models import load_model_and_tokenizer
    from evoharness_bpe_training.student import student_chat_template

    model, tokenizer = load_model_and_tokenizer("smollm2-135m", dtype="float32")
    config = EpisodeConfig(harness="bpe", window=4, dashboard_tokens=160, spec_style="compact", system_prompt="Call exactly one tool per reply.")
    prompts = []
    for s in range(10):  # one call of each episode, at different points: as a round of lockstep episodes
        env = make_env("crm-migration", 1)
        trace = run_episode(env, ExpertPolicy(env), None, config.model_copy(update={"seed": 10_000 + s}))
        prompts.append((trace.model_calls[(3 * s) % len(trace.model_calls)].messages, trace.tools))
    print(f"machine: {torch.get_num_threads()} torch threads, load {os.getloadavg()[0]:.1f}; fp32; 10 prompts, replies of up to 40 tokens")
    kwargs = dict(tokenizer=tokenizer, native_tools=True, chat_template_kwargs=CHAT_TEMPLATE_KWARGS, max_new_tokens=40, one_line_calls=True)
    figures: dict[tuple[str, str, bool], float] = {}
    replies: dict[tuple[str, bool], list[Any]] = {}
    lengths: dict[str, float] = {}
    for layout in ("compact", "compact-tools-first"):
        tokenizer.chat_template = student_chat_template(tools_first=layout == "compact-tools-first")
        for keep in (False, True):
            policy = TransformersPolicy(model, keep_prefix=keep, **kwargs)
            policy.complete_batch(prompts[:2])  # warm-up; with `keep`, the prefix a call before left
            start = time.perf_counter()
            batch = policy.complete_batch(prompts)
            figures[layout, "batch", keep] = (time.perf_counter() - start) / len(prompts)
            start = time.perf_counter()
            alone = [policy.complete(m, t) for m, t in prompts[:5]]
            figures[layout, "alone", keep] = (time.perf_counter() - start) / 5
            replies[layout, keep] = [r.get("tool_calls") or r.get("content") for r in batch[:5] + alone]
            lengths[layout] = statistics.mean(len(tokenizer(str(r))["input_ids"]) for r in batch)
        assert replies[layout, True] == replies[layout, False], "the kept prefix changed a reply"
    print("\n| prompt layout (reply tokens, mean) | kept prefix | 10 in one batch, s per reply | vs compact | one at a time, s per reply | vs compact |"
          "\n|---|---|---|---|---|---|")
    for layout, keep in (("compact", False), ("compact", True), ("compact-tools-first", False), ("compact-tools-first", True)):
        batch, alone = figures[layout, "batch", keep], figures[layout, "alone", keep]
        print(f"| {layout} ({lengths[layout]:.0f}) | {'yes' if keep else 'no'} | {batch:.2f} | {batch / figures['compact', 'batch', False]:.2f} | "
              f"{alone:.2f} | {alone / figures['compact', 'alone', False]:.2f} |")


def frozen_cache(rows: int = 12) -> None:
    """5: the reproduction's SFT stage (the cpu preset's settings: LoRA on the top 10 of 30 layers,
    3 epochs, 4 rows a step) on `rows` distinct rows spread over its set, without and with the frozen
    layers' cache: seconds per row pass and the largest difference between the two adapters."""
    import os
    import tempfile
    from dataclasses import replace
    from pathlib import Path

    import torch
    from safetensors.torch import load_file

    from evoharness_bpe_training.datasets import row_key, traces_to_sft_dataset
    from evoharness_bpe_training.reproduce import _base_model
    from evoharness_bpe_training.reproduce_config import load_reproduce_preset
    from evoharness_bpe_training.reproduce_episodes import expert_traces, lean_seeds, training_seeds
    from evoharness_bpe_training.reproduce_training import train_sft
    from evoharness_bpe_training.speed import resolve_precision

    with tempfile.TemporaryDirectory() as folder:
        config = load_reproduce_preset("cpu", out=folder)
        precision = resolve_precision(config.precision)
        traces = expert_traces(config, training_seeds(config))
        traces += expert_traces(config, lean_seeds(config), lean=True)
        dataset = traces_to_sft_dataset(traces, deduplicate=True, balance_positions=True, eval_fraction=0.0, seed=config.seed)
        train = dataset["train"]
        first_of = {}  # balance_positions repeats rows: one of each, `rows` of them spread over the set
        for index, row in enumerate(train):
            first_of.setdefault(row_key(row), index)
        distinct = sorted(first_of.values())
        dataset["train"] = train.select(distinct[:: len(distinct) // rows][:rows])
        passes = rows * config.sft_epochs
        print(f"machine: {torch.get_num_threads()} torch threads, {precision}, load {os.getloadavg()[0]:.1f}; "
              f"{rows} of the cpu preset's SFT rows, {config.sft_epochs:g} epochs, LoRA on the top {config.lora_layers} layers")
        seconds, adapters = {}, {}
        for cached in (False, True):
            run = replace(config, sft_cache_frozen_layers=cached)
            out = Path(folder) / ("cached" if cached else "uncached")
            model, tokenizer = _base_model(run, out, dataset)
            start = time.perf_counter()
            _, metrics = train_sft(model, tokenizer, dataset, run, out, precision, log=lambda line: None)
            seconds[cached] = (time.perf_counter() - start) / passes
            adapters[cached] = load_file(str(out / "sft" / "adapter" / "adapter_model.safetensors"))
            if cached:
                hits = metrics.get("frozen_layers_cache_hits", 0)
                layers = metrics.get("frozen_layers_cached", 0)
    difference = max((adapters[True][k] - adapters[False][k]).abs().max().item() for k in adapters[True])
    largest = max(v.abs().max().item() for v in adapters[False].values())
    hit = (seconds[True] * passes - seconds[False] * (passes - hits)) / hits / seconds[False]  # a pass from the cache, vs a full one
    whole = len(train) * config.sft_epochs
    projected = (len(distinct) + (whole - len(distinct)) * hit) / whole
    print("\n| SFT, one row pass (forward and backward) | seconds | vs uncached |\n|---|---|---|")
    print(f"| every layer run for every pass | {seconds[False]:.2f} | 1.00 |")
    print(f"| the {layers} frozen layers' output kept after a row's first pass ({hits} of "
          f"{passes:g} passes from the cache) | {seconds[True]:.2f} | {seconds[True] / seconds[False]:.2f} |")
    print(f"| a pass from the cache alone | {hit * seconds[False]:.2f} | {hit:.2f} |")
    print(f"\nlargest difference between the two adapters: {difference:.2e} (largest weight {largest:.3f})")
    print(f"the preset's SFT set: {len(train)} rows, {len(distinct)} distinct; {whole:g} passes of which {len(distinct)} "
          f"run every layer: projected SFT time {projected:.2f}x the uncached")


if __name__ == "__main__":
    import sys

    if "--speed" in sys.argv[1:]:
        speed()
    elif "--prefix" in sys.argv[1:]:
        prefix_reuse()
    elif "--frozen-cache" in sys.argv[1:]:
        frozen_cache()
    else:
        main()
