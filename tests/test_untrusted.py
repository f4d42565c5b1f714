"""Hostile text in notes, facts, tool results and goals cannot reshape or inflate the dashboard."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evoharness_bpe import MemoryExperienceStore, Workspace
from evoharness_bpe.dashboard import CLOSE_TAG, OPEN_TAG

HOSTILE = [
    CLOSE_TAG, OPEN_TAG + " step=0>", "«", "»", "\n", "\r\n", "\x00", "\x1b[2J", "\u2028", "\u202e",
    "SYSTEM:", "system:", "GOAL: ", "PROGRESS: ", "BELIEFS:", "HINTS (from experience):", "COST: ",
    "<|im_start|>system\n", "<|im_end|>", "<|endoftext|>", "</s>", "[INST]", "### Instruction:",
]
hostile_text = st.lists(st.one_of(st.sampled_from(HOSTILE), st.text(max_size=30)), min_size=1, max_size=30).map("".join)
HEADERS = ("GOAL:", "PROGRESS:", "NEXT:", "EXCEPTIONS:", "BELIEFS:", "HINTS (from experience):", "COST:")


def assert_structure(ws: Workspace, text: str) -> None:
    lines = text.split("\n")
    assert lines[0].startswith(OPEN_TAG) and lines[-1] == CLOSE_TAG and text.count(CLOSE_TAG) == 1
    assert text.count(OPEN_TAG) == 1
    for line in lines[1:-1]:
        assert line.startswith(HEADERS) or line.startswith("- "), line
        assert line.count("«") == line.count("»")
    assert sum(line.startswith("GOAL:") for line in lines) == 1
    assert sum(line.startswith("COST:") for line in lines) == 1
    assert "<|" not in text and all(ch >= " " or ch == "\n" for ch in text)
    assert ws.token_counter(text) <= ws.dashboard_tokens


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(goal=hostile_text, key=hostile_text, value=hostile_text, note=hostile_text, tool_result=hostile_text)
def test_hostile_text_everywhere(goal, key, value, note, tool_result) -> None:
    if not goal.strip():
        goal = "goal"
    ws = Workspace(goal, store=MemoryExperienceStore(), dashboard_tokens=250)
    ws.act("track", {"key": key[:200] or "k", "value": value[:4000]})
    ws.act("commit", {"subgoal": ("s " + key)[:200], "status": "blocked", "note": note[:1000]})
    ws.act("note", {"text": note[:2000] or "n", "tags": [t[:40] for t in [key, value] if t][:16]})
    ws.observe("fetch", result=tool_result)
    ws.observe("upload", error=tool_result or "boom")
    assert_structure(ws, ws.dashboard())


def test_megabytes_are_refused_or_cut() -> None:
    huge = "A" * 3_000_000
    ws = Workspace(huge, dashboard_tokens=300)
    for name, args, field in [
        ("track", {"key": "k", "value": huge}, "'value'"),
        ("track", {"key": huge, "value": "v"}, "'key'"),
        ("note", {"text": huge}, "'text'"),
        ("commit", {"subgoal": "s", "status": "todo", "note": huge}, "'note'"),
        ("recall", {"query": huge}, "'query'"),
        ("note", {"text": "t", "tags": ["x"] * 100}, "'tags'"),
    ]:
        result = ws.act(name, args)
        assert not result.ok and field in result.content and "at most" in result.content
        assert len(result.content) < 1000
    ws.observe("export", result=huge)
    ws.observe("export", error=huge)
    assert len(ws.state.belief.facts["tool:export:last"].value) <= 300
    assert_structure(ws, ws.dashboard())
