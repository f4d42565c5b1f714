"""Step-level cost-aware GRPO: states from traces, replayed continuations, their rewards."""

from __future__ import annotations

import json

import pytest

from evoharness_bpe.lab.envs import make_env
from evoharness_bpe.lab.frameworks import EpisodeConfig
from evoharness_bpe.lab.runner.core import run_episode
from evoharness_bpe import META_ACTIONS
from evoharness_bpe_training.continuation import ContinuationPolicy, ContinuationReward, consulting_states, episode_cost, state_rows
from evoharness_bpe_training.rewards import CostWeights

CONFIG = EpisodeConfig(seed=3, spec_style="compact", window=4, dashboard_tokens=120)


class _Rest:
    """Plays on with the expert's recorded replies after position `k` (then finishes)."""

    def __init__(self, replies, k: int) -> None:
        self.replies, self.next = replies, k + 1

    def complete(self, messages, tools):
        if self.next >= len(self.replies):
            return {"role": "assistant", "content": None, "tool_calls": [
                {"id": "end", "type": "function", "function": {"name": "finish", "arguments": "{}"}}]}
        self.next += 1
        return json.loads(json.dumps(self.replies[self.next - 1]))


def test_state_rows_hold_each_prompt_and_the_replies_before_it(expert_trace) -> None:
    rendered = []
    rows = state_rows([expert_trace], lambda messages, tools: rendered.append((messages, tools)) or f"p{len(rendered)}")
    assert len(rows) == len(expert_trace.model_calls)
    for position, row in enumerate(rows):
        assert row["position"] == position and row["seed"] == 3 and row["difficulty"] == 1
        assert [r["tool_calls"][0]["function"] for r in json.loads(row["replies"])] == [
            c.response["tool_calls"][0]["function"] for c in expert_trace.model_calls[:position]]
    assert rendered[2] == (expert_trace.model_calls[2].messages, expert_trace.tools)


def test_replaying_the_recorded_replies_reproduces_the_episode(expert_trace) -> None:
    replies = [c.response for c in expert_trace.model_calls]
    replay = run_episode(make_env("crm-migration", 1), ContinuationPolicy(replies[:-1], replies[-1], policy=None), None, CONFIG)
    assert replay.outcome.success and replay.outcome.info == expert_trace.outcome.info
    assert episode_cost(replay).meta_calls == episode_cost(expert_trace).meta_calls > 0


def test_reward_prefers_the_expert_action_over_a_malformed_one(expert_trace) -> None:
    replies = [c.response for c in expert_trace.model_calls]
    reward = ContinuationReward(make_env=lambda name, level: make_env(name, level), config=CONFIG,
                                weights=CostWeights(lam=0.05, mu=0.0, invalid_penalty=0.1))
    row = state_rows([expert_trace], lambda m, t: "")[2]
    good = replies[2]["tool_calls"][0]["function"]
    good_text = f'<tool_call>\n{{"name": "{good["name"]}", "arguments": {good["arguments"]}}}\n</tool_call>'
    scores = []
    for text in (good_text, good_text, "no call at all"):
        reward.policy = _Rest(replies, 2)  # a fresh player per episode
        scores += reward([row["prompt"]], [text], seed=[row["seed"]], difficulty=[1], replies=[row["replies"]], env=[row["env"]])
    assert scores[0] == scores[1]  # the same action and continuation score the same
    expected = 1.0 - 0.05 * episode_cost(expert_trace).meta_calls
    assert scores[0] == pytest.approx(expected)  # the recorded episode's own reward
    assert scores[2] < scores[0]  # a malformed reply is an invalid action, and the plan is off by one
    assert [r["success"] for r in reward.log[:2]] == [1.0, 1.0]
    assert reward.log[0]["action"] == good["name"] and reward.log[2]["action"] is None


def test_reward_without_a_policy_is_a_clear_error(expert_trace) -> None:
    from evoharness_bpe.exceptions import UserError

    reward = ContinuationReward(make_env=lambda name, level: make_env(name, level), config=CONFIG)
    with pytest.raises(UserError, match="policy is not set"):
        reward(["p"], ["x"], seed=[0], difficulty=[1], replies=["[]"], env=["crm-migration"])


def test_consulting_states_are_those_where_the_policy_called_a_meta_action(expert_trace) -> None:
    rows = state_rows([expert_trace], lambda m, t: "")
    called = [c.response["tool_calls"][0]["function"]["name"] for c in expert_trace.model_calls]
    assert [row["called"] for row in rows] == called
    consulting = consulting_states(rows)
    assert [row["position"] for row in consulting] == [n for n, name in enumerate(called) if name in META_ACTIONS]
    assert 0 < len(consulting) < len(rows)  # the expert also acts on the environment


def test_reference_scorer_scores_the_continued_episode_with_the_reference_reward(expert_trace) -> None:
    from evoharness_bpe_training.continuation import reference_scorer
    from evoharness_bpe_training.reference_reward import ReferenceRewardWeights, reference_reward_from_trace

    replies = [c.response for c in expert_trace.model_calls]
    row = state_rows([expert_trace], lambda m, t: "")[2]
    good = replies[2]["tool_calls"][0]["function"]
    text = f'<tool_call>\n{{"name": "{good["name"]}", "arguments": {good["arguments"]}}}\n</tool_call>'
    scores = {}
    for update in (0, 150):
        reward = ContinuationReward(make_env=lambda name, level: make_env(name, level), config=CONFIG, scorer=reference_scorer())
        reward.policy = _Rest(replies, 2)
        state = type("State", (), {"global_step": update})()
        scores[update] = reward([row["prompt"]], [text], seed=[row["seed"]], difficulty=[1], replies=[row["replies"]],
                                env=[row["env"]], trainer_state=state)[0]
    weights = ReferenceRewardWeights()
    assert scores[0] == pytest.approx(reference_reward_from_trace(expert_trace, 0, weights)[0])
    assert scores[150] == pytest.approx(reference_reward_from_trace(expert_trace, 150, weights)[0])
    assert scores[0] > scores[150]  # the diversity bonus anneals away over the updates


def test_continuations_of_a_group_play_in_lockstep_and_score_as_played_alone(expert_trace) -> None:
    replies = [c.response for c in expert_trace.model_calls]
    row = state_rows([expert_trace], lambda m, t: "")[2]
    good = replies[2]["tool_calls"][0]["function"]
    texts = [f'<tool_call>\n{{"name": "{good["name"]}", "arguments": {good["arguments"]}}}\n</tool_call>', "no call at all"]
    results = {}
    for lockstep in (True, False):
        reward = ContinuationReward(make_env=lambda name, level: make_env(name, level), config=CONFIG, lockstep=lockstep)
        reward.policy = _StatelessExpert()
        results[lockstep] = reward([row["prompt"]] * 2, texts, seed=[row["seed"]] * 2, difficulty=[1, 1],
                                   replies=[row["replies"]] * 2, env=[row["env"]] * 2)
    assert results[True] == results[False] and results[True][0] > results[True][1]
    assert _StatelessExpert.batches and max(_StatelessExpert.batches) == 2  # both continuations in one round


class _StatelessExpert:
    """Answers every prompt with `finish` (no state across episodes), batching when asked."""

    batches: list[int] = []

    def complete(self, messages, tools):
        return {"role": "assistant", "content": None, "tool_calls": [
            {"id": "end", "type": "function", "function": {"name": "finish", "arguments": "{}"}}]}

    def complete_batch(self, requests):
        type(self).batches.append(len(requests))
        return [self.complete(m, t) for m, t in requests]


class _Waiter:
    """Plays on with `wait` for ever: an episode that never finishes by itself."""

    def __init__(self) -> None:
        self.calls = 0

    def complete(self, messages, tools):
        self.calls += 1
        return {"role": "assistant", "content": None, "tool_calls": [
            {"id": f"w{self.calls}", "type": "function", "function": {"name": "wait", "arguments": '{"seconds": 1}'}}]}


def _call_text(function: dict, spaced: bool = False) -> str:
    arguments = function["arguments"] if isinstance(function["arguments"], str) else json.dumps(function["arguments"])
    if spaced:
        arguments = json.dumps(json.loads(arguments), indent=None, separators=(" ,", " :  "))
    return f'<tool_call>\n{{"name": "{function["name"]}", "arguments": {arguments}}}\n</tool_call>'


def test_a_continuation_budget_cuts_the_episode_after_that_many_calls(expert_trace) -> None:
    row = state_rows([expert_trace], lambda m, t: "")[2]
    good = expert_trace.model_calls[2].response["tool_calls"][0]["function"]
    played = {}
    for budget in (None, 4):
        waiter = _Waiter()
        reward = ContinuationReward(make_env=lambda name, level: make_env(name, level), config=CONFIG.model_copy(update={"max_steps": 40}),
                                    continuation_calls=budget)
        reward.policy = waiter
        reward([row["prompt"]], [_call_text(good)], seed=[row["seed"]], difficulty=[1], replies=[row["replies"]], env=[row["env"]])
        played[budget] = (waiter.calls, reward.log[-1])
    assert played[4][0] == 4  # the replayed replies and the action are not counted
    assert played[None][0] == 40 - 3  # without a budget the episode runs to max_steps
    assert played[4][1]["success"] == 0.0


def test_texts_that_parse_to_the_same_call_play_one_continuation(expert_trace) -> None:
    replies = [c.response for c in expert_trace.model_calls]
    row = state_rows([expert_trace], lambda m, t: "")[2]
    good = replies[2]["tool_calls"][0]["function"]
    texts = [_call_text(good), _call_text(good, spaced=True), "no call at all"]
    assert texts[0] != texts[1]
    reward = ContinuationReward(make_env=lambda name, level: make_env(name, level), config=CONFIG)
    reward.policy = _StatelessExpert()
    played = []
    original = reward._play
    reward._play = lambda episodes, model: played.append(len(episodes)) or original(episodes, model)
    scores = reward([row["prompt"]] * 3, texts, seed=[row["seed"]] * 3, difficulty=[1] * 3, replies=[row["replies"]] * 3,
                    env=[row["env"]] * 3)
    assert played == [2] and scores[0] == scores[1] != scores[2]
    assert len(reward.log) == 3


def test_successful_states_keep_the_rows_of_episodes_that_succeeded(expert_trace) -> None:
    from evoharness_bpe_training.continuation import successful_states

    failed = expert_trace.model_copy(deep=True)
    failed.outcome.success = False
    rows = state_rows([expert_trace, failed], lambda m, t: "")
    kept = successful_states(rows)
    assert len(kept) == len(expert_trace.model_calls) and all(row["succeeded"] for row in kept)
    assert len(rows) == 2 * len(kept)


def test_the_log_says_what_the_state_called_and_exploration_counts_the_skips(expert_trace) -> None:
    from evoharness_bpe_training.reproduce_report import exploration

    replies = [c.response for c in expert_trace.model_calls]
    rows = state_rows([expert_trace], lambda m, t: "")
    consulting = next(row for row in rows if row["called"] in META_ACTIONS)
    acting = next(r for r in replies[consulting["position"]:] if r["tool_calls"][0]["function"]["name"] not in META_ACTIONS)
    texts = [_call_text(replies[consulting["position"]]["tool_calls"][0]["function"]),
             _call_text(acting["tool_calls"][0]["function"]), "no call at all"]
    reward = ContinuationReward(make_env=lambda name, level: make_env(name, level), config=CONFIG)
    reward.policy = _StatelessExpert()
    reward([consulting["prompt"]] * 3, texts, seed=[consulting["seed"]] * 3, difficulty=[1] * 3,
           replies=[consulting["replies"]] * 3, env=[consulting["env"]] * 3, called=[consulting["called"]] * 3)
    assert [r["state_called"] for r in reward.log] == [consulting["called"]] * 3
    seen = exploration(reward.log)
    assert seen == {"samples": 3, "meta": 1, "skips": 1, "successful_skips": 0}  # finishing early fails the migration
    assert exploration([{**r, "state_called": "fetch_page"} for r in reward.log]) is None


def test_a_group_whose_outcome_the_action_did_not_decide_scores_its_mean(expert_trace) -> None:
    """`skip_uniform_groups`: a state's samples that all succeeded score their mean (advantage 0,
    the price differences between them dropped); a group where the action decided keeps its rewards."""
    rows = state_rows([expert_trace], lambda m, t: "")
    noting, finishing = rows[-2], rows[-1]  # the last note's state, then the finish's
    finish = _call_text({"name": "finish", "arguments": "{}"})
    resend = _call_text({"name": "submit_batch", "arguments": json.dumps({"batch_id": 1, "record_ids": ["R0001"]})})
    group = [noting] * 2 + [finishing] * 2
    texts = [finish, resend, finish, "no call at all"]
    scores, logs = {}, {}
    for flatten in (False, True):
        reward = ContinuationReward(make_env=lambda name, level: make_env(name, level), config=CONFIG, skip_uniform_groups=flatten)
        reward.policy = _StatelessExpert()
        scores[flatten] = reward([r["prompt"] for r in group], texts, seed=[r["seed"] for r in group], difficulty=[1] * 4,
                                 replies=[r["replies"] for r in group], env=[r["env"] for r in group])
        logs[flatten] = reward.log
    played, flat = scores[False], scores[True]
    assert [r["success"] for r in logs[False]] == [1.0, 0.0, 1.0, 1.0]
    assert played[2] > played[3]  # both finish; the invalid reply pays its price
    assert flat[:2] == played[:2]  # finishing succeeded where resending batch 1 failed: the action decided
    assert flat[2] == flat[3] == pytest.approx((played[2] + played[3]) / 2)
    assert logs[True][3]["scored"] == played[3] and "scored" not in logs[True][0]


def test_a_failed_skip_scores_its_group_mean_and_a_paying_one_keeps_its_reward(expert_trace) -> None:
    """`skips_pull_only`: the injected skip that did worse than the rest of its state's group gets
    the rest's mean (advantage 0); one that did as well keeps its reward, in its own group."""
    replies = [c.response for c in expert_trace.model_calls]
    rows = state_rows([expert_trace], lambda m, t: "")
    first, second = rows[2], rows[3]
    good = _call_text(replies[2]["tool_calls"][0]["function"])
    texts = [good, "no call at all", good, "no call at all", "no call at all", "no call at all"]
    forced = [False, False, True, True, False, True]
    group = [first] * 4 + [second] * 2
    scores = {}
    for pull_only in (False, True):
        reward = ContinuationReward(make_env=lambda name, level: make_env(name, level), config=CONFIG, skips_pull_only=pull_only)
        reward.policy = _StatelessExpert()
        scores[pull_only] = reward([r["prompt"] for r in group], texts, seed=[r["seed"] for r in group], difficulty=[1] * 6,
                                   replies=[r["replies"] for r in group], env=[r["env"] for r in group], forced=forced)
    played = scores[False]
    good_score, bad_score = played[0], played[1]
    assert played[2] == good_score and played[3] == bad_score and good_score > bad_score
    lifted = scores[True]
    level = (good_score + bad_score + good_score) / 3  # the rest of the first group without the failed skip
    assert lifted[:3] == played[:3] and lifted[3] == pytest.approx(level)
    assert sum(lifted[:4]) / 4 == pytest.approx(lifted[3])  # its group-normalised advantage is 0
    assert lifted[4:] == played[4:] and played[4] == played[5]  # the second state's skip is not below the rest of its group
    assert reward.log[3]["reward"] == pytest.approx(level) and reward.log[3]["scored"] == bad_score
    assert "scored" not in reward.log[0]


def test_decoupled_reward_splits_each_scored_batch_in_its_task_and_cost_parts(expert_trace) -> None:
    """`DecoupledReward`: the task function plays and scores the batch (logging it once), the cost
    function returns the same batch's cost parts; the cost function alone is refused."""
    from evoharness_bpe.exceptions import UserError
    from evoharness_bpe_training.continuation import DecoupledReward
    from evoharness_bpe_training.rewards import decoupled_parts

    rows = state_rows([expert_trace], lambda m, t: "")
    noting = rows[-2]  # the last note's state: finishing there succeeds, resending batch 1 fails
    finish = _call_text({"name": "finish", "arguments": "{}"})
    resend = _call_text({"name": "submit_batch", "arguments": json.dumps({"batch_id": 1, "record_ids": ["R0001"]})})
    recorded = _call_text(expert_trace.model_calls[-2].response["tool_calls"][0]["function"])  # the note itself
    texts = [recorded, finish, resend]
    weights = CostWeights(lam=0.1, mu=0.0)
    reward = ContinuationReward(make_env=lambda name, level: make_env(name, level), config=CONFIG, weights=weights)
    reward.policy = _StatelessExpert()
    task_part, cost_part = DecoupledReward(reward).functions()
    assert (task_part.__name__, cost_part.__name__) == ("task_part", "cost_part")
    with pytest.raises(UserError, match="task first"):
        cost_part([noting["prompt"]] * 3, texts)
    kwargs = dict(seed=[noting["seed"]] * 3, difficulty=[1] * 3, replies=[noting["replies"]] * 3, env=[noting["env"]] * 3)
    task = task_part([noting["prompt"]] * 3, texts, **kwargs)
    cost = cost_part([noting["prompt"]] * 3, texts, **kwargs)
    assert [r["success"] for r in reward.log] == [1.0, 1.0, 0.0] and len(reward.log) == 3
    assert reward.log[0]["meta_calls"] == reward.log[1]["meta_calls"] + 1  # the note costs one call more than finishing
    assert (task, cost) == decoupled_parts(reward.log, ["s"] * 3, weights)
    assert cost[0] == pytest.approx(cost[1] - 0.1) and cost[2] == pytest.approx((cost[0] + cost[1]) / 2)
    with pytest.raises(UserError, match="task first"):  # each batch's parts are read once
        cost_part([noting["prompt"]] * 3, texts, **kwargs)


def _spoilt_episode(expert_trace):
    """The expert's episode with batch 1 resent after the last report, before finishing: every
    record had landed or been reported, and the resend fails the episode."""
    replies = [c.response for c in expert_trace.model_calls]
    resend = next(r for r in replies if r["tool_calls"][0]["function"]["name"] == "submit_batch")
    played = [*replies[:-1], resend]
    trace = run_episode(make_env("crm-migration", 1), ContinuationPolicy(played, replies[-1], policy=None), None, CONFIG)
    last_report = max(n for n, r in enumerate(replies) if r["tool_calls"][0]["function"]["name"] == "report_invalid")
    return trace, list(range(last_report + 1, len(played) + 1))


def test_closing_states_are_those_of_a_failed_episode_where_finishing_succeeds(expert_trace) -> None:
    from evoharness_bpe_training.continuation import closing_states

    spoilt, expected = _spoilt_episode(expert_trace)
    assert not spoilt.outcome.success and spoilt.outcome.info["repeated_batches"] == 1
    rows = state_rows([spoilt], lambda m, t: "")
    closing = closing_states(rows, lambda name, level: make_env(name, level), CONFIG)
    # after the last report every record is settled: finishing there succeeds, up to the resend itself
    assert [row["position"] for row in closing] == expected[:-1]
    assert all(row["closing"] for row in closing) and len(rows) == expected[-1] + 1
    assert closing_states(state_rows([expert_trace], lambda m, t: ""), lambda name, level: make_env(name, level), CONFIG) == []


def test_an_environment_without_the_closing_action_has_no_closing_state(expert_trace) -> None:
    from evoharness_bpe_training.continuation import closing_states

    spoilt, _ = _spoilt_episode(expert_trace)
    rows = state_rows([spoilt], lambda m, t: "")
    assert closing_states(rows, lambda name, level: make_env(name, level), CONFIG, action="close_review") == []
