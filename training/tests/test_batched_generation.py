"""`TransformersPolicy.complete_batch`: one padded generation, the same replies as one at a time."""

from __future__ import annotations

import pytest

from evoharness_bpe.lab.envs import make_env
from evoharness_bpe.lab.frameworks import EpisodeConfig
from evoharness_bpe.lab.policies import ExpertPolicy
from evoharness_bpe.lab.runner.core import run_episode


@pytest.fixture(scope="module")
def requests():
    """Prompts of different lengths: calls of a real expert episode."""
    env = make_env("crm-migration", 1)
    trace = run_episode(env, ExpertPolicy(env), None, EpisodeConfig(seed=2, spec_style="compact", window=4))
    return [(c.messages, trace.tools) for c in trace.model_calls[:5]]


def _policy(tiny_dir, **options):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from evoharness_bpe.lab.policies import TransformersPolicy

    tokenizer = AutoTokenizer.from_pretrained(tiny_dir)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    return TransformersPolicy(model, tokenizer=tokenizer, native_tools=True, max_new_tokens=24, **options)


@pytest.mark.parametrize("static_cache", [True, False])
def test_a_batch_gives_each_prompt_the_reply_it_gets_alone(tiny_dir, requests, static_cache) -> None:
    policy = _policy(tiny_dir, static_cache=static_cache)
    alone = [policy.complete(m, t) for m, t in requests]
    sizes = list(policy.prompt_tokens)
    together = policy.complete_batch(requests)
    assert len(set(sizes)) > 1  # the rows really are padded
    assert [r.get("content") for r in together] == [r.get("content") for r in alone]
    assert policy.prompt_tokens[len(sizes):] == sizes


def test_one_line_calls_cut_a_reply_whose_tool_name_matches_no_tool(tiny_dir, requests) -> None:
    from evoharness_bpe.lab.policies.transformers import close_call

    rambling = _policy(tiny_dir)  # a random model writes no tool name
    cut = _policy(tiny_dir, one_line_calls=True)
    long = rambling.complete_batch(requests[:2])
    short = cut.complete_batch(requests[:2])
    tok = cut.tokenizer
    for a, b in zip(long, short):
        assert "tool_calls" not in b  # still an invalid action
        assert len(tok(b["content"])["input_ids"]) < len(tok(a["content"])["input_ids"])
    assert close_call('<tool_call>\n{"name": "finish", "arguments": {}}') == '<tool_call>\n{"name": "finish", "arguments": {}}\n</tool_call>'
    assert close_call("no call") == "no call"


@pytest.mark.parametrize("static_cache", [True, False])
def test_a_shared_prompt_prefix_is_computed_once_and_changes_no_reply(tiny_dir, requests, static_cache) -> None:
    from evoharness_bpe.lab.policies.transformers import _shared_prefix_length

    shared = _policy(tiny_dir, static_cache=static_cache)
    whole = _policy(tiny_dir, share_prefix=0, static_cache=False)
    prefixes: list[int] = []
    real = shared._prefix_forward
    shared._prefix_forward = lambda prefix: (prefixes.append(len(prefix)), real(prefix))[1]  # type: ignore[method-assign]
    with_cache = shared.complete_batch(requests)
    without = whole.complete_batch(requests)
    alone = [whole.complete(m, t) for m, t in requests]
    assert prefixes and prefixes[0] >= 64  # the system text and tool section, prefilled once
    assert [r.get("content") for r in with_cache] == [r.get("content") for r in without] == [r.get("content") for r in alone]
    assert _shared_prefix_length([[1, 2, 3], [1, 2, 4], [1, 2]]) == 1  # every row keeps a token of its own
    assert _shared_prefix_length([[5, 6], [7, 6]]) == 0


@pytest.mark.parametrize("static_cache", [True, False])
def test_rows_that_share_more_than_the_common_prefix_compute_it_once_per_group(tiny_dir, requests, static_cache) -> None:
    from evoharness_bpe.lab.policies.transformers import _prefix_plan

    policy = _policy(tiny_dir, static_cache=static_cache)
    grouped = [requests[3], requests[4], requests[3], requests[4], requests[2]]  # two pairs of equal prompts
    rows = [policy.tokenizer(policy.render_prompt(m, t), add_special_tokens=False)["input_ids"] for m, t in grouped]
    shared, length, groups = _prefix_plan(rows, 64)
    assert length > shared and groups == [0, 1, 0, 1, 2]
    alone = [_policy(tiny_dir, static_cache=False).complete(m, t) for m, t in grouped]
    assert [r.get("content") for r in policy.complete_batch(grouped)] == [r.get("content") for r in alone]


def test_prefix_passes_keep_the_last_positions_logits_only(tiny_dir, requests) -> None:
    """A pass that only fills the cache never holds logits over the whole vocabulary for every token."""
    policy = _policy(tiny_dir)
    grouped = [requests[3], requests[4], requests[3], requests[4], requests[2]]  # a shared prefix and two groups
    widths: list[int] = []
    hook = policy.model.lm_head.register_forward_hook(lambda module, args, output: widths.append(output.shape[1]))
    real = policy.model.generate

    def generate(*args, **kwargs):  # the prefix passes are the forwards before generation starts
        hook.remove()
        return real(*args, **kwargs)

    policy.model.generate = generate  # type: ignore[method-assign]
    replies = policy.complete_batch(grouped)
    alone = [_policy(tiny_dir, static_cache=False).complete(m, t) for m, t in grouped]
    assert len(widths) == 2 and widths == [1, 1]  # the shared prefix, then the groups' heads
    assert [r.get("content") for r in replies] == [r.get("content") for r in alone]


def test_the_prefix_plan_computes_the_fewest_tokens() -> None:
    from evoharness_bpe.lab.policies.transformers import _prefix_plan

    a, b = [1] * 10 + [2] * 30 + [3], [1] * 10 + [4] * 30 + [5]
    assert _prefix_plan([a, a, b, b], 4) == (10, 40, [0, 0, 1, 1])  # 10 + 2 x 30 + 4 x 1 tokens
    assert _prefix_plan([a, b], 4) == (10, 10, [0, 0])  # no pair: the common prefix only
    assert _prefix_plan([a, b], 11) == (0, 0, [0, 0])  # under the minimum: no sharing
    assert _prefix_plan([a, a], 0) == (0, 0, [0, 0])


def test_the_kept_prefix_serves_the_next_prompts_until_the_weights_change(tiny_dir, requests) -> None:
    import torch

    from evoharness_bpe.lab.policies import TransformersPolicy

    kept = _policy(tiny_dir)
    fresh = _policy(tiny_dir, keep_prefix=False)
    replies = [kept.complete(m, t) for m, t in requests]
    assert kept.reused_prefix_tokens >= 64 * (len(requests) - 1)  # the system text and tool section, from the last call
    assert [r.get("content") for r in replies] == [fresh.complete(m, t).get("content") for m, t in requests]
    assert fresh.reused_prefix_tokens == 0
    before = kept.reused_prefix_tokens
    kept.complete_batch(requests[:2])
    reused = kept.reused_prefix_tokens
    assert reused > before  # a batch takes its common prefix from the last call too
    with torch.no_grad():  # as an optimizer step changes them: in place
        for p in kept.model.parameters():
            p.mul_(1.5)
    after = kept.complete(*requests[1])
    assert kept.reused_prefix_tokens == reused  # nothing taken from the keys and values of the old weights
    unkept = TransformersPolicy(kept.model, tokenizer=kept.tokenizer, native_tools=True, max_new_tokens=24, keep_prefix=False)
    assert after.get("content") == unkept.complete(*requests[1]).get("content")
