"""The one sanitiser for untrusted text that a model will read.

Everything a model, a tool or a stored lesson wrote is untrusted: the dashboard, recall
results and observation echoes all pass it through here before a model sees it.

- Invisible characters are removed: every Unicode format character (category Cf — zero-width
  spaces and joiners, bidi controls, U+061C, U+2060–2064, U+FEFF, U+00AD, U+180E, the tag
  characters U+E0000–E007F …), U+034F, variation selectors, Hangul and Khmer fillers.
- Control characters, line and paragraph separators become spaces; runs of white space one
  space, so the text stays on one line.
- Chat-template markers are defused, so no tokenizer reads them as special tokens: angle
  brackets become ‹ › (ChatML ``<|im_start|>``, Llama ``<|eot_id|>`` and ``<<SYS>>``, Hermes
  ``<tool_call>`` / ``</tool_response>``, DeepSeek ``<｜…｜>``), the bars inside such markers
  become ¦, and bracketed upper-case markers (``[INST]``, ``[TOOL_CALLS]``,
  ``[SYSTEM_PROMPT]``, ``[AVAILABLE_TOOLS]`` …) get ⟦ ⟧.

`quote` puts the result between « » (removed from the text itself), so a quoted text cannot
end early and forge what follows it on the line, such as another entry's id or counts.
"""

from __future__ import annotations

import re

__all__ = ["sanitize", "inline", "quote", "INVISIBLE_RE"]

# Category Cf (Unicode 15.1, a superset of older versions), then the invisible characters of
# other categories: U+034F, Hangul fillers, Khmer inherent vowels, Mongolian and other variation
# selectors. `tests/test_sanitize.py` checks the Cf list against the running `unicodedata`.
INVISIBLE_RE = re.compile(
    "["
    "\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e\u200b-\u200f\u202a-\u202e"
    "\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f"
    "\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e007f"
    "\u034f\u115f\u1160\u3164\uffa0\u17b4\u17b5\u180b-\u180f\ufe00-\ufe0f\U000e0100-\U000e01ef"
    "\ud800-\udfff"
    "]+"
)
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]+")
_BAR_MARKER_RE = re.compile(r"[<‹][|｜¦]|[|｜¦][>›]")
_BRACKET_MARKER_RE = re.compile(r"\[(/?[A-Z][A-Z0-9_]{1,40})\]")
_ANGLES = str.maketrans({"<": "‹", ">": "›", "｜": "¦"})


def sanitize(text: str) -> str:
    """`text` with invisible characters removed and chat-template markers defused.

    Newlines and control characters become spaces and white space is collapsed, so the
    result is one line.

    >>> sanitize("<|im_start|>system\\u200b [INST] hi\\U000e0041")
    '‹¦im_start¦›system ⟦INST⟧ hi'
    """
    if not text.isascii():
        text = INVISIBLE_RE.sub("", text)
    text = _CONTROL_RE.sub(" ", text)
    text = _BAR_MARKER_RE.sub(lambda m: m.group(0).translate(_ANGLES).replace("|", "¦"), text)
    text = text.translate(_ANGLES)
    text = _BRACKET_MARKER_RE.sub(r"⟦\1⟧", text)
    return " ".join(text.split())


def inline(text: str, limit: int, *, forbidden: str = "") -> str:
    """`sanitize(text)` without the characters of `forbidden`, cut to `limit` characters.

    A cut text ends with an ellipsis. Only the first few times `limit` characters are read, so
    a megabyte of input costs no more than a short one.
    """
    if len(text) > 4 * limit + 64:
        text = text[: 4 * limit + 64]
    text = sanitize(text)
    if forbidden:
        text = text.translate({ord(ch): None for ch in forbidden})
        text = " ".join(text.split())
    if len(text) > limit:
        text = text[: max(limit - 1, 0)].rstrip() + "…"
    return text


def quote(text: str, limit: int) -> str:
    """`text` sanitised, cut to `limit` and put between « » that it cannot contain."""
    return "«" + inline(text, limit, forbidden="«»") + "»"
