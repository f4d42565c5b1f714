"""`crm-migration`: move customer records from a paginated legacy export to a rate-limited API.

The target API takes batches of at most B record ids in order (batch 1, 2, …), answers ``429``
with ``retry_after`` when batches come faster than its interval, fails transiently with ``503``
(nothing applied; resend the same batch), and rejects records that fail its schema: a missing
email, a malformed phone, or a key that already exists (id → reason; in the compact style the
rejected ids as one list and the distinct reasons beside it). Time is simulated: every call takes one
second and ``wait(seconds)`` advances the clock.

Success: every valid record lands exactly once, every invalid one is reported with
``report_invalid``, no valid one is reported, and no applied batch is sent again.
"""

from __future__ import annotations

import json
import random
import re
from typing import Any

from ._calls import ToolCallEnv, function_spec, invalid
from .base import EnvOutcome, StepResult

__all__ = ["CRMMigrationEnv", "RECORDS_BY_DIFFICULTY"]

RECORDS_BY_DIFFICULTY = {1: 20, 2: 200, 3: 2000}
_BATCH_BY_DIFFICULTY = {1: 10, 2: 25, 3: 25}
PAGE_SIZE = 50
_PHONE_RE = re.compile(r"^\+\d{1,3} \d{3} \d{3} \d{4}$")
_FIRST = "ada alan grace linus margaret ken barbara dennis edsger frances john radia tim donald".split()
_LAST = "lovelace turing hopper torvalds hamilton thompson liskov ritchie dijkstra allen backus perlman".split()


def _schema_error(record: dict[str, Any], landed_keys: set[str]) -> str | None:
    if not record.get("email"):
        return "missing email"
    if not _PHONE_RE.match(record.get("phone") or ""):
        return "malformed phone"
    if record["key"] in landed_keys:
        return "duplicate key"
    return None


class CRMMigrationEnv(ToolCallEnv):
    """Migrate N customer records (20, 200 or 2,000 by difficulty; `records` overrides)."""

    name = "crm-migration"
    _compact_descriptions = {
        "fetch_page": "Read a page of the export (50 record ids).",
        "submit_batch": "Send batch batch_id (1, 2, … in order) of record ids.",
        "report_invalid": "Report rejected record ids.",
        "wait": "Wait seconds (1-60).",
        "finish": "End the migration.",
    }

    def __init__(self, difficulty: int = 1, *, records: int | None = None, batch_size: int | None = None, fail_rate: float = 0.05) -> None:
        if difficulty not in RECORDS_BY_DIFFICULTY:
            raise ValueError(f"difficulty must be one of {sorted(RECORDS_BY_DIFFICULTY)}, not {difficulty!r}")
        self.difficulty = difficulty
        self.n_records = records or RECORDS_BY_DIFFICULTY[difficulty]
        self.batch_size = batch_size or _BATCH_BY_DIFFICULTY[difficulty]
        self.fail_rate = fail_rate
        self.step_budget = 60 + 6 * (self.n_records // self.batch_size + 1) + 3 * (self.n_records // PAGE_SIZE + 1)
        self._tools = [
            function_spec("fetch_page", "Read one page of the legacy CRM export (50 records a page, pages numbered from 1).",
                          {"page": {"type": "integer", "description": "Page number, from 1."}}, ["page"]),
            function_spec("submit_batch", f"Send a batch of at most {self.batch_size} record ids to the target API. Batches are numbered 1, 2, 3, … in order; a failed batch (429, 503) is resent with the same number.",
                          {"batch_id": {"type": "integer", "description": "The batch number, starting at 1."},
                           "record_ids": {"type": "array", "items": {"type": "string"}, "description": "Ids of the records in this batch."}},
                          ["batch_id", "record_ids"]),
            function_spec("report_invalid", "Report records the target API rejected, so they can be fixed by hand.",
                          {"record_ids": {"type": "array", "items": {"type": "string"}},
                           "reason": {"type": "string", "description": "Why they were rejected."}}, ["record_ids"]),
            function_spec("wait", "Wait, advancing the clock by this many seconds (1 to 60).",
                          {"seconds": {"type": "integer"}}, ["seconds"]),
            function_spec("finish", "Declare the migration complete.", {}, []),
        ]
        self.reset(0)

    # -- episode -----------------------------------------------------------------------------
    def reset(self, seed: int) -> tuple[str, str]:
        rng = random.Random(f"crm-{seed}-{self.difficulty}-{self.n_records}")
        self.seed = seed
        self.interval = rng.choice((2, 3, 4))
        self._rng = random.Random(f"crm-api-{seed}")
        records: list[dict[str, Any]] = []
        for i in range(self.n_records):
            first, last = rng.choice(_FIRST), rng.choice(_LAST)
            rec = {
                "id": f"R{i + 1:04d}",
                "key": f"{first[:2]}{last[:3]}-{rng.randint(1000, 9999)}",
                "name": f"{first.title()} {last.title()}",
                "email": f"{first}.{last}{i}@example.com",
                "phone": f"+{rng.randint(1, 99)} {rng.randint(100, 999)} {rng.randint(100, 999)} {rng.randint(1000, 9999)}",
            }
            roll = rng.random()
            if roll < 0.04:
                rec["email"] = ""
            elif roll < 0.08:
                rec["phone"] = rec["phone"].replace(" ", "")[: rng.randint(5, 9)]
            elif roll < 0.11 and records:
                rec["key"] = rng.choice(records)["key"]
            records.append(rec)
        if self.n_records >= 10:  # every episode meets each kind of schema failure at least once
            first_dup = records[0]["key"]
            for kind, idx in zip(("email", "phone", "key"), rng.sample(range(1, self.n_records), 3)):
                rec = records[idx]
                if kind == "email":
                    rec["email"] = ""
                elif kind == "phone":
                    rec["phone"] = rec["phone"].replace(" ", "")[:7]
                else:
                    rec["key"] = first_dup
        self.records = records
        self.by_id = {r["id"]: r for r in records}
        keys: set[str] = set()
        self.invalid_ids: set[str] = set()
        for r in records:
            if _schema_error(r, keys):
                self.invalid_ids.add(r["id"])
            else:
                keys.add(r["key"])
        self.valid_ids = {r["id"] for r in records} - self.invalid_ids
        self.pages = (self.n_records + PAGE_SIZE - 1) // PAGE_SIZE
        self.clock = 0
        self.last_submit: int | None = None
        self.next_batch = 1
        self.landed: dict[str, int] = {}
        self.landed_keys: set[str] = set()
        self.reported: set[str] = set()
        self.repeated_batches = 0
        self.finished = False
        self.steps = 0
        self.invalid_actions = 0
        if self.style == "compact":
            task = (
                f"Migrate {self.n_records} records ({self.pages} page(s)) with submit_batch: at most {self.batch_size} "
                "ids a batch, batches numbered 1, 2, 3, … in order. 429: wait retry_after, resend the batch. 503: resend "
                "it. Report rejected ids with report_invalid. Never resend an applied batch. Then finish."
            )
            return task, f"{self.pages} page(s). t={self.clock}s."
        task = (
            f"Migrate all {self.n_records} customer records from the legacy CRM export ({self.pages} page(s) "
            f"of up to {PAGE_SIZE}) to the target API. Send them with submit_batch in batches of at most "
            f"{self.batch_size} record ids, numbered 1, 2, 3, … in order. The API rate-limits batches "
            "(429 with retry_after: wait, then resend the same batch), fails transiently (503: resend the "
            "same batch) and rejects records without an email, with a malformed phone or with a duplicate "
            "key: report every rejected record with report_invalid. Never resend an applied batch. Call "
            "finish when every record is either migrated or reported."
        )
        return task, f"The export has {self.pages} page(s). Clock: t={self.clock}s."

    def step(self, tool_call: dict[str, Any]) -> StepResult:
        self.clock += 1
        parsed = self._accept(tool_call)
        if isinstance(parsed, StepResult):
            return parsed
        name, args = parsed
        if self.finished:
            return StepResult(observation="The migration is already finished.", done=True, info={"invalid": True})
        result = getattr(self, f"_{name}")(**args)
        if result.info.get("invalid"):
            self.invalid_actions += 1
        return result

    # -- tools -------------------------------------------------------------------------------
    def _fetch_page(self, page: int) -> StepResult:
        if not 1 <= page <= self.pages:
            return invalid(f"page must be between 1 and {self.pages}, not {page}.")
        rows = self.records[(page - 1) * PAGE_SIZE : page * PAGE_SIZE]
        body: dict[str, Any] = {"page": page, "pages": self.pages, "next_page": page + 1 if page < self.pages else None}
        if self.style == "compact":  # the ids are what a migration needs; the API checks the fields
            body["ids"] = [r["id"] for r in rows]
        else:
            body["records"] = [{k: r[k] for k in ("id", "key", "email", "phone")} for r in rows]
        return StepResult(observation=json.dumps(body, separators=(",", ":")))

    def _submit_batch(self, batch_id: int, record_ids: list[str]) -> StepResult:
        if not record_ids:
            return invalid("record_ids is empty; a batch needs at least one record id.")
        if len(record_ids) > self.batch_size:
            return invalid(f"a batch takes at most {self.batch_size} record ids, not {len(record_ids)}.")
        unknown = [r for r in record_ids if r not in self.by_id]
        if unknown:
            return invalid(f"unknown record id(s) {', '.join(unknown[:5])}; ids look like R0001.")
        if len(set(record_ids)) != len(record_ids):
            return invalid("a record id appears twice in this batch.")
        if batch_id < self.next_batch:
            self.repeated_batches += 1
            return self._answer({"status": 409, "error": f"batch {batch_id} was already applied; the next batch is {self.next_batch}"}, invalid=True)
        if batch_id > self.next_batch:
            return self._answer({"status": 409, "error": f"batch {batch_id} would skip batches; the next batch is {self.next_batch}"}, invalid=True)
        if self.last_submit is not None and self.clock - self.last_submit < self.interval:
            wait = self.interval - (self.clock - self.last_submit)
            return self._answer({"status": 429, "error": f"rate limited: at most one batch every {self.interval}s", "retry_after": wait})
        self.last_submit = self.clock
        if self._rng.random() < self.fail_rate:
            return self._answer({"status": 503, "error": "service unavailable, nothing applied; resend the same batch"})
        accepted, rejected = [], {}
        for rid in record_ids:
            reason = _schema_error(self.by_id[rid], self.landed_keys)
            if reason:
                rejected[rid] = reason
            else:
                accepted.append(rid)
                self.landed[rid] = self.landed.get(rid, 0) + 1
                self.landed_keys.add(self.by_id[rid]["key"])
        self.next_batch += 1
        if self.style == "compact":  # the ids as one list, ready to report; the reasons once each
            return self._answer({"status": 200, "batch_id": batch_id, "accepted": len(accepted), "rejected": list(rejected),
                                 "reasons": sorted(set(rejected.values()))})
        return self._answer({"status": 200, "batch_id": batch_id, "accepted": len(accepted), "rejected": rejected})

    def _report_invalid(self, record_ids: list[str], reason: str = "") -> StepResult:
        unknown = [r for r in record_ids if r not in self.by_id]
        if unknown or not record_ids:
            return invalid(f"report_invalid needs known record ids; unknown: {', '.join(unknown[:5]) or 'none given'}.")
        self.reported.update(record_ids)
        return self._answer({"status": "ok", "reported": len(record_ids), "total_reported": len(self.reported)})

    def _wait(self, seconds: int) -> StepResult:
        if not 1 <= seconds <= 60:
            return invalid("wait takes 1 to 60 seconds.")
        self.clock += seconds - 1  # the call itself took one second
        return self._answer({"status": "ok"})

    def _finish(self) -> StepResult:
        self.finished = True
        o = self.outcome()
        return StepResult(observation=f"Migration closed: {o.info['landed']} landed, {len(self.reported)} reported.", done=True)

    def _answer(self, body: dict[str, Any], invalid: bool = False) -> StepResult:
        body["t"] = self.clock
        info = {"invalid": True, "error": body.get("error", "")} if invalid else {}
        return StepResult(observation=json.dumps(body, separators=(",", ":")), info=info)

    def outcome(self) -> EnvOutcome:
        landed_ok = sum(1 for r in self.valid_ids if self.landed.get(r) == 1)
        reported_ok = len(self.invalid_ids & self.reported)
        wrong_reports = len(self.reported - self.invalid_ids)
        success = (landed_ok == len(self.valid_ids) and reported_ok == len(self.invalid_ids)
                   and wrong_reports == 0 and self.repeated_batches == 0)
        score = max(0.0, (landed_ok + reported_ok - wrong_reports) / max(1, self.n_records))
        return EnvOutcome(success=success, score=min(1.0, score), info={
            "landed": landed_ok, "valid": len(self.valid_ids), "reported_ok": reported_ok,
            "invalid": len(self.invalid_ids), "wrong_reports": wrong_reports,
            "repeated_batches": self.repeated_batches, "clock": self.clock, "finished": self.finished,
            "steps": self.steps, "invalid_actions": self.invalid_actions,
        })
