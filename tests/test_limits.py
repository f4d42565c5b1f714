"""Size and depth limits hold before anything is parsed or recorded; nothing escapes `act`.

Timings are measured in ``bench/hardening.py``; here only what could fail regardless of the
machine: memory, recorded sizes, errors, and that no exception escapes.
"""

from __future__ import annotations

import json
import tracemalloc

import pytest

from evoharness_bpe import MemoryExperienceStore, Outcome, Workspace
from evoharness_bpe.actions import (
    _CUT_CHARS,
    ARGUMENT_MODELS,
    MAX_ARGUMENT_DEPTH,
    MAX_RECORDED_CHARS,
    META_ACTIONS,
    bounded_json,
)

MB = 1_000_000


def nested(depth: int, leaf: object = "x") -> object:
    value = leaf
    for i in range(depth):
        value = {"a": value} if i % 2 else [value]
    return value


def act_measured(ws: Workspace, name, args) -> tuple[object, int]:
    tracemalloc.start()
    try:
        result = ws.act(name, args)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return result, peak


def assert_refused_unchanged(ws: Workspace, before: str, result) -> None:
    assert not result.ok and result.content.startswith("Error: ") and len(result.content) < 2_000
    assert ws.state.model_dump_json() == before
    event = ws.events[-1]
    assert not event.ok and len(event.arguments) <= MAX_RECORDED_CHARS + 40


@pytest.mark.parametrize(
    "args, says",
    [
        (lambda: json.dumps({"text": "A" * (50 * MB)}), "characters long"),
        (lambda: {"text": "A" * (50 * MB)}, "'text'"),
        (lambda: {"text": "ok", "tags": ["t"] * (5 * MB)}, "characters when serialised"),
        (lambda: {f"k{i}": i for i in range(1_000_000)}, "characters when serialised"),
        (lambda: {k: k * 4_000 for k in "abcdef"}, "characters when serialised"),
    ],
    ids=["json-string", "dict-string", "dict-list", "dict-keys", "many-fields"],
)
def test_oversized_arguments_are_refused_in_bounded_memory(args, says) -> None:
    ws = Workspace("limits", store=MemoryExperienceStore())
    before = ws.state.model_dump_json()
    result, peak = act_measured(ws, "note", args())
    assert_refused_unchanged(ws, before, result)
    assert says in result.content
    assert peak < 5 * MB, f"refusing used {peak / MB:.1f} MB"
    trace_line = ws.trace(outcome=Outcome(success=False)).model_dump_json()
    assert len(trace_line) < 40_000
    assert ws.store.count(ws.namespace) == 0


@pytest.mark.parametrize("name", META_ACTIONS)
@pytest.mark.parametrize("form", ["dict", "in-field", "json", "cycle"])
def test_deep_nesting_never_escapes(name, form) -> None:
    ws = Workspace("limits", subgoals=["a"], store=MemoryExperienceStore())
    if form == "dict":
        args: object = nested(10_000)
    elif form == "in-field":
        args = {"key": "k", "value": nested(10_000), "subgoal": "a", "query": nested(10_000), "text": nested(10_000)}
    elif form == "json":
        args = '{"a":' + "[" * 9_000 + "]" * 9_000 + "}"
    else:
        args = {"text": "t"}
        args["tags"] = [args]  # a cycle
    before = ws.state.model_dump_json()
    result = ws.act(name, args)
    assert_refused_unchanged(ws, before, result)
    assert str(MAX_ARGUMENT_DEPTH) in result.content
    ws.trace().model_dump_json()  # the recorded call serialises


def test_depth_limit_counts_brackets_outside_strings_only() -> None:
    ws = Workspace("limits", store=MemoryExperienceStore())
    assert ws.act("note", json.dumps({"text": "[[[[{{{{" * 20 + " brackets in text are fine"})).ok
    deep_ok = {"text": "t", "tags": ["a"]}
    assert ws.act("note", deep_ok).ok


@pytest.mark.parametrize(
    "name", [lambda: "x" * (5 * MB), lambda: 10**5000, object, lambda: ["track"], lambda: b"track"],
    ids=["huge-str", "huge-int", "object", "list", "bytes"],
)
def test_hostile_names_are_refused_briefly(name) -> None:
    ws = Workspace("limits", store=MemoryExperienceStore())
    result = ws.act(name(), {"key": "k", "value": "v"})
    assert not result.ok and len(result.content) < 500
    assert len(ws.events[-1].name) <= 64


class BrokenStore(MemoryExperienceStore):
    def search(self, namespace, query, *, k=10):
        raise RuntimeError("disk on fire")


def test_unexpected_failures_become_errors_the_model_reads(caplog) -> None:
    ws = Workspace("limits", store=BrokenStore())
    result = ws.act("recall", {"query": "anything"})
    assert not result.ok and "RuntimeError" in result.content
    assert "disk on fire" in caplog.text  # logged, not swallowed


def test_every_string_field_limit_is_below_the_cut() -> None:
    for model in ARGUMENT_MODELS.values():
        for field in model.model_fields.values():
            for meta in field.metadata:
                if getattr(meta, "max_length", None) is not None:
                    assert meta.max_length < _CUT_CHARS


def test_bounded_json_is_bounded() -> None:
    assert bounded_json({"a": 1}) == '{"a": 1}'
    assert bounded_json("y" * 10_000, 100).endswith("[cut: 10000 characters]")
    assert len(bounded_json({"a": "y" * (10 * MB)}, 100)) < 200
    assert "not recorded" in bounded_json(nested(5_000))


def test_observations_obey_the_meta_action_limits() -> None:
    ws = Workspace("observe", store=MemoryExperienceStore(), max_beliefs=50, max_exceptions=20)
    assert ws.act("track", {"key": "mine", "value": "kept"}).ok
    for i in range(300):
        name = f"t{i:03d}" + "n" * 2_000
        if i % 2:
            ws.observe(name, result={"rows": ["r" * 1_000] * 50})
        else:
            ws.wrap(lambda: (_ for _ in ()).throw(RuntimeError("e" * 5_000)), name=name)
            with pytest.raises(RuntimeError):
                ws.wrap(lambda: (_ for _ in ()).throw(RuntimeError("e" * 5_000)), name=name)()
    facts = ws.state.belief.facts
    assert len(facts) <= 50 and facts["mine"].value == "kept"
    assert all(len(k) <= 200 and len(f.value) <= 300 for k, f in facts.items())
    exceptions = ws.state.progress.exceptions
    assert 0 < len(exceptions) <= 20
    assert all(f"{k}:error" in facts for k in exceptions)  # an open exception keeps its fact
    assert ws.act("track", {"key": "mine2", "value": "v"}).ok  # room is made by observations only
    assert len(ws.state.model_dump_json()) < 200_000


def test_every_text_a_workspace_keeps_is_bounded() -> None:
    from evoharness_bpe.exceptions import UserError
    from evoharness_bpe.state import MAX_GOAL_CHARS

    huge = "Upload batch " + "x" * 3_800_000
    with pytest.raises(UserError) as refused:
        Workspace("Migrate", subgoals=["batch 1", huge])
    assert len(str(refused.value)) < 300 and "3,800,013 characters" in str(refused.value)  # a prefix, and the size
    ws = Workspace("G" * 3 * MB, subgoals=[f"batch {i}" for i in range(5)], max_subgoals=6)
    assert len(ws.state.progress.goal) <= MAX_GOAL_CHARS
    assert ws.act("commit", {"subgoal": "batch 6", "status": "todo"}).ok
    full = ws.act("commit", {"subgoal": "batch 7", "status": "todo"})
    assert not full.ok and "6 subgoals" in full.content and len(ws.state.progress.subgoals) == 6
    assert ws.act("commit", {"subgoal": "batch 1", "status": "done"}).ok       # existing ones still move
    with pytest.raises(UserError, match="at most 6"):
        Workspace("g", subgoals=[f"s{i}" for i in range(7)], max_subgoals=6)
