"""The conformance suite every `ExperienceStore` backend must pass unchanged.

Subclass `ExperienceStoreConformance` in a test module and provide a `store` fixture that
yields a fresh, empty store::

    class TestMyStore(ExperienceStoreConformance):
        @pytest.fixture
        def store(self, tmp_path):
            s = MyStore(tmp_path / "x")
            yield s
            s.close()

The suite checks the raw contract (add/get/update/delete/list/search/count, namespace
isolation, transactions), its async twins (aadd/aget/aupdate/adelete/alist/asearch/acount) and
the behaviours built on it (consolidation, supersedes, decay, the cap, credit, and windowed
consolidation: a frozen view writes nothing, and a window's edits keep the cap per kind and the
delete veto and refuse unknown ids, whichever consolidator proposes them). A backend whose
``transaction()`` does not roll back sets ``rolls_back = False`` on its subclass; nothing in the
suite is skipped. A subclass whose store was given an embedder (hybrid recall) sets
``hybrid = True``; build it with `evoharness_bpe.testing.embedders.KeywordEmbedder`, whose
synonyms the paraphrase tests rely on.
"""

from __future__ import annotations

import asyncio
import threading

import pytest

from ..exceptions import MetaActionError, StoreError, UserError
from ..experience import ConsolidationPolicy, consolidate_note, credit, recall
from ..consolidator.testing import ScriptedTeacher
from ..consolidator.window import (
    AddEdit,
    BankLimits,
    DeleteEdit,
    EditApplier,
    MergeEdit,
    ModelWindowConsolidator,
    UpdateEdit,
    WindowCounts,
    WindowNote,
    consolidate_window,
)
from ..stores.base import ExperienceEntry, ExperienceStore
from ..stores.frozen import FrozenView, content_hash

__all__ = ["ExperienceStoreConformance"]

NS = ("tenant-a", "agent")
OTHER = ("tenant-b", "agent")
PREFIX = ("tenant-a",)


class ExperienceStoreConformance:
    """Behaviour shared by every backend; see the module docstring for how to register."""

    rolls_back: bool = True
    """Whether ``transaction()`` undoes the writes of a block that raised. A backend that only
    serialises its callers (no rollback) declares ``rolls_back = False`` and documents it; the
    suite then asserts that the writes made before the error are kept, so neither behaviour can
    change unnoticed."""

    hybrid: bool = False
    """Whether the store was given an embedder (a `KeywordEmbedder`): then a paraphrase that
    shares no word with an entry finds it; without one it must not."""

    @pytest.fixture
    def store(self) -> ExperienceStore:  # pragma: no cover - overridden by each backend
        raise NotImplementedError("provide a `store` fixture that yields an empty store")

    # -- raw contract ------------------------------------------------------------------------
    def test_add_get_roundtrip(self, store: ExperienceStore) -> None:
        entry = ExperienceEntry(text="Retry 503 errors after two seconds", tags=["api"], kind="procedure")
        store.add(NS, entry)
        got = store.get(NS, entry.id)
        assert got == entry
        assert store.get(NS, "missing") is None

    def test_duplicate_id_is_rejected(self, store: ExperienceStore) -> None:
        entry = ExperienceEntry(text="one")
        store.add(NS, entry)
        with pytest.raises(StoreError):
            store.add(NS, entry)

    def test_update_replaces_and_reindexes(self, store: ExperienceStore) -> None:
        entry = store.add(NS, ExperienceEntry(text="batches of fifty records"))
        entry.text = "phone numbers need a country code"
        entry.wins = 2
        store.update(NS, entry)
        assert store.get(NS, entry.id) == entry
        assert store.search(NS, "batches fifty") == []
        assert [h.entry.id for h in store.search(NS, "phone country")] == [entry.id]

    def test_update_missing_raises(self, store: ExperienceStore) -> None:
        with pytest.raises(StoreError):
            store.update(NS, ExperienceEntry(text="never added"))

    def test_delete(self, store: ExperienceStore) -> None:
        entry = store.add(NS, ExperienceEntry(text="temporary"))
        assert store.delete(NS, entry.id) is True
        assert store.get(NS, entry.id) is None
        assert store.delete(NS, entry.id) is False
        assert store.search(NS, "temporary") == []

    def test_list_is_newest_first_and_paged(self, store: ExperienceStore) -> None:
        ids = []
        for i in range(5):
            e = store.add(NS, ExperienceEntry(text=f"note {i}", created=100.0 + i, updated=100.0 + i))
            ids.append(e.id)
        assert [e.id for e in store.list(NS)] == ids[::-1]
        assert [e.id for e in store.list(NS, limit=2, offset=1)] == ids[::-1][1:3]
        assert store.count(NS) == 5

    def test_search_ranks_relevant_first(self, store: ExperienceStore) -> None:
        store.add(NS, ExperienceEntry(text="The weather was sunny"))
        best = store.add(NS, ExperienceEntry(text="Rate limit 429: wait for retry-after before the next batch"))
        store.add(NS, ExperienceEntry(text="Batch upload finished"))
        hits = store.search(NS, "rate limit retry")
        assert hits and hits[0].entry.id == best.id
        assert all(h.score > 0 for h in hits)
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
        assert store.search(NS, "zebra") == []
        assert store.search(NS, "") == []

    def test_search_respects_k(self, store: ExperienceStore) -> None:
        for i in range(8):
            store.add(NS, ExperienceEntry(text=f"upload batch number {i}"))
        assert len(store.search(NS, "upload batch", k=3)) == 3

    def test_search_tolerates_query_syntax(self, store: ExperienceStore) -> None:
        """Query-language characters are plain text: they neither raise nor hide a matching entry."""
        entry = store.add(NS, ExperienceEntry(text="quotes and operators"))
        store.add(NS, ExperienceEntry(text="unrelated weather report"))
        for query in ['"quotes', "NOT quotes", "quotes*:c^(d)", "quotes -operators", "NEAR(quotes operators)",
                      'quotes" OR "x', "operators AND", "(operators", "quotes'", "{operators}", "quotes; DROP TABLE x"]:
            hits = store.search(NS, query)
            assert [h.entry.id for h in hits] == [entry.id], query
        for query in ['"', "*:^()", "-", "NEAR()", "'", ";"]:
            assert store.search(NS, query) == [], query

    def test_an_entry_is_found_by_its_own_punctuated_text(self, store: ExperienceStore) -> None:
        texts = ['Rate-limit: "429" means wait (retry-after*)', "NOT before 9:00 ^ AND never on Sundays; OR call ops",
                 "col:value NEAR(x, y) -- comment '' quotes"]
        entries = [store.add(NS, ExperienceEntry(text=t)) for t in texts]
        for entry in entries:
            hits = store.search(NS, entry.text)
            assert hits and hits[0].entry.id == entry.id, entry.text

    def test_namespaces_are_isolated(self, store: ExperienceStore) -> None:
        mine = store.add(NS, ExperienceEntry(text="secret procedure for tenant a"))
        theirs = store.add(OTHER, ExperienceEntry(text="secret procedure for tenant b"))
        assert store.get(OTHER, mine.id) is None
        assert [h.entry.id for h in store.search(NS, "secret procedure")] == [mine.id]
        assert [e.id for e in store.list(OTHER)] == [theirs.id]
        assert store.delete(OTHER, mine.id) is False
        with pytest.raises(StoreError):
            store.update(OTHER, mine)
        assert store.get(NS, mine.id) == mine

    def test_namespace_is_not_a_prefix_match(self, store: ExperienceStore) -> None:
        store.add(NS, ExperienceEntry(text="nested namespace entry"))
        assert store.search(PREFIX, "nested namespace") == []
        assert store.list(PREFIX) == []
        assert store.count(PREFIX) == 0

    def test_invalid_namespace_is_rejected(self, store: ExperienceStore) -> None:
        for bad in [(), ("a/b",), ("",), "tenant", ("x\n",)]:
            with pytest.raises(UserError):
                store.search(bad, "x")  # type: ignore[arg-type]

    def test_unicode_roundtrip(self, store: ExperienceStore) -> None:
        entry = store.add(NS, ExperienceEntry(text="Kunde Müller: Telefonnummer prüfen — 東京 ✓", tags=["ünï"]))
        assert store.get(NS, entry.id) == entry
        assert [h.entry.id for h in store.search(NS, "müller telefonnummer")] == [entry.id]

    def test_transaction_on_error_matches_the_declared_capability(self, store: ExperienceStore) -> None:
        kept = store.add(NS, ExperienceEntry(text="kept entry"))
        with pytest.raises(RuntimeError, match="boom"):
            with store.transaction():
                added = store.add(NS, ExperienceEntry(text="rolled back entry"))
                raise RuntimeError("boom")
        if self.rolls_back:
            assert [e.id for e in store.list(NS)] == [kept.id], "transaction() must roll back (or declare rolls_back = False)"
            assert store.get(NS, added.id) is None and store.search(NS, "rolled back") == []
        else:  # documented: transaction() serialises callers but keeps what ran before the error
            assert {e.id for e in store.list(NS)} == {kept.id, added.id}
            assert store.get(NS, added.id) is not None

    def test_failed_transaction_keeps_updates_and_deletes_as_declared(self, store: ExperienceStore) -> None:
        changed = store.add(NS, ExperienceEntry(text="original wording", wins=1))
        removed = store.add(NS, ExperienceEntry(text="entry to delete"))
        before = store.get(NS, changed.id)
        with pytest.raises(RuntimeError):
            with store.transaction():
                with store.transaction():  # re-entrant: the outer transaction decides
                    edited = changed.model_copy(update={"text": "edited wording", "wins": 5})
                    store.update(NS, edited)
                    assert store.delete(NS, removed.id) is True
                raise RuntimeError("after the inner block")
        if self.rolls_back:
            assert store.get(NS, changed.id) == before
            assert store.get(NS, removed.id) is not None and store.count(NS) == 2
            assert [h.entry.id for h in store.search(NS, "original wording")] == [changed.id]
        else:
            got = store.get(NS, changed.id)
            assert got is not None and got.text == "edited wording" and got.wins == 5
            assert store.get(NS, removed.id) is None and store.count(NS) == 1

    def test_transaction_commits_on_success(self, store: ExperienceStore) -> None:
        with store.transaction():
            first = store.add(NS, ExperienceEntry(text="first committed entry"))
            with store.transaction():
                second = store.add(NS, ExperienceEntry(text="second committed entry"))
        assert {e.id for e in store.list(NS)} == {first.id, second.id}
        assert store.count(NS) == 2

    def test_threads_adding_concurrently_lose_nothing(self, store: ExperienceStore) -> None:
        def worker(n: int) -> None:
            for i in range(25):
                store.add(NS, ExperienceEntry(text=f"thread {n} entry {i}"))

        threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert store.count(NS) == 100

    def test_word_families_match(self, store: ExperienceStore) -> None:
        phones = store.add(NS, ExperienceEntry(text="Customer phones must be written with a country code"))
        retries = store.add(NS, ExperienceEntry(text="Retries of failed processes double the statuses logged"))
        store.add(NS, ExperienceEntry(text="Weekly report goes to the finance team"))
        assert [h.entry.id for h in store.search(NS, "phone")] == [phones.id]
        for query in ["retry", "process", "status"]:
            assert [h.entry.id for h in store.search(NS, query)] == [retries.id], query

    def test_paraphrase_matches_the_declared_capability(self, store: ExperienceStore) -> None:
        meant = store.add(NS, ExperienceEntry(text="phone numbers need a country code"))
        store.add(NS, ExperienceEntry(text="The weather was sunny"))
        query = "the API refuses telephone entries lacking a dialling prefix"  # no word in common
        hits = store.search(NS, query)
        if self.hybrid:
            assert [h.entry.id for h in hits] == [meant.id]
            assert hits[0].score > 0
            assert store.search(OTHER, query) == []
            store.delete(NS, meant.id)
            assert store.search(NS, query) == []
        else:
            assert hits == []

    def test_hybrid_ranks_lexical_and_semantic_matches(self, store: ExperienceStore) -> None:
        exact = store.add(NS, ExperienceEntry(text="Wait for retry-after when the rate limit hits"))
        paraphrase = store.add(NS, ExperienceEntry(text="Sleep before the next call once throttled"))
        store.add(NS, ExperienceEntry(text="Invoices are due at the end of the month"))
        ids = [h.entry.id for h in store.search(NS, "wait when rate limited", k=5)]
        assert ids[0] == exact.id
        assert ids == ([exact.id, paraphrase.id] if self.hybrid else [exact.id])

    # -- async twins -------------------------------------------------------------------------
    def test_async_twins_match_the_sync_contract(self, store: ExperienceStore) -> None:
        async def scenario() -> None:
            entry = ExperienceEntry(text="Retry 503 errors after two seconds", tags=["api"])
            assert await store.aadd(NS, entry) == entry
            assert await store.aget(NS, entry.id) == entry
            assert await store.aget(OTHER, entry.id) is None
            with pytest.raises(StoreError):
                await store.aadd(NS, entry)
            entry.text = "phone numbers need a country code"
            await store.aupdate(NS, entry)
            assert await store.aget(NS, entry.id) == entry
            with pytest.raises(StoreError):
                await store.aupdate(OTHER, entry)
            hits = await store.asearch(NS, "phone country", k=5)
            assert [h.entry.id for h in hits] == [entry.id]
            assert await store.asearch(NS, "retry seconds") == []
            second = await store.aadd(NS, ExperienceEntry(text="second", updated=entry.updated + 10))
            assert [e.id for e in await store.alist(NS)] == [second.id, entry.id]
            assert [e.id for e in await store.alist(NS, limit=1, offset=1)] == [entry.id]
            assert await store.acount(NS) == 2 and await store.acount(OTHER) == 0
            assert await store.adelete(OTHER, entry.id) is False
            assert await store.adelete(NS, entry.id) is True
            assert await store.aget(NS, entry.id) is None
            assert store.count(NS) == 1  # the twins and the sync methods see one store

        asyncio.run(scenario())

    def test_async_twins_run_concurrently_without_loss(self, store: ExperienceStore) -> None:
        async def scenario() -> list[ExperienceEntry]:
            return await asyncio.gather(*(store.aadd(NS, ExperienceEntry(text=f"gathered note {i}")) for i in range(20)))

        added = asyncio.run(scenario())
        assert store.count(NS) == 20
        assert {e.id for e in store.list(NS, limit=50)} == {e.id for e in added}

    def test_async_twins_validate_namespaces(self, store: ExperienceStore) -> None:
        with pytest.raises(UserError):
            asyncio.run(store.asearch(("a/b",), "x"))

    # -- behaviour built on the contract -----------------------------------------------------
    def test_near_duplicate_merges(self, store: ExperienceStore) -> None:
        first = consolidate_note(store, NS, "Always validate the email field before upload", tags=["crm"])
        second = consolidate_note(store, NS, "always validate the email field before the upload!", tags=["email"])
        assert first.action == "added" and second.action == "merged"
        merged = store.get(NS, first.entry.id)
        assert merged is not None and merged.evidence == 2 and merged.tags == ["crm", "email"]
        assert store.count(NS) == 1

    def test_different_note_is_added(self, store: ExperienceStore) -> None:
        consolidate_note(store, NS, "Always validate the email field before upload")
        other = consolidate_note(store, NS, "The target API accepts at most fifty records per batch")
        assert other.action == "added" and store.count(NS) == 2

    def test_contradiction_replaces(self, store: ExperienceStore) -> None:
        old = consolidate_note(store, NS, "The API accepts batches of at most 50 records")
        new = consolidate_note(store, NS, "The API accepts batches of at most 100 records")
        assert new.action == "replaced" and new.replaced == [old.entry.id]
        assert store.get(NS, old.entry.id) is None
        assert new.entry.supersedes == [old.entry.id]

    def test_supersedes_replaces_named_entry(self, store: ExperienceStore) -> None:
        old = consolidate_note(store, NS, "Retry immediately on 429")
        new = consolidate_note(store, NS, "Wait for retry-after on rate limits", supersedes=old.entry.id)
        assert new.action == "replaced" and store.get(NS, old.entry.id) is None
        with pytest.raises(MetaActionError):
            consolidate_note(store, NS, "anything", supersedes="no-such-id")
        assert store.count(NS) == 1

    def test_supersedes_cannot_cross_namespaces(self, store: ExperienceStore) -> None:
        theirs = consolidate_note(store, OTHER, "their lesson")
        with pytest.raises(MetaActionError):
            consolidate_note(store, NS, "my lesson", supersedes=theirs.entry.id)
        assert store.get(OTHER, theirs.entry.id) is not None

    def test_recall_prefers_useful_and_hides_decayed(self, store: ExperienceStore) -> None:
        good = consolidate_note(store, NS, "Upload customer records in small batches").entry
        bad = consolidate_note(store, NS, "Upload customer records all at once quickly").entry
        for _ in range(3):
            credit(store, NS, [bad.id], success=False)
        credit(store, NS, [good.id], success=True)
        ids = [h.entry.id for h in recall(store, NS, "upload customer records", k=5)]
        assert ids == [good.id]
        decayed = store.get(NS, bad.id)
        assert decayed is not None and decayed.losses == 3 and decayed.uses == 3

    def test_cap_keeps_the_best(self, store: ExperienceStore) -> None:
        policy = ConsolidationPolicy(max_entries=10)
        winner = consolidate_note(store, NS, "winner lesson alpha", policy=policy).entry
        credit(store, NS, [winner.id], success=True)
        for i in range(15):
            consolidate_note(store, NS, f"filler lesson {i} about topic{i} zz{i}", policy=policy)
        assert store.count(NS) <= 10
        assert store.get(NS, winner.id) is not None
        assert store.count(OTHER) == 0

    # -- windowed consolidation: a frozen bank, then validated edits --------------------------
    def test_frozen_view_writes_nothing_and_keeps_the_credit(self, store: ExperienceStore) -> None:
        entry = consolidate_note(store, NS, "Validate the email field before the upload").entry
        before = content_hash(store, NS)
        view = FrozenView(store)
        consolidate_note(view, NS, "Batches above fifty records are refused by the target")
        consolidate_note(view, NS, "validate the email field before the upload!")  # a merge, dropped
        assert credit(view, NS, [entry.id], success=True) == 1
        assert not view.delete(NS, "no-such-id") and view.delete(NS, entry.id)
        assert content_hash(store, NS) == before and store.count(NS) == 1
        assert view.take_credits(NS) == {entry.id: (1, 1, 0)} and view.take_credits(NS) == {}
        with pytest.raises(StoreError):
            view.update(NS, ExperienceEntry(text="not stored"))

    def test_window_edits_naming_unknown_ids_are_refused(self, store: ExperienceStore) -> None:
        kept = consolidate_note(store, NS, "Upload customer records in small batches").entry
        other = consolidate_note(store, OTHER, "An entry of another namespace").entry
        before = content_hash(store, NS)
        counts = WindowCounts()
        with store.transaction():
            applier = EditApplier(store, NS, BankLimits(), counts)
            outcomes = [applier.apply(e) for e in (UpdateEdit("no-such-id", text="x"), MergeEdit(kept.id, ("no-such-id",)),
                                                     DeleteEdit("no-such-id"), DeleteEdit(other.id))]
        assert outcomes == ["unknown"] * 4 and counts.unknown == 4
        assert content_hash(store, NS) == before and store.get(OTHER, other.id) is not None

    def test_window_keeps_the_cap_per_kind(self, store: ExperienceStore) -> None:
        consolidate_note(store, NS, "Lesson one about alpha batches", kind="lesson")
        consolidate_note(store, OTHER, "Lesson of another namespace about gamma", kind="lesson")
        notes = [WindowNote(f"Distinct lesson {w} about topic{w}", "lesson") for w in ("red", "green", "blue")]
        notes.append(WindowNote("A procedure: export, validate, upload", "procedure"))
        counts = consolidate_window(store, NS, notes, limits=BankLimits(max_per_kind=2))
        assert (counts.add, counts.capacity) == (2, 2)
        kinds = sorted(e.kind for e in store.list(NS, limit=10))
        assert kinds == ["lesson", "lesson", "procedure"] and counts.size == 3
        assert store.count(OTHER) == 1  # the other namespace neither counts against the cap nor changes

    def test_window_veto_keeps_entries_recalled_often(self, store: ExperienceStore) -> None:
        often = consolidate_note(store, NS, "Upload customer records all at once quickly").entry
        rarely = consolidate_note(store, NS, "Send the whole ledger without any check").entry
        for _ in range(3):
            credit(store, NS, [often.id], success=False)
        credit(store, NS, [rarely.id], success=False)
        counts = WindowCounts()
        with store.transaction():
            applier = EditApplier(store, NS, BankLimits(delete_veto=3), counts)
            assert [applier.apply(DeleteEdit(often.id)), applier.apply(DeleteEdit(rarely.id))] == ["vetoed", "delete"]
        assert store.get(NS, often.id) is not None and store.get(NS, rarely.id) is None
        # the rules delete a decayed entry, but not one the veto protects (it stays out of recall)
        again = consolidate_window(store, NS, [], limits=BankLimits(delete_veto=3))
        assert (again.delete, again.vetoed) == (0, 1) and store.get(NS, often.id) is not None
        gone = consolidate_window(store, NS, [], limits=BankLimits(delete_veto=4))
        assert gone.delete == 1 and store.get(NS, often.id) is None

    def test_window_books_credit_then_updates_repeated_notes(self, store: ExperienceStore) -> None:
        entry = consolidate_note(store, NS, "Always validate the email field before upload", tags=["crm"]).entry
        notes = [WindowNote("always validate the email field before the upload!", tags=("email",)),
                 WindowNote("The API accepts batches of at most 50 records")]
        counts = consolidate_window(store, NS, notes, credits={entry.id: (2, 1, 1), "gone": (1, 1, 0)})
        assert (counts.credited, counts.update, counts.add) == (1, 1, 1)
        updated = store.get(NS, entry.id)
        assert updated is not None and (updated.uses, updated.wins, updated.losses, updated.evidence) == (2, 1, 1, 2)
        assert updated.tags == ["crm", "email"]
        fixed = consolidate_window(store, NS, [WindowNote("The API accepts batches of at most 100 records")])
        assert (fixed.update, fixed.add) == (1, 0) and store.count(NS) == 2
        assert any("100 records" in e.text for e in store.list(NS))

    def test_window_model_consolidator_keeps_cap_and_veto(self, store: ExperienceStore) -> None:
        used = consolidate_note(store, NS, "Retry the upload when the API answers 503").entry
        for _ in range(3):
            credit(store, NS, [used.id], success=True)

        def decide(notes: list, related: list) -> list:
            return [{"op": "delete", "id": used.id}, {"op": "delete", "id": notes[0]["id"]},
                    {"op": "add", "text": "Retry 503 answers of the upload API", "kind": "lesson"},
                    {"op": "add", "text": "Wait before a retry of the upload", "kind": "lesson"}]

        consolidator = ModelWindowConsolidator(ScriptedTeacher(decide), timeout=10, retries=0)
        try:
            notes = [WindowNote("The upload API answers 503 when busy: retry it"), WindowNote("Kept note about exports")]
            counts = consolidate_window(store, NS, notes, consolidator=consolidator,
                                        limits=BankLimits(max_per_kind=3, delete_veto=3))
        finally:
            consolidator.close()
        # the veto keeps the used entry; the first note is dropped; two adds fit the cap, the third does not
        assert (counts.vetoed, counts.delete, counts.add, counts.capacity) == (1, 0, 2, 1)
        assert counts.fallback is None and store.get(NS, used.id) is not None and store.count(NS) == 3

    def test_window_model_consolidator_falls_back_to_the_rules(self, store: ExperienceStore) -> None:
        consolidator = ModelWindowConsolidator(ScriptedTeacher(lambda notes, related: "no JSON here"), timeout=10, retries=0)
        try:
            counts = consolidate_window(store, NS, [WindowNote("Validate the email field before upload")],
                                        consolidator=consolidator, limits=BankLimits(max_per_kind=1))
            more = consolidate_window(store, NS, [WindowNote("Another lesson about batches")], consolidator=consolidator,
                                      limits=BankLimits(max_per_kind=1))
        finally:
            consolidator.close()
        assert counts.fallback and "JSON" in counts.fallback and counts.add == 1
        assert more.capacity == 1 and store.count(NS) == 1  # the rules keep the cap too
