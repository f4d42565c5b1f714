"""`compliance-review`: review K transactions against a rule book; flag, clear and escalate.

The rule book (in the task text) is applied first rule first:

1. counterparty on the sanctions list (ask ``check_sanctions``) → flag, escalate to ``sanctions``;
2. amount at or above the threshold without a ``kyc`` document → flag, escalate to ``aml``;
3. no ``invoice`` document → flag (no escalation);
4. otherwise → clear.

Success: every transaction decided right and every required escalation made (and no other).
"""

from __future__ import annotations

import json
import random
from typing import Any

from ._calls import ToolCallEnv, function_spec, invalid
from .base import EnvOutcome, StepResult

__all__ = ["ComplianceReviewEnv", "TRANSACTIONS_BY_DIFFICULTY", "expected_decision"]

TRANSACTIONS_BY_DIFFICULTY = {1: 8, 2: 30, 3: 120}
PAGE_SIZE = 10
_COMPANIES = ("Acme Corp", "Globex", "Initech", "Umbrella Ltd", "Stark Industries", "Wayne Enterprises", "Hooli",
              "Vandelay Imports", "Soylent Co", "Tyrell Corp", "Cyberdyne", "Wonka Industries", "Pied Piper",
              "Oceanic Air", "Monarch Solutions", "Dunder Mifflin", "Prestige Worldwide", "Gringotts", "Aperture Labs",
              "Black Mesa", "Massive Dynamic", "Nakatomi Trading", "Blue Sun", "Virtucon")


def expected_decision(tx: dict[str, Any], threshold: int, sanctioned: set[str]) -> tuple[str, str | None]:
    """``(decision, escalation team or None)`` the rule book requires for one transaction."""
    if tx["counterparty"] in sanctioned:
        return "flag", "sanctions"
    if tx["amount"] >= threshold and "kyc" not in tx["documents"]:
        return "flag", "aml"
    if "invoice" not in tx["documents"]:
        return "flag", None
    return "clear", None


class ComplianceReviewEnv(ToolCallEnv):
    """Review 8, 30 or 120 transactions (by difficulty; `transactions` overrides)."""

    name = "compliance-review"
    _compact_descriptions = {
        "list_transactions": "List a page of transaction ids.",
        "get_transaction": "Read one transaction.",
        "check_sanctions": "Is a counterparty sanctioned?",
        "decide": "Record a transaction's decision.",
        "escalate": "Escalate a flagged transaction.",
        "finish": "End the review.",
    }

    def __init__(self, difficulty: int = 1, *, transactions: int | None = None) -> None:
        if difficulty not in TRANSACTIONS_BY_DIFFICULTY:
            raise ValueError(f"difficulty must be one of {sorted(TRANSACTIONS_BY_DIFFICULTY)}, not {difficulty!r}")
        self.difficulty = difficulty
        self.n = transactions or TRANSACTIONS_BY_DIFFICULTY[difficulty]
        self.step_budget = 40 + 7 * self.n
        self._tools = [
            function_spec("list_transactions", f"List transaction ids and amounts, {PAGE_SIZE} a page (pages from 1).",
                          {"page": {"type": "integer"}}, ["page"]),
            function_spec("get_transaction", "Read one transaction: amount, counterparty, documents on file.",
                          {"transaction_id": {"type": "string"}}, ["transaction_id"]),
            function_spec("check_sanctions", "Ask whether a counterparty is on the sanctions list.",
                          {"counterparty": {"type": "string"}}, ["counterparty"]),
            function_spec("decide", "Record the final decision for a transaction (one decision each).",
                          {"transaction_id": {"type": "string"},
                           "decision": {"type": "string", "enum": ["flag", "clear"]},
                           "reason": {"type": "string"}}, ["transaction_id", "decision"]),
            function_spec("escalate", "Escalate a flagged transaction to a team.",
                          {"transaction_id": {"type": "string"},
                           "team": {"type": "string", "enum": ["sanctions", "aml"]}}, ["transaction_id", "team"]),
            function_spec("finish", "Close the review.", {}, []),
        ]
        self.reset(0)

    def reset(self, seed: int) -> tuple[str, str]:
        rng = random.Random(f"compliance-{seed}-{self.difficulty}-{self.n}")
        self.seed = seed
        self.threshold = rng.choice((5_000, 10_000, 15_000))
        names = list(_COMPANIES)
        rng.shuffle(names)
        self.sanctioned = set(names[:3])
        self.txs: dict[str, dict[str, Any]] = {}
        for i in range(self.n):
            docs = [d for d, p in (("invoice", 0.85), ("kyc", 0.7), ("contract", 0.5)) if rng.random() < p]
            amount = rng.choice((rng.randint(100, self.threshold - 1), rng.randint(self.threshold, self.threshold * 5)))
            party = rng.choice(names[:3]) if rng.random() < 0.12 else rng.choice(names[3:])
            tid = f"T{i + 1:03d}"
            self.txs[tid] = {"id": tid, "amount": amount, "currency": "EUR", "counterparty": party, "documents": docs}
        self.expected = {t: expected_decision(tx, self.threshold, self.sanctioned) for t, tx in self.txs.items()}
        self.decisions: dict[str, str] = {}
        self.escalations: dict[str, set[str]] = {}
        self.finished = False
        self.steps = 0
        self.invalid_actions = 0
        pages = (self.n + PAGE_SIZE - 1) // PAGE_SIZE
        task = (
            f"Review all {self.n} transactions ({pages} page(s) of up to {PAGE_SIZE}) against the rule book and "
            "decide each one (flag or clear), first matching rule wins:\n"
            "1. counterparty on the sanctions list (check_sanctions) -> flag and escalate to team 'sanctions';\n"
            f"2. amount >= {self.threshold} EUR without a 'kyc' document -> flag and escalate to team 'aml';\n"
            "3. no 'invoice' document -> flag (no escalation);\n"
            "4. otherwise -> clear.\n"
            "Escalate only what the rules say. Call finish when every transaction is decided."
        )
        return task, f"{self.n} transactions await review on {pages} page(s)."

    def step(self, tool_call: dict[str, Any]) -> StepResult:
        parsed = self._accept(tool_call)
        if isinstance(parsed, StepResult):
            return parsed
        name, args = parsed
        if self.finished:
            self.invalid_actions += 1
            return StepResult(observation="The review is already closed.", done=True, info={"invalid": True})
        result = getattr(self, f"_{name}")(**args)
        if result.info.get("invalid"):
            self.invalid_actions += 1
        return result

    def _list_transactions(self, page: int) -> StepResult:
        pages = (self.n + PAGE_SIZE - 1) // PAGE_SIZE
        if not 1 <= page <= pages:
            return invalid(f"page must be between 1 and {pages}, not {page}.")
        ids = list(self.txs)[(page - 1) * PAGE_SIZE : page * PAGE_SIZE]
        body = {"page": page, "pages": pages, "next_page": page + 1 if page < pages else None,
                "transactions": [{"id": t, "amount": self.txs[t]["amount"]} for t in ids]}
        return StepResult(observation=json.dumps(body, separators=(",", ":")))

    def _known(self, tid: str) -> StepResult | None:
        if tid not in self.txs:
            return invalid(f"unknown transaction {tid!r}; ids look like T001 (see list_transactions).")
        return None

    def _get_transaction(self, transaction_id: str) -> StepResult:
        return self._known(transaction_id) or StepResult(observation=json.dumps(self.txs[transaction_id], separators=(",", ":")))

    def _check_sanctions(self, counterparty: str) -> StepResult:
        listed = counterparty.strip().lower() in {s.lower() for s in self.sanctioned}
        return StepResult(observation=json.dumps({"counterparty": counterparty, "sanctioned": listed}))

    def _decide(self, transaction_id: str, decision: str, reason: str = "") -> StepResult:
        if (err := self._known(transaction_id)) is not None:
            return err
        if transaction_id in self.decisions:
            return invalid(f"{transaction_id} is already decided ({self.decisions[transaction_id]}); decisions are final.")
        self.decisions[transaction_id] = decision
        return StepResult(observation=f"{transaction_id}: {decision} recorded ({len(self.decisions)}/{self.n} decided).")

    def _escalate(self, transaction_id: str, team: str) -> StepResult:
        if (err := self._known(transaction_id)) is not None:
            return err
        if self.decisions.get(transaction_id) != "flag":
            return invalid(f"only a flagged transaction can be escalated; decide {transaction_id} as flag first.")
        teams = self.escalations.setdefault(transaction_id, set())
        if team in teams:
            return invalid(f"{transaction_id} is already escalated to {team}.")
        teams.add(team)
        return StepResult(observation=f"{transaction_id} escalated to {team}.")

    def _finish(self) -> StepResult:
        self.finished = True
        o = self.outcome()
        return StepResult(observation=f"Review closed: {o.info['decided']}/{self.n} decided.", done=True)

    def outcome(self) -> EnvOutcome:
        right = sum(1 for t, (d, _) in self.expected.items() if self.decisions.get(t) == d)
        esc_right = sum(1 for t, (_, team) in self.expected.items() if self.escalations.get(t, set()) == ({team} if team else set()))
        missing = sum(1 for t, (_, team) in self.expected.items() if team and team not in self.escalations.get(t, set()))
        extra = sum(len(v - {self.expected[t][1]}) for t, v in self.escalations.items())
        success = right == self.n and missing == 0 and extra == 0
        return EnvOutcome(success=success, score=(right + esc_right) / (2 * self.n), info={
            "decided": len(self.decisions), "right": right, "missing_escalations": missing,
            "extra_escalations": extra, "finished": self.finished, "steps": self.steps,
            "invalid_actions": self.invalid_actions,
        })
