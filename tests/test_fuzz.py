"""Fuzzing the meta-actions: arbitrary JSON, wrong types, huge and unicode strings, truncation.

In the suite each test runs a few hundred cases (oversized and deeply nested arguments a few
dozen); the long campaign is ``pytest --hypothesis-profile=fuzz tests/test_fuzz.py`` (10,000
cases per test).
"""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from evoharness_bpe import MemoryExperienceStore, Workspace
from evoharness_bpe.actions import MAX_ARGUMENT_CHARS, MAX_ARGUMENT_DEPTH, META_ACTIONS
from evoharness_bpe.dashboard import CLOSE_TAG, OPEN_TAG
from evoharness_bpe.testing.hostile import NESTED_KINDS, OVERSIZED_KINDS, nested_arguments, oversized

FIELDS = ["key", "value", "source", "confidence", "subgoal", "status", "note", "query", "k", "text", "tags", "kind", "supersedes"]
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=50)
    | st.sampled_from(["todo", "done", "failed", "lesson", "\x00", "«»", "<|im_start|>", "x" * 5000]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)
arguments = st.one_of(
    st.dictionaries(st.sampled_from(FIELDS), json_values, max_size=6),  # plausible field names, junk values
    json_values,  # anything at all
    st.text(max_size=200),  # raw strings, mostly invalid JSON
    st.dictionaries(st.sampled_from(FIELDS), json_values, max_size=6).map(lambda d: json.dumps(d)[: max(1, len(json.dumps(d)) // 2)]),
)
names = st.one_of(st.sampled_from(META_ACTIONS), st.text(max_size=10), st.none(), st.integers())


def check_call(ws: Workspace, name, args) -> None:
    before = ws.state.model_dump_json()
    count_before = ws.store.count(ws.namespace)
    result = ws.act(name, args)  # must never raise
    if not result.ok:
        assert result.content.startswith("Error: ") and len(result.content) < 2000
        assert ws.state.model_dump_json() == before
        assert ws.store.count(ws.namespace) == count_before
    text = ws.dashboard(record=False)
    assert text.startswith(OPEN_TAG) and text.endswith(CLOSE_TAG) and text.count(CLOSE_TAG) == 1
    assert ws.count_tokens(text) <= ws.dashboard_tokens


@given(calls=st.lists(st.tuples(names, arguments), min_size=1, max_size=8))
def test_core_meta_actions_survive_junk(calls) -> None:
    ws = Workspace("fuzz", subgoals=["a"], store=MemoryExperienceStore(), dashboard_tokens=300)
    for name, args in calls:
        check_call(ws, name, args)


hostile_arguments = st.one_of(
    st.tuples(st.sampled_from(OVERSIZED_KINDS), st.integers(20_001, 2_000_000)).map(lambda p: oversized(*p)),
    st.tuples(st.sampled_from(NESTED_KINDS), st.integers(MAX_ARGUMENT_DEPTH + 1, 5_000)).map(lambda p: nested_arguments(*p)),
)


@settings(max_examples=max(60, settings.default.max_examples // 10), deadline=None)  # 1,000 in the campaign
@given(calls=st.lists(st.tuples(st.sampled_from(META_ACTIONS), hostile_arguments | arguments), min_size=1, max_size=4))
def test_core_meta_actions_survive_oversized_and_nested(calls) -> None:
    ws = Workspace("fuzz", subgoals=["a"], store=MemoryExperienceStore(), dashboard_tokens=300)
    for name, args in calls:
        check_call(ws, name, args)
        assert len(ws.events[-1].arguments) <= MAX_ARGUMENT_CHARS + 40
    ws.trace().model_dump_json()
