"""`ModelConsolidator`: a teacher model keeps a namespace's Experience clean, in the background.

`submit` records a job in the journal and returns at once (it blocks only while
`max_pending` jobs wait: back-pressure); a worker thread asks the teacher (retrying failed
requests with backoff), validates its decisions, applies them in one store transaction and
appends the request and the decisions to a JSONL dataset in TRL's prompt–completion format. On
timeout, refusal or invalid output the rule-based consolidation done at `note` time stands.
The offline batch over traces is `consolidate_traces` (``evoharness consolidate``).
"""

from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path
from typing import Any

from .. import telemetry
from ..exceptions import UserError
from ..stores.base import ExperienceStore, Namespace, validate_namespace
from .decisions import DecisionBatch, DecisionError, apply_decisions, canonical, parse_decisions, validate_decisions
from .journal import Job, JobJournal
from .request import SYSTEM_PROMPT, Request, TeacherCaller, TeacherError, build_request
from .teachers import Teacher, as_teacher

__all__ = ["ModelConsolidator", "SYSTEM_PROMPT", "append_row"]

log = logging.getLogger(__name__)


class ModelConsolidator:
    """Consolidation by a teacher model, for any workspace (``Workspace(consolidator=...)``).

    >>> from evoharness_bpe import MemoryExperienceStore
    >>> consolidator = ModelConsolidator(lambda messages: '{"decisions": []}', MemoryExperienceStore())
    >>> consolidator.close()
    """

    def __init__(
        self,
        teacher: Any,
        store: ExperienceStore,
        *,
        journal: str | os.PathLike[str] = ":memory:",
        dataset: str | os.PathLike[str] | None = None,
        every_notes: int | None = None,
        related: int = 5,
        timeout: float = 60.0,
        retries: int = 2,
        backoff: float = 1.0,
        max_pending: int = 1_000,
        start: bool = True,
    ) -> None:
        if every_notes is not None and every_notes < 1:
            raise UserError("every_notes must be at least 1 (or None: consolidate when an episode finishes)")
        if max_pending < 1 or related < 0 or timeout <= 0 or retries < 0 or backoff < 0:
            raise UserError("max_pending must be at least 1, related and retries at least 0, timeout positive "
                            "and backoff not negative")
        self.teacher: Teacher = as_teacher(teacher)
        self.store = store
        self.journal = JobJournal(journal)
        self.dataset = Path(dataset) if dataset else None
        self.every_notes = every_notes
        self.related = related
        self.timeout = timeout
        self.max_pending = max_pending
        self._wake = threading.Condition()
        self._busy = False
        self._closing = False
        self._closed = False
        self._calls = TeacherCaller(self.teacher, timeout=timeout, retries=retries, backoff=backoff)
        self._thread: threading.Thread | None = None
        if start:
            self.start()

    # -- producer side -----------------------------------------------------------------------
    def submit(self, namespace: Namespace, notes: list[str], *, key: str | None = None) -> Job | None:
        """Queue the consolidation of `notes` (entry ids) of `namespace`; returns at once.

        Blocks only while `max_pending` jobs are unfinished (back-pressure). A `key` (a run id
        and a count, say) makes the submission idempotent: the same key queues one job only.
        """
        notes = list(dict.fromkeys(notes))
        if not notes:
            return None
        namespace = validate_namespace(namespace)
        with self._wake:
            while self.journal.unfinished() >= self.max_pending and not self._closing:
                self._wake.wait(timeout=1.0)
            job = self.journal.add(namespace, notes, key=key)
            self._wake.notify_all()
        return job

    def pending(self) -> int:
        """Jobs not yet finished (queued, or decided and not yet applied)."""
        return self.journal.unfinished()

    # -- worker side -------------------------------------------------------------------------
    def start(self) -> None:
        """Start the worker thread (done by the constructor unless ``start=False``)."""
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._serve, name="evoharness-consolidator", daemon=True)
            self._thread.start()

    def _serve(self) -> None:
        while True:
            with self._wake:
                job = self.journal.next()
                while job is None and not self._closing:
                    self._wake.wait()
                    job = self.journal.next()
                if job is None or self._closing:  # closed: what is left stays in the journal
                    return
                self._busy = True
            try:
                self.run_job(job)
            except Exception:  # noqa: BLE001 - a store failure must not kill the worker; the job is retried
                log.exception("consolidation job %s failed; it stays pending", job.id)
                with self._wake:
                    self._wake.wait(timeout=1.0)
            finally:
                with self._wake:
                    self._busy = False
                    self._wake.notify_all()

    def run_job(self, job: Job) -> str:
        """Process one job now (the worker's step); returns its status (``pending`` when closed meanwhile)."""
        if job.status == "decided" and job.decisions is not None:
            batch = DecisionBatch.model_validate_json(job.decisions)
        else:
            request = self.request(job)
            if request is None:
                self.journal.finish(job.id, "done", reason="no note of the job is left")
                return "done"
            messages, notes, shown = request
            try:
                batch = validate_decisions(parse_decisions(self._calls(messages)), notes, shown)
            except TeacherError as exc:  # no answer on any attempt: the rules stand
                if exc.stopped:  # closed meanwhile: the job stays pending for the next start
                    return "pending"
                return self._fallback(job, f"the teacher failed {exc.attempts} time(s): {exc}")
            except DecisionError as exc:
                return self._fallback(job, str(exc))
            decided = canonical(batch)
            self.journal.decide(job.id, decided)
            self._record(messages, decided)
        counts = apply_decisions(self.store, job.namespace, batch, job.id)
        telemetry.consolidation("experience/" + "/".join(job.namespace), counts, batch)
        self.journal.finish(job.id, "done")
        return "done"

    def _fallback(self, job: Job, reason: str) -> str:
        log.warning("consolidation job %s left to the rules: %s", job.id, reason)
        self.journal.finish(job.id, "fallback", reason=reason[:500])
        return "fallback"

    def request(self, job: Job) -> Request | None:
        """The messages for the teacher, the note ids and every id shown; None if no note is left."""
        return build_request(self.store, job.namespace, job.notes, self.related)

    def _record(self, messages: list[dict[str, str]], decided: str) -> None:
        if self.dataset is not None:
            append_row(self.dataset, {"prompt": messages, "completion": [{"role": "assistant", "content": decided}]})

    # -- shutdown ----------------------------------------------------------------------------
    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every job is finished; returns False on timeout."""
        with self._wake:
            return self._wake.wait_for(lambda: not self._busy and self.journal.unfinished() == 0, timeout=timeout)

    def close(self, *, wait: bool = True) -> None:
        """Stop the worker (after finishing the queue when `wait`); unfinished jobs stay in the journal."""
        if self._closed:
            return
        self._closed = True
        if wait and self._thread is not None:
            self.flush()
        with self._wake:
            self._closing = True
            self._wake.notify_all()
        self._calls.close()  # cuts a retry's backoff short
        if self._thread is not None:
            self._thread.join(timeout=self.timeout + 5 if wait else 0.5)
        if self._thread is None or not self._thread.is_alive():  # a worker still waiting on a teacher keeps it
            self.journal.close()

    async def aflush(self, timeout: float | None = None) -> bool:
        """`flush` without blocking the event loop."""
        import asyncio  # noqa: PLC0415 - only async callers pay for it

        return await asyncio.to_thread(self.flush, timeout)

    async def aclose(self) -> None:
        """`close` without blocking the event loop."""
        import asyncio  # noqa: PLC0415

        await asyncio.to_thread(self.close)

    def __enter__(self) -> ModelConsolidator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def append_row(path: Path, row: dict[str, Any]) -> None:
    """Append one JSON line to `path`, flushed and fsynced (a crash tears at most this line)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(row, ensure_ascii=False) + "\n")
        f.flush()
        os.fsync(f.fileno())
