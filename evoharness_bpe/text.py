"""Text handling shared by the stores, consolidation and the dashboard.

Term extraction (for BM25 and near-duplicate detection), the default token counter, and the
sanitising of untrusted text (`inline`, from `evoharness_bpe.sanitize`).

Terms are Snowball (Porter2) English stems, so the members of a word family share one term
(``phone``/``phones``, ``retry``/``retries``, ``status``/``statuses``). The stemmer comes from
``PyStemmer`` (C) when installed, else from ``snowballstemmer`` (pure Python); both implement
the same algorithm and give the same stems. `TEXT_VERSION` names this processing: a store
records it next to its index and re-indexes when it changes.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterable
from functools import lru_cache

from .sanitize import inline

__all__ = [
    "TEXT_VERSION",
    "TokenCounter",
    "approx_tokens",
    "stem",
    "terms",
    "query_terms",
    "numbers",
    "has_negation",
    "jaccard",
    "inline",
]

TEXT_VERSION = "snowball-english-1"
"""Identifies the term extraction below; change it whenever `terms` would change its output."""

TokenCounter = Callable[[str], int]
"""Counts the tokens of a text; any tokenizer's `len(encode(text))` fits."""

_TOKEN_RE = re.compile(r"\w+|[^\w\s]")
_WORD_RE = re.compile(r"[^\W_]+", re.UNICODE)
_NUMBER_RE = re.compile(r"\d+(?:[.,]\d+)*")

# Function words that carry no topic. Negations (not, no, never …) are deliberately absent:
# "retry" and "never retry" are different lessons.
_STOPWORDS = frozenset(
    "a an and are as at be been being but by do does did for from has have had if in into is it its "
    "of on or so than that the their them they then there these this those to was were will with "
    "when which while who whom what we you your our i me my he she his her us".split()
)
_NEGATIONS = frozenset("not no never cannot cant dont doesnt didnt wont isnt arent without".split())


def _load_stemmer() -> Callable[[str], str]:
    try:
        import Stemmer  # PyStemmer: the same Snowball algorithm, compiled

        return Stemmer.Stemmer("english").stemWord
    except ImportError:
        import snowballstemmer

        return snowballstemmer.stemmer("english").stemWord


_stem_word = _load_stemmer()


@lru_cache(maxsize=65536)
def stem(word: str) -> str:
    """The Snowball English stem of one lower-cased word (``"retries"`` → ``"retri"``)."""
    if len(word) <= 2 or word.isdigit():
        return word
    return _stem_word(word)


def approx_tokens(text: str) -> int:
    """Fast token estimate: words, numbers and punctuation marks each count as one token.

    It tracks BPE tokenizers within about 20% on English prose and JSON, and it is additive
    over lines, which the dashboard relies on to stay within budget while it is being built.
    """
    return len(_TOKEN_RE.findall(text))


def _words(text: str) -> list[str]:
    # NFKC folds compatibility forms (ﬁ → fi, full-width letters); casefold lowers ß → ss too.
    return _WORD_RE.findall(unicodedata.normalize("NFKC", text).casefold())


def terms(text: str) -> list[str]:
    """Lower-cased, stemmed content words of `text`, stop words dropped, in order."""
    return [stem(w) for w in _words(text) if w not in _STOPWORDS]


def query_terms(text: str, limit: int = 32) -> list[str]:
    """The distinct terms of a search query, in order, at most `limit` of them."""
    return list(dict.fromkeys(terms(text)))[:limit]


def numbers(text: str) -> frozenset[str]:
    """The numbers written in `text` (a changed number marks a contradiction, not a duplicate)."""
    return frozenset(_NUMBER_RE.findall(text))


def has_negation(text: str) -> bool:
    """Whether `text` contains a negation word (``not``, ``never``, ``don't`` …)."""
    words = {w.replace("'", "") for w in re.findall(r"[a-z']+", text.lower())}
    return not _NEGATIONS.isdisjoint(words)


def jaccard(a: Iterable[str], b: Iterable[str]) -> float:
    """Jaccard similarity of two term collections (0.0 when both are empty)."""
    sa, sb = set(a), set(b)
    if not sa and not sb:
        return 0.0
    return len(sa & sb) / len(sa | sb)
