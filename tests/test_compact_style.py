"""The compact spec style: the same argument shapes in fewer tokens, recorded in the trace."""

from __future__ import annotations

import json

import pytest

from evoharness_bpe import Workspace
from evoharness_bpe.actions import SPEC_STYLES, tool_specs
from evoharness_bpe.exceptions import UserError
from evoharness_bpe.harness import episode_tools, meta_action_tools
from evoharness_bpe.lab.envs import make_env
from evoharness_bpe.lab.frameworks import EpisodeConfig
from evoharness_bpe.lab.policies import ExpertPolicy
from evoharness_bpe.lab.registry import load_framework


def _shape(spec: dict) -> tuple:
    params = spec["function"]["parameters"]
    return spec["function"]["name"], tuple(params["properties"]), tuple(params["required"])


def test_compact_meta_actions_keep_names_fields_and_required() -> None:
    full, compact = meta_action_tools("full"), meta_action_tools("compact")
    assert [_shape(s) for s in compact] == [_shape(s) for s in full]
    assert len(json.dumps(compact)) < len(json.dumps(full)) / 2


def test_compact_call_is_accepted_like_a_full_one() -> None:
    ws = Workspace("g")
    assert ws.act("track", {"key": "api.limit", "value": "5/s"}).ok
    assert ws.act("track", {"key": "api.limit", "value": None}).ok  # null still retracts
    refused = ws.act("track", {"key": "k", "value": "x" * 5000})
    assert not refused.ok and "value" in refused.content  # the limit stays enforced in act


def test_unknown_style_is_a_user_error() -> None:
    assert SPEC_STYLES == ("full", "compact")
    with pytest.raises(UserError, match="spec style 'tiny'"):
        tool_specs("tiny")
    with pytest.raises(UserError, match="style must be one of"):
        make_env("crm-migration", 1).tools(style="tiny")


@pytest.mark.parametrize("name", ["crm-migration", "compliance-review"])
def test_environment_compact_tools_keep_argument_shapes(name: str) -> None:
    env = make_env(name, 1)
    full, compact = env.tools(), env.tools(style="compact")
    assert [_shape(s) for s in compact] == [_shape(s) for s in full]
    assert len(json.dumps(compact)) < len(json.dumps(full))


def test_compact_crm_observation_lists_ids_and_the_expert_still_succeeds() -> None:
    env = make_env("crm-migration", 1)
    trace = load_framework("core")(env, ExpertPolicy(env), None, EpisodeConfig(seed=4, spec_style="compact", window=4))
    assert trace.outcome.success
    assert trace.metadata["spec_style"] == "compact"
    assert trace.tools == episode_tools(make_env("crm-migration", 1), "bpe", style="compact")
    page = next(m for m in trace.messages if m["role"] == "tool" and m["content"].startswith('{"page"'))
    body = json.loads(page["content"])
    assert body["ids"][:2] == ["R0001", "R0002"] and "records" not in body


def test_meta_action_specs_fit_350_smollm2_tokens_in_compact_style() -> None:
    """The compact target, counted with the embedded SmolLM2 tokenizer (each spec's JSON)."""
    pytest.importorskip("transformers")
    from evoharness_bpe.lab.policies.transformers import EMBEDDED_GGUF, embedded_model_dir
    from transformers import AutoTokenizer

    folder = embedded_model_dir()
    assert folder, "the embedded model is part of the dev install (requirements-model.txt)"
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=EMBEDDED_GGUF)

    def tokens(style: str) -> int:
        return sum(len(tokenizer(json.dumps(s), add_special_tokens=False)["input_ids"]) for s in meta_action_tools(style))

    assert tokens("compact") <= 350 < tokens("full")


def test_compact_crm_answer_lists_rejected_ids_beside_the_reasons() -> None:
    env = make_env("crm-migration", 1)
    env.tools(style="compact")  # the style also applies to the observations
    env.reset(3)
    ids = json.loads(env.step({"name": "fetch_page", "arguments": {"page": 1}}).observation)["ids"]
    body = json.loads(env.step({"name": "submit_batch", "arguments": {"batch_id": 1, "record_ids": ids[:10]}}).observation)
    assert body["status"] == 200 and isinstance(body["rejected"], list)
    assert set(body["rejected"]) == env.invalid_ids & set(ids[:10]) != set()
    assert body["reasons"] == sorted(set(body["reasons"])) and body["reasons"]
    assert body["accepted"] + len(body["rejected"]) == 10
