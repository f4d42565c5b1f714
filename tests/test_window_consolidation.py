"""The model consolidator's decisions about a window's notes, as edits (the checks themselves run
on every store in `evoharness_bpe.testing.conformance`)."""

from __future__ import annotations

from typing import Any

import pytest

from evoharness_bpe.consolidator.testing import ScriptedTeacher
from evoharness_bpe.consolidator.window import BankLimits, ModelWindowConsolidator, WindowNote, consolidate_window
from evoharness_bpe.exceptions import UserError
from evoharness_bpe.experience import consolidate_note, credit
from evoharness_bpe.stores.memory import MemoryExperienceStore

NS = ("t", "a")


def _run(store: MemoryExperienceStore, notes: list[WindowNote], decide: Any) -> Any:
    teacher = ScriptedTeacher(decide)
    consolidator = ModelWindowConsolidator(teacher, timeout=10, retries=0)
    try:
        return consolidate_window(store, NS, notes, consolidator=consolidator), teacher
    finally:
        consolidator.close()


def test_merge_and_replace_decisions_update_entries_in_place() -> None:
    store = MemoryExperienceStore()
    merged = consolidate_note(store, NS, "Validate the email field before the upload").entry
    stale = consolidate_note(store, NS, "The API accepts batches of at most 50 records").entry
    credit(store, NS, [stale.id], success=False)
    notes = [WindowNote("Check emails before uploading", tags=("email",)), WindowNote("Batches of 100 records are fine now")]

    def decide(notes: list, related: list) -> list:
        assert {r["id"] for r in related} >= {merged.id, stale.id}  # the bank's entries are shown by id
        return [{"op": "merge", "id": "note-1", "into": merged.id, "text": "Validate every email before the upload"},
                {"op": "replace", "id": stale.id, "by": "note-2"}]

    (counts, teacher) = _run(store, notes, decide)
    assert (counts.update, counts.add, counts.fallback) == (2, 0, None) and store.count(NS) == 2
    assert teacher.requests == [[n.text for n in notes]]
    first, second = store.get(NS, merged.id), store.get(NS, stale.id)
    assert first is not None and first.text == "Validate every email before the upload" and first.evidence == 2
    assert first.tags == ["email"]
    # a correction keeps the id and the uses, and starts its record again
    assert second is not None and second.text == "Batches of 100 records are fine now"
    assert (second.uses, second.losses, second.evidence) == (1, 0, 1)


def test_notes_merged_into_each_other_are_added_once_and_unnamed_notes_are_kept() -> None:
    store = MemoryExperienceStore()
    notes = [WindowNote("Export before upload", tags=("a",)), WindowNote("Export first, then upload", tags=("b",)),
             WindowNote("Something else entirely")]
    (counts, _) = _run(store, notes, lambda n, r: [{"op": "merge", "id": "note-2", "into": "note-1"}])
    assert counts.add == 2 and store.count(NS) == 2
    kept = next(e for e in store.list(NS) if e.text == "Export before upload")
    assert kept.tags == ["a", "b"]


def test_an_answer_naming_an_id_it_was_not_shown_is_left_to_the_rules() -> None:
    store = MemoryExperienceStore()
    (counts, _) = _run(store, [WindowNote("A lesson about exports")], lambda n, r: [{"op": "delete", "id": "invented"}])
    assert counts.fallback and "unknown id" in counts.fallback
    assert counts.add == 1 and counts.delete == 0 and store.count(NS) == 1


def test_notes_and_limits_are_checked() -> None:
    note = WindowNote.from_arguments({"text": "  x  ", "kind": "rumour", "tags": ["b", "a", "a"], "supersedes": 3})
    assert note == WindowNote("x", "lesson", ("a", "b"), None)
    with pytest.raises(UserError, match="max_per_kind"):
        BankLimits(max_per_kind=0)
    with pytest.raises(UserError, match="delete_veto"):
        BankLimits(delete_veto=True)
    with pytest.raises(UserError, match="batch"):
        ModelWindowConsolidator(lambda m: "", batch=0)
