"""Random sequences of valid and invalid meta-actions keep the workspace's invariants."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evoharness_bpe import BPEState, MemoryExperienceStore, Workspace
from evoharness_bpe.dashboard import CLOSE_TAG, OPEN_TAG
from evoharness_bpe.state import SUBGOAL_STATUSES

_words = st.sampled_from(["batch 1", "batch 2", "batch-3", "report", "Upload", "retry", "ünï", "x" * 210])
_text = st.one_of(_words, st.text(max_size=60), st.text(min_size=1, max_size=5000))
_junk = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)

_valid_calls = st.one_of(
    st.builds(lambda k, v: ("track", {"key": k, "value": v}), _words, st.one_of(st.none(), _text)),
    st.builds(
        lambda s, status, note: ("commit", {"subgoal": s, "status": status, **({"note": note} if note else {})}),
        _words,
        st.sampled_from(SUBGOAL_STATUSES),
        st.one_of(st.none(), _text),
    ),
    st.builds(lambda q, k: ("recall", {"query": q, "k": k}), _text, st.integers(-2, 12)),
    st.builds(
        lambda t, kind, tags: ("note", {"text": t, "kind": kind, "tags": tags}),
        _text,
        st.sampled_from(["lesson", "procedure", "pitfall", "rumour"]),
        st.lists(_words, max_size=3),
    ),
)
_invalid_calls = st.one_of(
    st.tuples(st.sampled_from(["track", "commit", "recall", "note", "jump", ""]), _junk),
    st.tuples(st.sampled_from(["track", "commit", "recall", "note"]), st.text(max_size=40)),
    st.builds(lambda name, args: (name, json.dumps(args)[: len(json.dumps(args)) // 2]),
              st.sampled_from(["track", "commit", "note"]), st.dictionaries(st.text(max_size=5), st.text(max_size=5), min_size=1)),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(calls=st.lists(st.one_of(_valid_calls, _invalid_calls), max_size=25), budget=st.integers(80, 700))
def test_random_sequences_keep_invariants(calls, budget) -> None:
    ws = Workspace("Migrate records", subgoals=["batch 1", "batch 2"], store=MemoryExperienceStore(), dashboard_tokens=budget)
    for name, args in calls:
        before = ws.state.model_dump_json()
        result = ws.act(name, args)
        if not result.ok:
            assert result.content.startswith("Error:")
            assert ws.state.model_dump_json() == before, "a failed call changed the state"
        # every subgoal has exactly one legal status, keyed by its own id
        for sid, sub in ws.state.progress.subgoals.items():
            assert sub.id == sid and sub.status in SUBGOAL_STATUSES
        # exceptions opened by commits match failed/blocked subgoals
        for exc_id in ws.state.progress.exceptions:
            if exc_id.startswith("subgoal:"):
                assert ws.state.progress.subgoals[exc_id[8:]].status in ("failed", "blocked")
        text = ws.dashboard()
        assert ws.token_counter(text) <= budget
        assert text.startswith(OPEN_TAG) and text.endswith(CLOSE_TAG) and text.count(CLOSE_TAG) == 1
        assert BPEState.model_validate_json(ws.state.model_dump_json()) == ws.state
    summary = ws.ledger.summary()
    assert summary.meta_action_calls == len(calls)
