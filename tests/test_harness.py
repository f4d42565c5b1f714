"""The shared harness pieces: prompts, tools, window, prompt tokens, counters, history replies."""

from __future__ import annotations

import pytest

from evoharness_bpe.exceptions import UserError
from evoharness_bpe.harness import (
    META_ACTIONS,
    EpisodeCounters,
    PromptTokens,
    count_prompt_tokens,
    episode_tools,
    history_message,
    instructions,
    prompt_text,
    system_prompt,
    window,
)
from evoharness_bpe.lab.envs import make_env
from evoharness_bpe.lab.frameworks import EpisodeConfig
from evoharness_bpe.lab.policies.transformers import _chat
from evoharness_bpe.lab.runner.core import run_episode
from evoharness_bpe.testing.scripted import ScriptedPolicy


def test_episode_tools_are_env_tools_then_the_harness_meta_actions() -> None:
    env = make_env("crm-migration", 1)
    env_names = [t["function"]["name"] for t in env.tools()]
    names = {h: [t["function"]["name"] for t in episode_tools(env, h)] for h in ("none", "append", "bpe")}
    assert names["none"] == env_names
    assert names["append"] == [*env_names, "note"]
    assert names["bpe"] == [*env_names, *META_ACTIONS]
    with pytest.raises(UserError, match="clash"):
        episode_tools([{"type": "function", "function": {"name": "note", "parameters": {}}}], "bpe")
    with pytest.raises(UserError, match="spec style"):
        episode_tools(env.tools(), "bpe", style="no-such-style")
    with pytest.raises(UserError, match="harness must be"):
        episode_tools(env, "react")


def test_system_prompts_are_one_text_per_harness() -> None:
    assert instructions("none") == prompt_text("system")
    assert instructions("bpe") == f"{prompt_text('system')}\n\n{prompt_text('bpe')}"
    assert system_prompt("bpe", dashboard="<workspace/>").endswith("\n\n<workspace/>")
    assert system_prompt("append", memory=["a", "b"]).endswith("<memory>\na\nb\n</memory>")
    assert system_prompt("none", "Be brief.") == "Be brief."


def test_window_keeps_the_task_and_reaches_back_to_the_call_of_a_kept_result() -> None:
    history = [{"role": "user", "content": "task"}]
    history += [{"role": "assistant", "tool_calls": [{"id": "a"}, {"id": "b"}]},
                {"role": "tool", "tool_call_id": "a"}, {"role": "tool", "tool_call_id": "b"}] * 3
    shown = window(history, 2)
    assert [m["role"] for m in shown] == ["user", "assistant", "tool", "tool"]
    assert window(history, None) == history and window(history[:3], 5) == history[:3]
    with pytest.raises(UserError):
        window(history, 0)


def test_prompt_tokens_count_the_tool_section_and_prefer_an_exact_counter() -> None:
    messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": "do the task"}]
    tools = make_env("crm-migration", 1).tools()
    bare, with_tools = count_prompt_tokens(messages), count_prompt_tokens(messages, tools)
    assert with_tools.tokens > bare.tokens * 10 and with_tools.source == "approximate"

    class Counting:
        def complete(self, messages, tools):  # a policy with an exact counter
            raise AssertionError("not called")

        def count_prompt_tokens(self, messages, tools):
            return 1000 + len(messages) if tools else None

    assert count_prompt_tokens(messages, tools, Counting()) == PromptTokens(1002, "exact")
    assert count_prompt_tokens(messages, [], Counting()) == bare  # no exact figure: approximate
    assert count_prompt_tokens(messages, tools, ScriptedPolicy([])).source == "approximate"


def test_counters_label_mixed_token_sources_and_count_invalid_actions() -> None:
    c = EpisodeCounters()
    c.prompt(PromptTokens(10, "exact"))
    assert c.reply([{"id": "x"}]) is True
    c.meta_action("track", ok=False)
    c.env_step(invalid=True)
    c.env_step()
    c.prompt(PromptTokens(12, "approximate"))
    c.reply([])
    assert c.outcome_info() == {"steps": 2, "invalid_actions": 3}
    meta = c.metadata()
    assert meta["prompt_tokens"] == [10, 12] and meta["prompt_token_source"] == "mixed"
    assert meta["meta_actions_per_call"] == [1, 0] and meta["meta_actions"]["track"] == 1 and meta["silent_replies"] == 1


def test_a_parsed_tool_call_enters_the_history_once() -> None:
    # A local model's reply: the call markup as text, and the call it was parsed into.
    raw = '<tool_call>{"name": "list_customers", "arguments": {"page": 1}}</tool_call>'
    call = {"id": "c1", "type": "function", "function": {"name": "list_customers", "arguments": '{"page": 1}'}}
    policy = ScriptedPolicy([{"role": "assistant", "content": f"Page one first. {raw}", "tool_calls": [call]}])
    env = make_env("crm-migration", 1)
    trace = run_episode(env, policy, None, EpisodeConfig(harness="bpe", seed=0, max_steps=2))
    shown = trace.model_calls[1].messages
    reply = next(m for m in shown if m["role"] == "assistant")
    assert reply["content"] == "Page one first." and reply["tool_calls"][0]["id"] == "c1"
    rendered = "\n".join(m["content"] for m in _chat(shown, trace.tools))
    assert rendered.count('"name": "list_customers"') == 1
    assert history_message({"content": raw, "tool_calls": [call]})["content"] is None
    assert history_message({"content": raw})["content"] == raw  # no parsed call: the text stays
