"""The model consolidator: decisions checked and applied once, in the background, crash-safe."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from evoharness_bpe import MemoryExperienceStore, ModelConsolidator, SQLiteExperienceStore, Workspace
from evoharness_bpe.consolidator import DecisionError, JobJournal, parse_decisions, validate_decisions
from evoharness_bpe.stores.base import ExperienceEntry

NS = ("acme", "agent")
OTHER = ("globex", "agent")


class ScriptedTeacher:
    """Answers with `decide(notes, related)`; records each request."""

    def __init__(self, decide: Any, *, gate: threading.Event | None = None) -> None:
        self.decide, self.gate, self.requests = decide, gate, []

    def __call__(self, messages: list[dict[str, str]]) -> str:
        if self.gate is not None:
            self.gate.wait()
        payload = json.loads(messages[-1]["content"])
        self.requests.append(payload)
        return json.dumps({"decisions": self.decide(payload["notes"], payload["related"])})


def _snapshot(store: Any, ns: tuple[str, ...] = NS) -> list[tuple[str, str, int]]:
    return sorted((e.id, e.text, e.evidence) for e in store.list(ns, limit=1000))


def _seed(store: Any) -> dict[str, str]:
    old = ExperienceEntry(text="The CRM API accepts 5 requests per second", tags=["crm"])
    dup = ExperienceEntry(text="Phone numbers need a country code before upload", tags=["crm"])
    for e in (old, dup):
        store.add(NS, e)
    secret = ExperienceEntry(text="Globex invoices need the VAT id")
    store.add(OTHER, secret)
    return {"old": old.id, "dup": dup.id, "secret": secret.id}


def test_a_teacher_merges_and_replaces_after_the_episode(tmp_path: Path) -> None:
    store = SQLiteExperienceStore(tmp_path / "x.db")
    ids = _seed(store)

    def decide(notes: list[dict[str, Any]], related: list[dict[str, Any]]) -> list[dict[str, Any]]:
        by_text = {n["text"]: n["id"] for n in notes}
        return [
            {"op": "replace", "id": ids["old"], "by": by_text["The CRM API now allows 10 requests a second"]},
            {"op": "merge", "id": by_text["Add the country code to phone numbers first"], "into": ids["dup"],
             "text": "Phone numbers need their country code before upload"},
        ]

    teacher = ScriptedTeacher(decide)
    with ModelConsolidator(teacher, store, dataset=tmp_path / "decisions.jsonl") as consolidator:
        ws = Workspace("Migrate", store=store, namespace=NS, consolidator=consolidator)
        assert ws.act("note", {"text": "The CRM API now allows 10 requests a second"}).ok
        assert ws.act("note", {"text": "Add the country code to phone numbers first"}).ok
        ws.finish(success=True)
        assert consolidator.flush(timeout=30)
    texts = {e.text: e for e in store.list(NS, limit=100)}
    assert "The CRM API accepts 5 requests per second" not in texts
    assert ids["old"] in texts["The CRM API now allows 10 requests a second"].supersedes
    merged = texts["Phone numbers need their country code before upload"]
    assert merged.id == ids["dup"] and merged.evidence == 2
    assert "Add the country code to phone numbers first" not in texts
    # the teacher saw the related entries of this namespace only
    shown = {r["id"] for r in teacher.requests[0]["related"]}
    assert ids["old"] in shown and ids["secret"] not in shown
    [row] = [json.loads(line) for line in (tmp_path / "decisions.jsonl").read_text().splitlines()]
    assert row["prompt"][0]["role"] == "system" and json.loads(row["completion"][0]["content"])["decisions"][0]["op"] == "replace"


def test_finish_returns_while_the_teacher_is_still_thinking() -> None:
    store, gate = MemoryExperienceStore(), threading.Event()
    teacher = ScriptedTeacher(lambda notes, related: [{"op": "keep", "id": n["id"]} for n in notes], gate=gate)
    with ModelConsolidator(teacher, store) as consolidator:
        ws = Workspace("Task", store=store, namespace=NS, consolidator=consolidator)
        ws.act("note", {"text": "Retry a 503 after two seconds"})
        ws.finish(success=True)                       # returned: the teacher has not answered yet
        assert consolidator.pending() == 1 and not teacher.requests
        nxt = Workspace("Next task", store=store, namespace=NS, consolidator=consolidator)
        assert nxt.act("recall", {"query": "503 retry"}).ok   # the next episode starts at once
        gate.set()
        assert consolidator.flush(timeout=30) and consolidator.pending() == 0
    assert len(teacher.requests) == 1


def test_every_n_notes_submits_during_the_episode() -> None:
    store = MemoryExperienceStore()
    teacher = ScriptedTeacher(lambda notes, related: [])
    with ModelConsolidator(teacher, store, every_notes=2) as consolidator:
        ws = Workspace("Task", store=store, namespace=NS, consolidator=consolidator)
        for text in ("alpha lesson one", "beta lesson two", "gamma lesson three"):
            ws.act("note", {"text": text})
        assert consolidator.flush(timeout=30)
        assert [len(r["notes"]) for r in teacher.requests] == [2]
        ws.finish(success=True)
        assert consolidator.flush(timeout=30)
    assert [len(r["notes"]) for r in teacher.requests] == [2, 1]


@pytest.mark.parametrize("answer", [
    lambda ids, note: [{"op": "delete", "id": ids["secret"]}],                       # another tenant's entry
    lambda ids, note: [{"op": "delete", "id": "0123456789abcdef"}],                  # an invented id
    lambda ids, note: [{"op": "merge", "id": note, "into": ids["secret"]}],
    lambda ids, note: [{"op": "keep", "id": note}, {"op": "delete", "id": ids["dup"]}, {"op": "merge", "id": note, "into": ids["dup"]}],
    lambda ids, note: "not json at all",
    lambda ids, note: [{"op": "explode", "id": note}],
])
def test_decisions_naming_other_or_invented_ids_change_nothing(answer: Any) -> None:
    store = MemoryExperienceStore()
    ids = _seed(store)
    holder: dict[str, str] = {}

    def teacher(messages: list[dict[str, str]]) -> str:
        result = answer(ids, holder["note"])
        return result if isinstance(result, str) else json.dumps({"decisions": result})

    consolidator = ModelConsolidator(teacher, store, start=False)
    ws = Workspace("Task", store=store, namespace=NS, consolidator=consolidator)
    ws.act("note", {"text": "Uploads fail on weekends because of maintenance"})
    holder["note"] = ws.state.experience.noted[0]
    before, before_other = _snapshot(store), _snapshot(store, OTHER)
    ws.finish(success=True)
    job = consolidator.journal.next()
    assert job is not None and consolidator.run_job(job) == "fallback"
    assert _snapshot(store) == before and _snapshot(store, OTHER) == before_other
    consolidator.close(wait=False)


def test_a_slow_teacher_times_out_and_the_rules_stand() -> None:
    store, gate = MemoryExperienceStore(), threading.Event()
    consolidator = ModelConsolidator(ScriptedTeacher(lambda n, r: [{"op": "delete", "id": n[0]["id"]}], gate=gate),
                                     store, timeout=0.2, start=False)
    ws = Workspace("Task", store=store, namespace=NS, consolidator=consolidator)
    ws.act("note", {"text": "Check the quota before a bulk upload"})
    ws.finish(success=False)
    job = consolidator.journal.next()
    assert consolidator.run_job(job) == "fallback"
    assert [e.text for e in store.list(NS)] == ["Check the quota before a bulk upload"]
    gate.set()
    consolidator.close(wait=False)


def test_parse_and_validate_refuse_what_cannot_be_applied() -> None:
    with pytest.raises(DecisionError):
        parse_decisions('{"decisions": [{"op": "merge", "id": "a"}]}')   # merge needs "into"
    batch = parse_decisions('```json\n{"decisions": [{"op": "add", "text": "x\u200b\u202e y", "tags": ["t"]}]}\n```')
    clean = validate_decisions(batch, {"n1"}, {"n1"})
    assert clean.decisions[0].text == "x y"
    with pytest.raises(DecisionError):
        validate_decisions(parse_decisions('{"decisions": [{"op": "replace", "id": "n1", "by": "r1"}]}'), {"n1"}, {"n1", "r1"})


_CRASHING = textwrap.dedent("""
    import sys, time
    from evoharness_bpe import SQLiteExperienceStore, Workspace, ModelConsolidator
    store = SQLiteExperienceStore(sys.argv[1])
    def stuck(messages):
        time.sleep(3600)
    consolidator = ModelConsolidator(stuck, store, journal=sys.argv[2])
    topics = ["phone formats", "rate limits", "weekend maintenance", "duplicate emails", "currency rounding"]
    for i, topic in enumerate(topics):
        ws = Workspace(f"Task {i}", store=store, namespace=("acme", "agent"), consolidator=consolidator)
        ws.act("note", {"text": f"Check {topic} before the upload"})
        ws.finish(success=True)
    print("submitted", flush=True)
    time.sleep(3600)
""")


def test_kill_9_with_pending_jobs_loses_none_and_applies_none_twice(tmp_path: Path) -> None:
    db, journal = tmp_path / "x.db", tmp_path / "jobs.db"
    proc = subprocess.Popen([sys.executable, "-c", _CRASHING, str(db), str(journal)], stdout=subprocess.PIPE, text=True,
                            env=dict(os.environ))
    assert proc.stdout is not None and proc.stdout.readline().strip() == "submitted"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)

    store = SQLiteExperienceStore(db)
    calls: list[int] = []

    def distil(notes: list[dict[str, Any]], related: list[dict[str, Any]]) -> list[dict[str, Any]]:
        calls.append(1)
        return [{"op": "add", "text": f"Procedure from: {notes[0]['text']}", "kind": "procedure"}]

    with ModelConsolidator(ScriptedTeacher(distil), store, journal=journal) as consolidator:
        assert consolidator.flush(timeout=60)
        assert consolidator.journal.counts() == {"done": 5}
    procedures = [e for e in store.list(NS, limit=100) if e.kind == "procedure"]
    assert len(calls) == 5 and len(procedures) == 5

    # a job whose decisions were stored but not applied when the process died is applied once
    j = JobJournal(journal)
    job = j.add(NS, [procedures[0].id])
    j.decide(job.id, json.dumps({"decisions": [{"op": "add", "text": "Distilled once", "kind": "lesson"}]}))
    j.close()
    for _ in range(2):  # a second start finds nothing left to do
        with ModelConsolidator(lambda m: pytest.fail("a decided job needs no teacher"), store, journal=journal) as again:
            assert again.flush(timeout=30)
    assert [e.text for e in store.list(NS, limit=100)].count("Distilled once") == 1
