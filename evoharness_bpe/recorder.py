"""`EpisodeRecorder`: what one run did beyond the state — meta-action events, dashboards, costs.

The `Workspace` is the state engine (Belief, Progress, the episode's Experience view); the
recorder it is given keeps the run's record. An integration that rebuilds workspaces from saved
state (one per graph step, per restored context) hands each the same recorder, so the run's
events, dashboard snapshots and ledger stay whole.

>>> from evoharness_bpe import Workspace
>>> recorder = EpisodeRecorder()
>>> Workspace("Count to three", recorder=recorder).act("track", {"key": "n", "value": "1"}).ok
True
>>> len(recorder.events), recorder.ledger.summary().meta_action_calls
(1, 1)
"""

from __future__ import annotations

from .ledger import CostLedger, LedgerSummary
from .trace import DashboardSnapshot, MetaActionEvent

__all__ = ["EpisodeRecorder"]


class EpisodeRecorder:
    """The record of one run: meta-action events with their costs, dashboard snapshots, the ledger."""

    def __init__(self) -> None:
        self.ledger = CostLedger()
        self.events: list[MetaActionEvent] = []
        self.snapshots: list[DashboardSnapshot] = []

    def action(self, event: MetaActionEvent, label: str) -> None:
        """Record a meta-action call (`label`: its ledger line, ``unknown`` for a made-up name)."""
        self.ledger.record_action(label, event.cost, event.ok)
        self.events.append(event)

    def dashboard(self, snapshot: DashboardSnapshot, wall_ms: float) -> None:
        """Record a dashboard rendered for the model."""
        self.ledger.record_dashboard(snapshot.tokens, wall_ms)
        self.snapshots.append(snapshot)

    def label(self, index: int, tool_call_id: str, name: str | None = None) -> bool:
        """Attach the model's call id to event `index` when it has none (and its name matches)."""
        if not 0 <= index < len(self.events):
            return False
        event = self.events[index]
        if event.tool_call_id is not None or (name is not None and event.name != name):
            return False
        event.tool_call_id = tool_call_id
        return True

    def summary(self) -> LedgerSummary:
        """The ledger's totals."""
        return self.ledger.summary()
