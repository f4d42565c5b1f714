"""The background consolidator's retries, idempotent submissions and shutdown without waiting."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from evoharness_bpe import MemoryExperienceStore, ModelConsolidator, SQLiteExperienceStore, Workspace

NS = ("acme", "agent")


def _keep(messages: list[dict[str, str]]) -> str:
    return json.dumps({"decisions": [{"op": "keep", "id": n["id"]} for n in json.loads(messages[-1]["content"])["notes"]]})


def _note(store, consolidator, text: str) -> None:
    ws = Workspace("Task", store=store, namespace=NS, consolidator=consolidator)
    ws.act("note", {"text": text})
    ws.finish(success=True)


def test_a_failed_request_is_retried_then_a_refusal_is_left_to_the_rules() -> None:
    store, calls = MemoryExperienceStore(), []

    def flaky(messages: list[dict[str, str]]) -> str:
        calls.append(time.monotonic())
        if len(calls) in (1, 3, 4):
            raise ConnectionResetError("the teacher went away")
        return _keep(messages)

    consolidator = ModelConsolidator(flaky, store, retries=1, backoff=0.05, start=False)
    _note(store, consolidator, "Retry a 503 after two seconds")
    assert consolidator.run_job(consolidator.journal.next()) == "done" and len(calls) == 2
    assert calls[1] - calls[0] >= 0.05                           # waited for the backoff
    _note(store, consolidator, "Phone numbers need a country code")
    assert consolidator.run_job(consolidator.journal.next()) == "fallback" and len(calls) == 4
    assert consolidator.journal.counts() == {"done": 1, "fallback": 1}
    consolidator.close()


def test_the_same_key_queues_one_job() -> None:
    store = MemoryExperienceStore()
    consolidator = ModelConsolidator(_keep, store, start=False)
    ws = Workspace("Task", store=store, namespace=NS)
    ws.act("note", {"text": "Uploads fail on weekends"})
    first = consolidator.submit(NS, ws.state.experience.noted, key="run-1:a")
    again = consolidator.submit(NS, ws.state.experience.noted, key="run-1:a")
    assert first is not None and again is not None and first.id == again.id and consolidator.pending() == 1
    consolidator.submit(NS, ws.state.experience.noted)           # without a key: a new job
    assert consolidator.pending() == 2
    consolidator.close(wait=False)


def test_close_without_waiting_leaves_the_queue_for_the_next_start(tmp_path: Path) -> None:
    store, journal, gate = SQLiteExperienceStore(tmp_path / "x.db"), tmp_path / "jobs.db", threading.Event()

    def gated(messages: list[dict[str, str]]) -> str:
        gate.wait(30)
        return _keep(messages)

    consolidator = ModelConsolidator(gated, store, journal=journal)
    for text in ("Check phone formats", "Check rate limits", "Check weekend maintenance"):
        _note(store, consolidator, text)
    consolidator.close(wait=False)                               # the first job is with the teacher
    from evoharness_bpe.consolidator import JobJournal

    assert JobJournal(journal).counts() == {"pending": 3}         # the worker stopped waiting, the journal is closed
    gate.set()
    with ModelConsolidator(_keep, store, journal=journal) as again:
        assert again.flush(timeout=30)
        counts = again.journal.counts()
    assert counts == {"done": 3}                                  # none left to the rules by the shutdown


def test_a_workspace_uses_the_consolidators_store_and_refuses_another() -> None:
    import pytest

    from evoharness_bpe.exceptions import UserError

    store = MemoryExperienceStore()
    with ModelConsolidator(_keep, store) as consolidator:
        ws = Workspace("Task", namespace=NS, consolidator=consolidator)
        assert ws.store is store
        with pytest.raises(UserError, match="same store"):
            Workspace("Task", store=MemoryExperienceStore(), namespace=NS, consolidator=consolidator)
