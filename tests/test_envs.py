"""Built-in environments: determinism, the expert solves seeds, malformed calls are readable."""

from __future__ import annotations

import json

import pytest

from evoharness_bpe.lab.envs import Env, make_env
from evoharness_bpe.exceptions import UserError
from evoharness_bpe.lab.frameworks import EpisodeConfig
from evoharness_bpe.lab.policies import ExpertPolicy
from evoharness_bpe.lab.runner.core import run_episode

MALFORMED = [
    ({"name": "no_such_tool", "arguments": "{}"}, "unknown tool"),
    ({"name": "__TOOL__", "arguments": "{not json"}, "not valid JSON"),
    ({"name": "__TOOL__", "arguments": "[1, 2]"}, "must be a JSON object"),
    ({"name": "__TOOL__", "arguments": {}}, "needs the argument"),
    ("just text", "must be an object"),
]


def _solve(env: Env, seed: int, harness: str = "bpe") -> dict:
    trace = run_episode(env, ExpertPolicy(env), None, EpisodeConfig(harness=harness, seed=seed, max_steps=env.step_budget))  # type: ignore[attr-defined]
    return {"success": trace.outcome.success, **trace.outcome.info}


@pytest.mark.parametrize("name", ["crm-migration", "compliance-review"])
@pytest.mark.parametrize("difficulty", [1, 2])
@pytest.mark.parametrize("harness", ["none", "bpe"])
def test_expert_solves_several_seeds(name: str, difficulty: int, harness: str) -> None:
    env = make_env(name, difficulty)
    for seed in range(4):
        result = _solve(env, seed, harness)
        assert result["success"], (seed, result)
        assert result["invalid_actions"] == 0


@pytest.mark.parametrize("name", ["crm-migration", "compliance-review"])
def test_same_seed_same_episode(name: str) -> None:
    a, b = make_env(name, 2), make_env(name, 2)
    assert a.reset(7) == b.reset(7)
    first = {"name": "fetch_page" if name == "crm-migration" else "list_transactions", "arguments": {"page": 1}}
    assert a.step(first).observation == b.step(first).observation
    b.reset(8)
    assert a.step(first).observation != b.step(first).observation


@pytest.mark.parametrize("name", ["crm-migration", "compliance-review"])
def test_malformed_calls_get_readable_observations(name: str) -> None:
    env = make_env(name, 1)
    env.reset(0)
    tool = "submit_batch" if name == "crm-migration" else "decide"
    before = env.outcome().model_dump()
    for call, expected in MALFORMED:
        if isinstance(call, dict):
            call = {**call, "name": call["name"].replace("__TOOL__", tool)}
        result = env.step(call)  # type: ignore[arg-type]
        assert result.info["invalid"] is True and not result.done
        assert result.observation.startswith("Error:") and expected in result.observation
    after = env.outcome().model_dump()
    assert after["info"]["invalid_actions"] == len(MALFORMED)
    assert {k: v for k, v in after["info"].items() if k not in ("steps", "invalid_actions", "clock")} == \
        {k: v for k, v in before["info"].items() if k not in ("steps", "invalid_actions", "clock")}


def test_unknown_environment_is_a_user_error() -> None:
    with pytest.raises(UserError, match="crm-migration"):
        make_env("nope")
    with pytest.raises(UserError, match="difficulty"):
        make_env("crm-migration", 9)


def _crm_call(env, name: str, **args):  # type: ignore[no-untyped-def]
    result = env.step({"name": name, "arguments": json.dumps(args)})
    try:
        return json.loads(result.observation)
    except ValueError:
        return result.observation


def test_crm_rate_limit_transient_failures_and_repeats() -> None:
    env = make_env("crm-migration", 1, records=20, fail_rate=0.0)
    env.reset(3)
    ids = [r["id"] for r in _crm_call(env, "fetch_page", page=1)["records"]]
    first = _crm_call(env, "submit_batch", batch_id=1, record_ids=ids[:10])
    assert first["status"] == 200
    limited = _crm_call(env, "submit_batch", batch_id=2, record_ids=ids[10:])
    assert limited["status"] == 429 and limited["retry_after"] >= 1
    _crm_call(env, "wait", seconds=limited["retry_after"])
    assert _crm_call(env, "submit_batch", batch_id=3, record_ids=ids[10:])["status"] == 409  # would skip batch 2
    _crm_call(env, "wait", seconds=10)
    second = _crm_call(env, "submit_batch", batch_id=2, record_ids=ids[10:])
    assert second["status"] == 200
    rejected = [*first["rejected"], *second["rejected"]]
    assert set(rejected) == env.invalid_ids
    assert not env.outcome().success  # the rejected records are not reported yet
    if rejected:
        _crm_call(env, "report_invalid", record_ids=rejected, reason="schema")
    assert env.outcome().success
    _crm_call(env, "wait", seconds=10)
    _crm_call(env, "submit_batch", batch_id=1, record_ids=ids[:10])  # an applied batch sent again
    assert not env.outcome().success and env.outcome().info["repeated_batches"] == 1


def test_crm_transient_503_applies_nothing() -> None:
    env = make_env("crm-migration", 1, fail_rate=1.0)
    env.reset(0)
    ids = [r["id"] for r in _crm_call(env, "fetch_page", page=1)["records"]]
    assert _crm_call(env, "submit_batch", batch_id=1, record_ids=ids[:5])["status"] == 503
    assert env.outcome().info["landed"] == 0 and env.next_batch == 1


def test_compliance_wrong_decision_or_missing_escalation_fails() -> None:
    env = make_env("compliance-review", 1)
    env.reset(1)
    for tid, (decision, _team) in env.expected.items():
        env.step({"name": "decide", "arguments": {"transaction_id": tid, "decision": decision}})
    needs = [t for t, (_, team) in env.expected.items() if team]
    assert needs, "seed 1 has an escalation"
    assert not env.outcome().success and env.outcome().info["missing_escalations"] == len(needs)
    for t in needs:
        env.step({"name": "escalate", "arguments": {"transaction_id": t, "team": env.expected[t][1]}})
    assert env.outcome().success
    again = env.step({"name": "decide", "arguments": {"transaction_id": "T001", "decision": "clear"}})
    assert again.info["invalid"] and "already decided" in again.observation
    bad_team = env.step({"name": "escalate", "arguments": {"transaction_id": "T001", "team": "legal"}})
    assert bad_team.info["invalid"] and "sanctions, aml" in bad_team.observation
