"""The dashboard: a compact, bounded text view of the BPE state, shown before each model call.

Everything a model or a tool wrote is untrusted: it goes through `evoharness_bpe.sanitize.quote`
(one line inside « », invisible characters removed, chat-template markers and angle brackets
defused, cut to a length limit). So a note cannot add a line, fake a section header or an
entry's id or counts, or close the dashboard.
The whole text never exceeds the token budget under the given counter.
"""

from __future__ import annotations

import heapq
from collections.abc import Collection, Sequence
from typing import Literal, NamedTuple

from .actions import PARTS
from .ledger import LedgerSummary, LedgerTotals
from .state import BPEState
from .stores.base import ExperienceEntry
from .sanitize import identifier, quote
from .text import TokenCounter, approx_tokens

__all__ = ["InjectMode", "RenderedDashboard", "render", "render_dashboard", "MIN_DASHBOARD_TOKENS", "OPEN_TAG", "CLOSE_TAG"]

InjectMode = Literal["full", "summary", "off"]
MIN_DASHBOARD_TOKENS = 80
OPEN_TAG = "<bpe-dashboard"
CLOSE_TAG = "</bpe-dashboard>"

_MAX_NEXT = 5
_MAX_EXCEPTIONS = 5
_MAX_BELIEFS = 12
_MAX_HINTS = 2
_safe = quote


class RenderedDashboard(NamedTuple):
    """A rendered dashboard and its size under the counter it was rendered with."""

    text: str
    tokens: int


def _cost_line(ledger: LedgerSummary | LedgerTotals) -> str:
    return (
        f"COST: {ledger.meta_action_calls} meta-actions ({ledger.invalid_calls} invalid), "
        f"{ledger.harness_tokens} harness tokens, {ledger.dashboard_renders} dashboards"
    )


def _sections(
    state: BPEState, hints: Sequence[ExperienceEntry], mode: InjectMode, parts: Collection[str] = PARTS
) -> list[tuple[str, list[str]]]:
    sections = _all_sections(state, hints, mode)
    # A part switched off leaves no line: Progress owns NEXT and EXCEPTIONS (open tool errors).
    hidden = {"NEXT:", "EXCEPTIONS:"} if "progress" not in parts else set()
    hidden |= {"BELIEFS:"} if "belief" not in parts else set()
    hidden |= {"HINTS (from experience):"} if "experience" not in parts else set()
    return [(header, lines) for header, lines in sections if header not in hidden]


def _all_sections(state: BPEState, hints: Sequence[ExperienceEntry], mode: InjectMode) -> list[tuple[str, list[str]]]:
    progress = state.progress
    open_subgoals = progress.open_subgoals()
    limit_next = 1 if mode == "summary" else _MAX_NEXT
    next_lines = [f"- [{s.status}] {identifier(s.id)} {_safe(s.title, 120)}" for s in open_subgoals[:limit_next]]
    if len(open_subgoals) > limit_next:
        next_lines.append(f"- … {len(open_subgoals) - limit_next} more open")
    if mode == "summary":
        return [("NEXT:", next_lines)]
    exceptions = list(progress.exceptions.values())
    exc_lines = [f"- {_safe(e.id, 80)} {_safe(e.message, 160)}" for e in exceptions[-_MAX_EXCEPTIONS:]]
    if len(exceptions) > _MAX_EXCEPTIONS:
        exc_lines.insert(0, f"- … {len(exceptions) - _MAX_EXCEPTIONS} older")
    active = progress.active()
    tag = active.id if active else None
    facts = heapq.nlargest(
        _MAX_BELIEFS,
        state.belief.facts.values(),
        key=lambda f: (tag is not None and tag in f.key, f.step),
    )
    belief_lines = [
        f"- {_safe(f.key, 60)} = {_safe(f.value, 160)} (source {_safe(f.source, 30)}, step {f.step}"
        + (f", confidence {f.confidence:.2f})" if f.confidence < 1.0 else ")")
        for f in facts
    ]
    hidden = len(state.belief.facts) - len(facts)
    if hidden > 0:
        belief_lines.append(f"- … {hidden} older facts (not shown)")
    hint_lines = [
        f"- [{identifier(h.id)}] {h.kind} {_safe(h.text, 200)} (wins {h.wins}, losses {h.losses})"
        for h in hints[:_MAX_HINTS]
    ]
    return [
        ("NEXT:", next_lines),
        ("EXCEPTIONS:", exc_lines),
        ("BELIEFS:", belief_lines),
        ("HINTS (from experience):", hint_lines),
    ]


def render_dashboard(
    state: BPEState,
    *,
    ledger: LedgerSummary | LedgerTotals,
    hints: Sequence[ExperienceEntry] = (),
    budget: int = 600,
    mode: InjectMode = "full",
    token_counter: TokenCounter = approx_tokens,
    parts: Collection[str] = PARTS,
) -> str:
    """Render the dashboard for `state` within `budget` tokens ("" when `mode` is "off").

    Lines are added by priority — goal, counts, cost; then next subgoals, exceptions, beliefs
    and hints — as long as they fit. A part missing from `parts` (an ablation) shows nothing:
    without ``progress`` no PROGRESS, NEXT or EXCEPTIONS; without ``belief`` no BELIEFS;
    without ``experience`` no HINTS.
    """
    return render(state, ledger=ledger, hints=hints, budget=budget, mode=mode, token_counter=token_counter, parts=parts).text


def render(
    state: BPEState,
    *,
    ledger: LedgerSummary | LedgerTotals,
    hints: Sequence[ExperienceEntry] = (),
    budget: int = 600,
    mode: InjectMode = "full",
    token_counter: TokenCounter = approx_tokens,
    parts: Collection[str] = PARTS,
) -> RenderedDashboard:
    """`render_dashboard`, returning the token count too (so callers need not count again)."""
    if mode == "off":
        return RenderedDashboard("", 0)
    budget = max(budget, MIN_DASHBOARD_TOKENS)
    counts = state.progress.counts()
    head = f"{OPEN_TAG} step={state.step}>"
    progress_line = "PROGRESS: " + ", ".join(f"{n} {status}" for status, n in counts.items()) + (
        f" (of {sum(counts.values())})"
    )
    tail = [_cost_line(ledger), CLOSE_TAG]
    shown = [progress_line] if "progress" in parts else []
    fixed = [head, *shown, *tail]
    used = sum(token_counter(line) for line in fixed)
    goal_chars = 300
    goal_line = f"GOAL: {_safe(state.progress.goal, goal_chars)}"
    while token_counter(goal_line) > budget - used and goal_chars > 8:
        goal_chars //= 2
        goal_line = f"GOAL: {_safe(state.progress.goal, goal_chars)}"
    used += token_counter(goal_line)

    body: list[str] = []
    for header, lines in _sections(state, hints, mode, parts):
        if not lines:
            continue
        header_cost = token_counter(header)
        added = False
        for line in lines:
            cost = token_counter(line) + (0 if added else header_cost)
            if used + cost > budget:
                break
            if not added:
                body.append(header)
                added = True
            body.append(line)
            used += cost

    text = "\n".join([head, goal_line, *shown, *body, *tail])
    if token_counter is approx_tokens:  # additive over lines: `used` is exact
        return RenderedDashboard(text, used)
    # Another counter may not be additive over lines and overshoot: drop optional lines.
    tokens = token_counter(text)
    while body and tokens > budget:
        body.pop()
        if body and body[-1].endswith(":"):
            body.pop()
        text = "\n".join([head, goal_line, *shown, *body, *tail])
        tokens = token_counter(text)
    return RenderedDashboard(text, tokens)
