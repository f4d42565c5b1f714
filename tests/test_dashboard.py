"""The dashboard's EXCEPTIONS section: what is open, newest kept, resolved ones gone, priority."""

from __future__ import annotations

from evoharness_bpe import Workspace


def _section(text: str, header: str) -> list[str]:
    """The lines under `header` up to the next section header (or the closing lines)."""
    lines = text.split("\n")
    if header not in lines:
        return []
    out = []
    for line in lines[lines.index(header) + 1 :]:
        if not line.startswith("- "):
            break
        out.append(line)
    return out


def test_open_exceptions_are_listed_between_next_and_beliefs() -> None:
    ws = Workspace("Migrate", subgoals=["batch 1", "batch 2"])
    ws.act("track", {"key": "rows", "value": "40"})
    ws.act("commit", {"subgoal": "batch 2", "status": "failed", "note": "503 from target"})
    ws.observe("fetch", error="timeout after 30 s")
    text = ws.dashboard(record=False)
    lines = text.split("\n")
    assert lines.index("NEXT:") < lines.index("EXCEPTIONS:") < lines.index("BELIEFS:")
    assert _section(text, "EXCEPTIONS:") == [
        "- «subgoal:batch-2» «batch 2 failed: 503 from target»",
        "- «tool:fetch» «timeout after 30 s»",
    ]


def test_a_resolved_exception_leaves_the_section() -> None:
    ws = Workspace("Migrate", subgoals=["batch 1"])
    ws.observe("fetch", error="timeout after 30 s")
    ws.act("commit", {"subgoal": "batch 1", "status": "blocked", "note": "waiting for credentials"})
    assert [line.split("» ")[0] for line in _section(ws.dashboard(record=False), "EXCEPTIONS:")] == [
        "- «tool:fetch",
        "- «subgoal:batch-1",
    ]
    ws.observe("fetch", result="200 OK")
    assert _section(ws.dashboard(record=False), "EXCEPTIONS:") == ["- «subgoal:batch-1» «batch 1 blocked: waiting for credentials»"]
    ws.act("commit", {"subgoal": "batch 1", "status": "doing", "note": "credentials arrived"})
    text = ws.dashboard(record=False)
    assert "EXCEPTIONS:" not in text and _section(text, "EXCEPTIONS:") == []


def test_only_the_newest_five_are_shown_with_a_count_of_the_rest() -> None:
    ws = Workspace("Migrate")
    for n in range(7):
        ws.observe(f"tool{n}", error=f"error number {n}")
    shown = _section(ws.dashboard(record=False), "EXCEPTIONS:")
    assert shown[0] == "- … 2 older"
    assert shown[1:] == [f"- «tool:tool{n}» «error number {n}»" for n in range(2, 7)]


def test_exceptions_outrank_beliefs_when_the_budget_is_tight() -> None:
    ws = Workspace("Migrate", dashboard_tokens=120)
    for n in range(20):
        ws.act("track", {"key": f"fact.{n}", "value": "a long value " * 5})
    ws.observe("upload", error="quota exceeded")
    text = ws.dashboard(record=False)
    assert ws.token_counter(text) <= 120
    assert _section(text, "EXCEPTIONS:") == ["- «tool:upload» «quota exceeded»"]
    assert len(_section(text, "BELIEFS:")) < 20  # the beliefs were cut, the exception was not


def test_next_shows_five_open_subgoals_in_full_mode_and_one_in_summary() -> None:
    titles = [f"batch {n}" for n in range(1, 8)]
    full = Workspace("Migrate", subgoals=titles).dashboard(record=False)
    assert _section(full, "NEXT:") == [f"- [todo] batch-{n} «batch {n}»" for n in range(1, 6)] + ["- … 2 more open"]
    summary = Workspace("Migrate", subgoals=titles, inject="summary").dashboard(record=False)
    assert _section(summary, "NEXT:") == ["- [todo] batch-1 «batch 1»", "- … 6 more open"]
    assert "EXCEPTIONS:" not in summary and "BELIEFS:" not in summary
    exactly = Workspace("Migrate", subgoals=titles[:5]).dashboard(record=False)
    assert len(_section(exactly, "NEXT:")) == 5 and "more open" not in exactly


def test_exactly_five_exceptions_need_no_count_line() -> None:
    ws = Workspace("Migrate")
    for n in range(5):
        ws.observe(f"tool{n}", error=f"error number {n}")
    assert [line.startswith("- «tool:") for line in _section(ws.dashboard(record=False), "EXCEPTIONS:")] == [True] * 5


def test_beliefs_show_twelve_newest_first_with_the_rest_counted() -> None:
    ws = Workspace("Migrate")
    for n in range(12):
        ws.act("track", {"key": f"fact.{n}", "value": f"v{n}"})
    twelve = _section(ws.dashboard(record=False), "BELIEFS:")
    assert len(twelve) == 12 and not any("older facts" in line for line in twelve)
    assert twelve[0] == "- «fact.11» = «v11» (source «agent», step 11)"
    ws.act("track", {"key": "fact.12", "value": "v12", "confidence": 0.25})
    thirteen = _section(ws.dashboard(record=False), "BELIEFS:")
    assert thirteen[0] == "- «fact.12» = «v12» (source «agent», step 12, confidence 0.25)"
    assert thirteen[-1] == "- … 1 older facts (not shown)" and len(thirteen) == 13


def test_beliefs_of_the_active_subgoal_come_first() -> None:
    ws = Workspace("Migrate", subgoals=["upload", "report"])
    ws.act("track", {"key": "upload.rows", "value": "40"})
    ws.act("track", {"key": "report.owner", "value": "ana"})
    ws.act("commit", {"subgoal": "upload", "status": "doing"})
    assert _section(ws.dashboard(record=False), "BELIEFS:")[0].startswith("- «upload.rows»")


def test_off_mode_renders_nothing_and_costs_nothing() -> None:
    from evoharness_bpe.dashboard import render
    from evoharness_bpe.ledger import CostLedger

    ws = Workspace("Migrate", subgoals=["a"])
    assert tuple(render(ws.state, ledger=CostLedger().summary(), mode="off")) == ("", 0)
    text = render(ws.state, ledger=CostLedger().summary()).text
    assert text.split("\n")[2] == "PROGRESS: 1 todo, 0 doing, 0 done, 0 failed, 0 blocked (of 1)"
