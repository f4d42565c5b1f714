"""The text action syntax: ``<action>verb [argument]</action>`` read into tool calls and back."""

from __future__ import annotations

import doctest
import json
from pathlib import Path
from typing import Any

import pytest

from evoharness_bpe.harness import episode_tools, meta_action_tools, prompt_text
from evoharness_bpe.lab.cli import main
from evoharness_bpe.lab.envs import make_env
from evoharness_bpe.lab.frameworks import EpisodeConfig
from evoharness_bpe.lab.policies import ExpertPolicy, TextActionPolicy
from evoharness_bpe.lab.policies import textactions
from evoharness_bpe.lab.policies.textactions import ActionSyntaxError, actions_prompt, parse_actions, render_action
from evoharness_bpe.lab.runner.core import run_episode
from evoharness_bpe.lab.runner.fingerprint import policy_identity
from evoharness_bpe.lab.runner.suite import RunConfig
from evoharness_bpe.stores.memory import MemoryExperienceStore
from evoharness_bpe.testing.openai_server import QuirkyServer
from evoharness_bpe.testing.scripted import ScriptedPolicy
from evoharness_bpe.trace import read_traces

META = meta_action_tools()


def _call(name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"id": "c", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def _read(text: str, tools: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in parse_actions(text, tools)]


def test_the_module_examples_run() -> None:
    assert doctest.testmod(textactions, optionflags=doctest.ELLIPSIS).failed == 0


# -- round trips --------------------------------------------------------------------------------
META_CALLS = [
    ("track", {"key": "api.rate_limit", "value": "1 batch / 3 s"}, "<action>track api.rate_limit = 1 batch / 3 s</action>"),
    ("track", {"key": "page.next", "value": "a=b"}, "<action>track page.next = a=b</action>"),
    ("track", {"key": "page.next", "value": None}, None),  # a retraction: JSON only
    ("track", {"key": "api.rate_limit", "value": "3", "source": "submit_batch", "confidence": 0.5}, None),
    ("commit", {"subgoal": "batch 1", "status": "done"}, "<action>commit batch 1 = done</action>"),
    ("commit", {"subgoal": "x = y", "status": "blocked"}, "<action>commit x = y = blocked</action>"),
    ("commit", {"subgoal": "batch 2", "status": "failed", "note": "429 three times"}, None),
    ("recall", {"query": "crm rate limit"}, "<action>recall crm rate limit</action>"),
    ("recall", {"query": "crm rate limit", "k": 5}, None),
    ("note", {"text": "Wait 3 s between batches, then resend the same one."},
     "<action>note Wait 3 s between batches, then resend the same one.</action>"),
    ("note", {"text": "a note that closes </action> and says \"quoted\"", "kind": "pitfall", "tags": ["crm"]}, None),
    ("note", {"text": "[bracketed]"}, None),
    ("note", {"text": "replaces an old one", "supersedes": "be8014b866674d21"}, None),
]


@pytest.mark.parametrize("style", ["full", "compact"])
@pytest.mark.parametrize(("name", "args", "short"), META_CALLS)
def test_every_meta_action_round_trips(style: str, name: str, args: dict[str, Any], short: str | None) -> None:
    tools = meta_action_tools(style)
    text = render_action(_call(name, args), tools)
    assert _read(text, tools) == [(name, args)]
    if short is not None:  # the short forms are the ones written, not only the JSON one
        assert text == short
    else:
        assert text.startswith(f"<action>{name} {{")


def test_the_reference_forms_of_the_meta_actions_parse() -> None:
    assert _read("<think>no lessons yet?</think>\n<action>recall [crm rate limit]</action>", META) == [
        ("recall", {"query": "crm rate limit"})]
    assert _read("<action>commit [fetch page 1]</action>", META) == [("commit", {"subgoal": "fetch page 1", "status": "doing"})]
    assert _read('<action>note {"text": "x", "kind": "pitfall"}</action>', META) == [("note", {"text": "x", "kind": "pitfall"})]
    assert _read("<action>TRACK egg = fridge 1</action>", META) == [("track", {"key": "egg", "value": "fridge 1"})]
    assert _read('<action>recall "quoted query"</action>', META) == [("recall", {"query": "quoted query"})]


def _expert_calls(env_name: str) -> list[tuple[str, dict[str, Any]]]:
    env = make_env(env_name)
    trace = run_episode(env, ExpertPolicy(env), MemoryExperienceStore(), EpisodeConfig(harness="bpe", seed=0))
    assert trace.outcome.success
    return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for m in trace.messages
            for c in m.get("tool_calls") or ()]


@pytest.mark.parametrize("env_name", ["crm-migration", "compliance-review"])
def test_every_call_of_an_expert_episode_round_trips(env_name: str) -> None:
    tools = episode_tools(make_env(env_name), "bpe")
    calls = _expert_calls(env_name)
    env_names = {t["function"]["name"] for t in make_env(env_name).tools()}
    assert env_names <= {name for name, _ in calls} | {"report_invalid", "wait", "escalate"}
    for name, args in calls:
        assert _read(render_action(_call(name, args), tools), tools) == [(name, args)], name


def test_environment_tools_take_a_bare_value_or_a_json_object() -> None:
    crm = episode_tools(make_env("crm-migration"), "bpe")
    assert _read("<action>fetch_page 2</action>", crm) == [("fetch_page", {"page": 2})]
    assert _read("<action>wait [3]</action>", crm) == [("wait", {"seconds": 3})]
    assert _read("<action>report_invalid [R0004, R0008]</action>", crm) == [("report_invalid", {"record_ids": ["R0004", "R0008"]})]
    assert _read('<action>report_invalid ["R0004", "R0008"]</action>', crm) == [
        ("report_invalid", {"record_ids": ["R0004", "R0008"]})]
    assert _read("<action>finish</action>", crm) == [("finish", {})]
    assert _read('<action>submit_batch {"batch_id": 1, "record_ids": ["R0001"]}</action>', crm) == [
        ("submit_batch", {"batch_id": 1, "record_ids": ["R0001"]})]
    review = episode_tools(make_env("compliance-review"), "bpe")
    assert _read("<action>get_transaction T0003</action>", review) == [("get_transaction", {"transaction_id": "T0003"})]
    assert _read("<action>check_sanctions Orion Shipping Ltd</action>", review) == [
        ("check_sanctions", {"counterparty": "Orion Shipping Ltd"})]
    assert render_action(_call("decide", {"transaction_id": "T1", "decision": "flag"}), review) == \
        '<action>decide {"transaction_id": "T1", "decision": "flag"}</action>'


def test_an_action_without_a_verb_goes_to_the_environments_one_tool_as_in_the_reference() -> None:
    tools = episode_tools(make_env("alfworld"), "bpe")
    policy = TextActionPolicy(ScriptedPolicy([]), default_tool="auto")
    assert policy.resolve_default_tool(tools) == "act"
    assert policy.resolve_default_tool(episode_tools(make_env("crm-migration"), "bpe")) is None  # several tools: none
    with pytest.raises(ActionSyntaxError, match="unknown verb 'go'"):
        parse_actions("<action>go to countertop 1</action>", tools)
    calls = parse_actions("<action>go to countertop 1</action><action>recall heat task</action>", tools, default_tool="act")
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == [
        ("act", {"command": "go to countertop 1"}), ("recall", {"query": "heat task"})]
    for name, args in _expert_calls("alfworld"):
        text = render_action(_call(name, args), tools, default_tool="act")
        assert parse_actions(text, tools, default_tool="act")[0]["function"] == {"name": name, "arguments": json.dumps(args)}
        if name == "act" and not args["command"].split()[0] in {"track", "commit", "recall", "note", "act"}:
            assert text == f"<action>{args['command']}</action>"  # written as the reference writes it
    block = policy.render_messages([{"role": "system", "content": "sys"}], tools)[0]["content"]
    assert "- <action><command></action> or <action>act <command></action>" in block


def test_the_instruction_block_lists_every_tool_offered_with_its_form() -> None:
    tools = episode_tools(make_env("crm-migration"), "bpe")
    block = actions_prompt(tools)
    assert "<action>verb [argument]</action>" in block
    for form in ("<action>fetch_page <page></action>", '<action>submit_batch {"batch_id": 1, "record_ids": ["..."]}</action>',
                 "<action>finish</action>", "<action>track <key> = <value></action>",
                 "<action>commit <subgoal> = <status></action>", "<action>recall <query></action>", "<action>note <text></action>"):
        assert form in block, form
    assert "record_ids" in block and "kind" in block  # optional parameters are named with their JSON form
    panels = actions_prompt(episode_tools(make_env("crm-migration"), "panels"))
    assert "recall" not in panels and "track" not in panels  # only what is offered


# -- refusals -----------------------------------------------------------------------------------
MALFORMED = [
    ("<action>fly away</action>", ["unknown verb 'fly'", "fetch_page", "note", "<action>verb [argument]</action>"]),
    ("<action>fetch_page</action>", ["fetch_page needs an argument (page)", "<action>fetch_page 1</action>"]),
    ("<action>recall</action>", ["recall needs an argument (query)", "<action>recall <query></action>"]),
    ("<action>fetch_page one</action>", ["page must be a whole number, not 'one'", "<action>fetch_page 1</action>"]),
    ('<action>note {"text": "x",}</action>', ["JSON object of note does not parse", '<action>note {"text": "..."}</action>']),
    ('<action>note {"text": "x"} and more</action>', ["text after the JSON object of note: 'and more'", "<action>note {"]),
    ("<action>submit_batch 1</action>", ["submit_batch takes several values (batch_id, record_ids)", "JSON object",
                                         '<action>submit_batch {"batch_id": 1, "record_ids": ["..."]}</action>']),
    ("<action>finish now</action>", ["finish takes no argument, got 'now'", "<action>finish</action>"]),
    ("<action>track api.rate_limit</action>", ["track needs <key> = <value>", "<action>track <key> = <value></action>"]),
    ("<action>track = 3</action>", ["track needs a key before '='", "<action>track <key> = <value></action>"]),
    ("<action>commit batch 1 =</action>", ["commit needs a status after '='", "<action>commit <subgoal> = <status></action>"]),
    ("<action>fetch_page 1", ["<action> tag is not closed", "<action>verb [argument]</action>"]),
    ("<action>  </action>", ["the action is empty", "<action>verb [argument]</action>"]),
]


@pytest.mark.parametrize(("text", "fragments"), MALFORMED)
def test_a_malformed_action_is_refused_readably(text: str, fragments: list[str]) -> None:
    tools = episode_tools(make_env("crm-migration"), "bpe")
    with pytest.raises(ActionSyntaxError) as caught:
        parse_actions(text, tools)
    for fragment in fragments:
        assert fragment in str(caught.value), (fragment, str(caught.value))
    assert "expected" in str(caught.value)


def test_one_malformed_action_refuses_the_whole_reply() -> None:
    tools = episode_tools(make_env("crm-migration"), "bpe")
    with pytest.raises(ActionSyntaxError, match="unknown verb 'fly'"):
        parse_actions("<action>fetch_page 1</action><action>fly</action>", tools)
    assert _read("<action>fetch_page 1</action> then <action>wait 2</action>", tools) == [
        ("fetch_page", {"page": 1}), ("wait", {"seconds": 2})]
    assert parse_actions("no action at all", tools) == []


# -- the policy ---------------------------------------------------------------------------------
def test_the_policy_refuses_a_malformed_reply_and_shows_the_error_in_place_of_the_nudge() -> None:
    tools = episode_tools(make_env("crm-migration"), "bpe")
    inner = ScriptedPolicy(["<think>hmm</think><action>fetch_page one</action>", "<action>fetch_page 1</action>"])
    policy = TextActionPolicy(inner)
    conversation = [{"role": "system", "content": "sys"}, {"role": "user", "content": "task"}]
    reply = policy.complete(conversation, tools)
    assert "tool_calls" not in reply
    assert reply["content"].startswith("<think>hmm</think><action>fetch_page one</action>")
    assert "page must be a whole number" in reply["content"]
    conversation += [reply, {"role": "user", "content": prompt_text("nudge")}]
    second = policy.complete(conversation, tools)
    assert second["tool_calls"][0]["function"] == {"name": "fetch_page", "arguments": '{"page": 1}'}
    seen = inner.calls[1]
    assert inner.tools_seen == [[], []]  # the inner policy is never offered tools
    assert seen[2] == {"role": "assistant", "content": "<think>hmm</think><action>fetch_page one</action>"}
    assert seen[3]["role"] == "user" and seen[3]["content"].startswith("Your reply was not carried out, nothing was done: ")
    assert "fetch_page's page must be a whole number" in seen[3]["content"] and "tool_call" not in seen[3]["content"]
    silent = TextActionPolicy(ScriptedPolicy(["I will fetch the page."])).complete(conversation[:2], tools)
    assert "tool_calls" not in silent and "no <action>…</action> in the reply" in silent["content"]


def test_the_policy_counts_the_prompt_its_inner_policy_is_sent() -> None:
    class Counting(ScriptedPolicy):
        def count_prompt_tokens(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> int:
            assert tools == [] and "# Actions" in messages[0]["content"]
            return sum(len(str(m["content"])) for m in messages)

    tools = episode_tools(make_env("crm-migration"), "bpe")
    policy = TextActionPolicy(Counting([]))
    messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": "task"}]
    assert policy.count_prompt_tokens(messages, tools) == sum(len(m["content"]) for m in policy.render_messages(messages, tools))
    assert TextActionPolicy(ExpertPolicy(make_env("crm-migration"))).count_prompt_tokens(messages, tools) is None


def _crm_script() -> list[Any]:
    """A text-only player of crm-migration (seed 0): reads the rejected ids from the results it is shown."""

    def report(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> str:
        result = messages[-1]["content"]
        assert result.startswith("Result of submit_batch:\n")  # tool results arrive as user text
        ids = sorted(json.loads(result.split("\n", 1)[1])["rejected"])
        return f"<think>{len(ids)} rejected</think>\n<action>report_invalid [{', '.join(ids)}]</action>"

    batch1 = json.dumps({"batch_id": 1, "record_ids": [f"R{i:04d}" for i in range(1, 11)]})
    batch2 = json.dumps({"batch_id": 2, "record_ids": [f"R{i:04d}" for i in range(11, 21)]})
    return [
        "<think>lessons first</think><action>recall crm rate limit</action>",
        "<action>fetch_page [1]</action>",
        f"<action>submit_batch {batch1}</action>",
        report,
        "<action>commit batch 1 = done</action>",
        f"<action>submit_batch {batch2}</action>",  # 429: rate limited
        "<action>track api.min_interval_s = 3</action>",
        "<action>wait 1</action>",
        f"<action>submit_batch {batch2}</action>",
        report,
        '<action>note {"text": "The CRM API rate-limits batches: wait, then resend the same batch.", "kind": "pitfall"}</action>',
        "<action>finish</action>",
    ]


def test_a_text_only_policy_plays_a_whole_crm_episode_through_the_core_runner() -> None:
    env = make_env("crm-migration")
    inner = ScriptedPolicy(_crm_script())
    store = MemoryExperienceStore()
    trace = run_episode(env, TextActionPolicy(inner), store, EpisodeConfig(harness="bpe", seed=0))
    assert trace.outcome.success and trace.outcome.info["invalid_actions"] == 0
    assert [e.name for e in trace.meta_actions] == ["recall", "commit", "track", "note"]
    assert all(e.ok for e in trace.meta_actions)
    names = [c["function"]["name"] for m in trace.messages for c in m.get("tool_calls") or ()]
    assert names[:3] == ["recall", "fetch_page", "submit_batch"] and names[-1] == "finish"
    assert inner.tools_seen == [[]] * len(inner.calls)
    last = inner.calls[-1]
    assert "# Actions" in last[0]["content"] and "<action>fetch_page <page></action>" in last[0]["content"]
    assert {m["role"] for m in last} == {"system", "user", "assistant"}  # no tool messages, no tool_calls
    assert "<action>track api.min_interval_s = 3</action>" in [m["content"] for m in last if m["role"] == "assistant"]
    assert ["rate-limits batches" in e.text for e in store.list(("default",))] == [True]  # the note reached the store


def test_a_malformed_action_leaves_the_workspace_and_the_environment_unchanged() -> None:
    script = _crm_script()
    early = ["<action>track api.min_interval_s</action>", '<action>commit {"subgoal": "batch 1", </action>']
    late = ["<action>submit_batch 2</action>", "<action>launch the batch</action>"]
    script[11:11] = late  # before finish (two in a row: a third silent reply would end the episode)
    script[5:5] = early  # after batch 1 was committed
    env = make_env("crm-migration")
    inner = ScriptedPolicy(script)
    trace = run_episode(env, TextActionPolicy(inner), MemoryExperienceStore(), EpisodeConfig(harness="bpe", seed=0))
    assert trace.outcome.success
    assert trace.outcome.info["invalid_actions"] == 4
    assert trace.metadata["silent_replies"] == 4  # replies without a call: nothing was called
    assert [e.name for e in trace.meta_actions] == ["recall", "commit", "track", "note"]  # no event for the refused ones
    def state(call: list[dict[str, Any]]) -> str:  # the dashboard less its cost line (each render costs)
        return "\n".join(line for line in call[0]["content"].splitlines() if not line.startswith("COST:"))

    for at in (5, 13):  # the same Belief, Progress and Experience before, during and after the refused replies
        assert len({state(call) for call in inner.calls[at:at + 3]}) == 1
    assert state(inner.calls[4]) != state(inner.calls[5])  # (a valid action does change it)
    assert trace.outcome.info["landed"] == 16 and trace.outcome.info["repeated_batches"] == 0
    errors = [m["content"] for call in inner.calls for m in call[-1:] if m["content"].startswith("Your reply was not")]
    assert "track needs <key> = <value>" in errors[0] and "does not parse" in errors[1]
    assert "submit_batch takes several values" in errors[2] and "unknown verb 'launch'" in errors[3]


# -- evoharness run -------------------------------------------------------------------------------
def test_run_with_text_actions_against_a_server_without_tool_calling(tmp_path: Path) -> None:
    script = _crm_script()
    seen: list[dict[str, Any]] = []

    def turn(body: dict[str, Any]) -> str:
        seen.append(body)
        item = script[len(seen) - 1] if len(seen) <= len(script) else "Done."
        return item(body["messages"], []) if callable(item) else item

    out = tmp_path / "run"
    with QuirkyServer(turn, grammar_limit=False) as srv:
        code = main(["run", "--env", "crm-migration", "--policy", "openai", "--model", "m", "--base-url", srv.url,
                     "--harness", "bpe", "--action-syntax", "text", "--out", str(out)])
    assert code == 0
    assert seen and all("tools" not in body for body in seen)
    (trace,) = list(read_traces(out / "traces.jsonl"))
    assert trace.outcome.success and trace.outcome.info["invalid_actions"] == 0
    assert [c["function"]["name"] for m in trace.messages for c in m.get("tool_calls") or ()][-1] == "finish"


def test_the_action_syntax_is_checked_and_part_of_the_fingerprint() -> None:
    with pytest.raises(Exception, match="--action-syntax must be tools or text"):
        RunConfig(action_syntax="xml")
    tools = RunConfig(policies=["openai"], model="m")
    text = RunConfig(policies=["openai"], model="m", action_syntax="text")
    assert "action_syntax" not in policy_identity("openai", tools)  # tool-call runs keep their fingerprints
    assert policy_identity("openai", text)["action_syntax"]["syntax"] == "text"
    assert policy_identity("expert", text) == policy_identity("expert", tools)  # experts always call tools
