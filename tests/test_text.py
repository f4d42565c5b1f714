"""Term extraction: word families, unicode, stop words, and the two stemmer backends."""

from __future__ import annotations

import pytest

from evoharness_bpe.experience import consolidate_note
from evoharness_bpe.stores.memory import MemoryExperienceStore
from evoharness_bpe.text import TEXT_VERSION, has_negation, query_terms, stem, terms

FAMILIES = [
    ["phone", "phones", "Phones"],
    ["status", "statuses"],
    ["retry", "retries", "retried", "retrying"],
    ["process", "processes", "processing", "processed"],
    ["country", "countries"],
    ["batch", "batches", "batching"],
    ["upload", "uploads", "uploaded", "uploading"],
    ["validate", "validates", "validated", "validating"],
    ["record", "records", "recorded"],
    ["limit", "limits", "limited", "limiting"],
]


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f[0])
def test_a_word_family_shares_one_term(family: list[str]) -> None:
    stems = {tuple(terms(word)) for word in family}
    assert len(stems) == 1, stems
    assert len(next(iter(stems))) == 1


def test_different_words_keep_different_terms() -> None:
    assert len({stem(w) for w in ["phone", "photo", "process", "procedure", "status", "state", "retry", "return"]}) == 8


def test_stop_words_are_dropped_and_negations_kept() -> None:
    assert terms("The rate of the API is at most five per second") == ["rate", "api", "most", "five", "per", "second"]
    assert terms("never retry and do not batch") == ["never", "retri", "not", "batch"]
    assert terms("the of and to") == []
    assert has_negation("Don't retry") and not has_negation("Retry later")


def test_unicode_is_normalised_and_kept() -> None:
    assert terms("ＡＰＩ ｌｉｍｉｔｓ") == terms("API limits") == ["api", "limit"]  # full-width forms
    assert terms("ﬁle") == terms("file")  # the ligature ﬁ
    assert terms("STRASSE") == terms("straße")  # casefold
    assert terms("Müller prüft 東京") == ["müller", "prüft", "東京"]
    assert terms("na\u00efve caf\u00e9") == terms("nai\u0308ve cafe\u0301")  # composed and decomposed accents
    assert terms("snake_case-words") == ["snake", "case", "word"]


def test_numbers_survive_as_terms() -> None:
    assert terms("HTTP 429 after 30 s") == ["http", "429", "after", "30", "s"]


def test_query_terms_are_distinct_and_bounded() -> None:
    assert query_terms("phones phone PHONES retry") == ["phone", "retri"]
    assert len(query_terms(" ".join(f"word{i}" for i in range(100)), limit=5)) == 5


def test_both_stemmer_backends_agree() -> None:
    snowball = pytest.importorskip("snowballstemmer").stemmer("english")
    pystemmer = pytest.importorskip("Stemmer").Stemmer("english")
    words = [w.lower() for family in FAMILIES for w in family] + ["generously", "happiness", "müller", "ran"]
    assert snowball.stemWords(words) == pystemmer.stemWords(words)
    assert [stem(w) for w in words] == snowball.stemWords(words)


def test_the_text_version_names_the_processing() -> None:
    assert TEXT_VERSION.startswith("snowball-english-")


def test_consolidation_merges_notes_that_differ_by_inflection() -> None:
    store = MemoryExperienceStore()
    first = consolidate_note(store, ("t",), "Always validate the email field before the upload")
    second = consolidate_note(store, ("t",), "always validated email fields before uploads")
    assert second.action == "merged" and second.entry.id == first.entry.id
