"""The cost ledger: what every meta-action call and dashboard render cost."""

from __future__ import annotations

from typing import NamedTuple

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["ActionCost", "ActionTally", "LedgerSummary", "LedgerTotals", "CostLedger"]


class LedgerTotals(NamedTuple):
    """The running totals the dashboard's cost line shows (cheap to read on every render)."""

    meta_action_calls: int
    invalid_calls: int
    harness_tokens: int
    dashboard_renders: int


class ActionCost(BaseModel):
    """The cost of one meta-action call or dashboard render."""

    model_config = ConfigDict(defer_build=True)

    tokens_in: int = Field(default=0, description="Tokens of the arguments the model wrote.")
    tokens_out: int = Field(default=0, description="Tokens of the result the model will read.")
    wall_ms: float = Field(default=0.0, description="Wall time spent in the harness.")

    @property
    def tokens(self) -> int:
        return self.tokens_in + self.tokens_out


class ActionTally(BaseModel):
    """Totals for one meta-action."""

    model_config = ConfigDict(defer_build=True)

    calls: int = 0
    invalid: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    wall_ms: float = 0.0


class LedgerSummary(BaseModel):
    """The ledger's totals, as fed to rewards and metrics."""

    model_config = ConfigDict(defer_build=True)

    meta_action_calls: int = Field(description="Meta-action calls, valid or not.")
    invalid_calls: int = Field(description="Calls refused for bad input.")
    meta_action_tokens: int = Field(description="Argument and result tokens of all calls.")
    dashboard_renders: int = Field(description="Dashboards rendered for the model.")
    dashboard_tokens: int = Field(description="Tokens of all rendered dashboards.")
    wall_ms: float = Field(description="Harness wall time, calls and renders together.")
    by_action: dict[str, ActionTally] = Field(description="Totals per meta-action.")

    @property
    def harness_tokens(self) -> int:
        """Tokens the harness added to the context: meta-action traffic plus dashboards."""
        return self.meta_action_tokens + self.dashboard_tokens


class CostLedger:
    """Accumulates costs; cheap enough to sit on the hot path."""

    def __init__(self) -> None:
        self._tallies: dict[str, ActionTally] = {}
        self._calls = 0
        self._invalid = 0
        self._action_tokens = 0
        self.dashboard_renders = 0
        self.dashboard_tokens = 0
        self.dashboard_ms = 0.0

    def record_action(self, name: str, cost: ActionCost, ok: bool) -> None:
        tally = self._tallies.get(name)
        if tally is None:
            tally = self._tallies[name] = ActionTally()
        tally.calls += 1
        tally.invalid += not ok
        self._calls += 1
        self._invalid += not ok
        self._action_tokens += cost.tokens_in + cost.tokens_out
        tally.tokens_in += cost.tokens_in
        tally.tokens_out += cost.tokens_out
        tally.wall_ms += cost.wall_ms

    def record_dashboard(self, tokens: int, wall_ms: float) -> None:
        self.dashboard_renders += 1
        self.dashboard_tokens += tokens
        self.dashboard_ms += wall_ms

    def totals(self) -> LedgerTotals:
        return LedgerTotals(
            self._calls, self._invalid, self._action_tokens + self.dashboard_tokens, self.dashboard_renders
        )

    def summary(self) -> LedgerSummary:
        tallies = self._tallies.values()
        return LedgerSummary(
            meta_action_calls=sum(t.calls for t in tallies),
            invalid_calls=sum(t.invalid for t in tallies),
            meta_action_tokens=sum(t.tokens_in + t.tokens_out for t in tallies),
            dashboard_renders=self.dashboard_renders,
            dashboard_tokens=self.dashboard_tokens,
            wall_ms=sum(t.wall_ms for t in tallies) + self.dashboard_ms,
            by_action={name: t.model_copy() for name, t in self._tallies.items()},
        )
