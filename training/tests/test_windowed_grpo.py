"""`run_grpo` rollouts show the model the prompts every other loop shows: the current dashboard in
the system prompt, the task and the recent window of messages (`evoharness_bpe.harness`)."""

from __future__ import annotations

import json

import pytest

from evoharness_bpe.lab.frameworks import EpisodeConfig
from evoharness_bpe.lab.registry import load_framework
from evoharness_bpe.testing.scripted import ScriptedPolicy, tool_call
from evoharness_bpe_training.metrics import read_jsonl
from evoharness_bpe_training.presets import get_preset

SCRIPT = [
    ("track", {"key": "next_locker", "value": "1"}),
    ("open_locker", {"number": 1}),
    ("track", {"key": "next_locker", "value": "2"}),
    ("open_locker", {"number": 2}),
    ("open_locker", {"number": 3}),
]


def _render(tokenizer, messages, tools, kwargs) -> list[int]:
    chat = [{**m, "content": m.get("content") or ""} for m in messages]
    return list(tokenizer.apply_chat_template(chat, tools=tools, add_generation_prompt=True, tokenize=True,
                                              return_dict=True, **kwargs)["input_ids"])


def test_every_rollout_call_sees_the_prompt_the_core_runner_shows(tiny_dir, tmp_path, locker_env_cls, monkeypatch) -> None:
    from trl import GRPOTrainer

    from evoharness_bpe_training.grpo import CHAT_TEMPLATE_KWARGS, run_grpo
    from evoharness_bpe_training.models import load_model_and_tokenizer

    model, tokenizer = load_model_and_tokenizer("tiny", cache_dir=tiny_dir)
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    replies = [tokenizer.encode(f'<tool_call>\n{{"name": "{name}", "arguments": {json.dumps(args)}}}\n</tool_call>',
                                add_special_tokens=False) + [eos] for name, args in SCRIPT]
    seen: list[list[int]] = []

    def scripted_generation(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        """The model's backend, scripted: the expert's replies in order, episode after episode; records each prompt."""
        out = []
        for ids in prompt_ids:
            seen.append([int(t) for t in ids])
            out.append(list(replies[(len(seen) - 1) % len(replies)]))
        return out, None

    monkeypatch.setattr(GRPOTrainer, "_generate_single_turn", scripted_generation)
    config = get_preset("tiny").grpo_config(output_dir=str(tmp_path), difficulties="3", seeds=1, max_steps=1, window=2,
                                            max_tool_calling_iterations=10, use_peft=False)
    run_grpo(config, env_factory=locker_env_cls, model=model, tokenizer=tokenizer, plots=False)

    # The same expert replies through the core runner at the same seed and window: the reference prompts.
    trace = load_framework("core")(locker_env_cls(3), ScriptedPolicy([tool_call(n, a) for n, a in SCRIPT]), None,
                                   EpisodeConfig(seed=0, window=2))
    assert trace.outcome.success and len(trace.model_calls) == len(SCRIPT)
    expected = [_render(tokenizer, call.messages, trace.tools, CHAT_TEMPLATE_KWARGS) for call in trace.model_calls]
    # the window is in force: the last call shows the system prompt, the task and the last call and result only
    assert [m["role"] for m in trace.model_calls[-1].messages] == ["system", "user", "assistant", "tool"]
    # both rollouts of the group: every model call was generated from exactly the core runner's prompt
    assert seen == expected * config.num_generations
    episodes = read_jsonl(tmp_path / "episodes.jsonl")
    assert len(episodes) == 2
    assert all(e["success"] and e["env_steps"] == 3 and e["by_action"]["track"] == 2 and e["invalid"] == 0 for e in episodes)
    log = [r for r in read_jsonl(tmp_path / "metrics.jsonl") if "reward" in r]
    want = 1.0 - config.lam * 2 - config.mu * episodes[0]["harness_tokens"]
    assert log[0]["rewards/cost_aware_reward/mean"] == pytest.approx(want, abs=1e-4)


def test_trl_rollouts_remain_available_and_grow_one_conversation(tiny_dir, tmp_path, locker_env_cls, monkeypatch) -> None:
    """``rollouts="trl"``: TRL's own loop, whose second call continues the first prompt instead of a fresh one."""
    from trl import GRPOTrainer

    from evoharness_bpe_training.grpo import run_grpo
    from evoharness_bpe_training.models import load_model_and_tokenizer

    model, tokenizer = load_model_and_tokenizer("tiny", cache_dir=tiny_dir)
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    reply = tokenizer.encode('<tool_call>\n{"name": "open_locker", "arguments": {"number": 1}}\n</tool_call>',
                             add_special_tokens=False) + [eos]
    seen: list[list[int]] = []

    def scripted_generation(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        seen.extend([int(t) for t in ids] for ids in prompt_ids)
        return [list(reply) for _ in prompt_ids], None

    monkeypatch.setattr(GRPOTrainer, "_generate_single_turn", scripted_generation)
    config = get_preset("tiny").grpo_config(output_dir=str(tmp_path), difficulties="2", seeds=1, max_steps=1,
                                            max_tool_calling_iterations=1, max_completion_length=1024, use_peft=False,
                                            rollouts="trl")
    run_grpo(config, env_factory=locker_env_cls, model=model, tokenizer=tokenizer, plots=False)
    first, second = seen[0], seen[-1]
    assert len(seen) == 4 and second[: len(first)] == first  # one growing conversation, the opening dashboard kept


def test_rollout_options_are_checked() -> None:
    from evoharness_bpe.exceptions import UserError

    preset = get_preset("tiny")
    assert preset.grpo_config().rollouts == "windowed" and preset.grpo_config().window == 12
    with pytest.raises(UserError, match="rollouts must be windowed or trl"):
        preset.grpo_config(rollouts="growing")
    with pytest.raises(UserError, match="window must be at least 1"):
        preset.grpo_config(window=0)
