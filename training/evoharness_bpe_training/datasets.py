"""Traces → a Hugging Face `DatasetDict` in TRL's conversational tool-calling format.

One row per model call: ``prompt`` is exactly what the model received (the system message with
that step's dashboard, then the recent window), ``completion`` is the one assistant message it
answered with (tool calls carry JSON-string arguments), ``tools`` is the OpenAI tool list as a
JSON string (TRL's SFT trainer decodes it), ``position`` is the call's index in its episode
(0: the opening move). Prompt-completion rows make TRL put the loss on the assistant's tokens
only. Traces from any framework mix freely: they share the core `Trace` format.

Deduplication compares rows with their random ids masked (experience entry ids such as
``88fef2fa8f7f41e8``, UUIDs, tool-call ids), so re-recorded identical episodes collapse as a
whole and not only in their opening moves; `balance_positions` then gives every call position
as many rows as episodes reach it, so the shared opening is not left with one row among
thousands.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from evoharness_bpe import Trace, read_traces
from evoharness_bpe.exceptions import UserError

__all__ = [
    "SFT_COLUMNS",
    "NoTrainingRows",
    "normalize_message",
    "trace_rows",
    "prompt_key",
    "row_key",
    "balance_by_position",
    "traces_to_sft_dataset",
    "load_traces",
    "export_dataset",
]

SFT_COLUMNS: tuple[str, ...] = ("prompt", "completion", "tools", "episode_id", "framework", "env", "position")


class NoTrainingRows(UserError):
    """No trace passed the filters, or the traces hold no model calls."""


def _arguments_text(arguments: Any) -> str:
    if arguments is None:
        return "{}"
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments, ensure_ascii=False)


def normalize_message(message: dict[str, Any]) -> dict[str, Any]:
    """One OpenAI chat message with a fixed shape, so rows of every framework share one schema.

    Content becomes a string (``None`` → ``""``; a list of text parts is joined), tool-call
    arguments become JSON text, and only ``role``, ``content``, ``tool_calls``, ``tool_call_id``
    and ``name`` are kept.
    """
    role = message.get("role")
    if role not in ("system", "user", "assistant", "tool"):
        raise UserError(f"message role must be system, user, assistant or tool, not {role!r}")
    content = message.get("content")
    if isinstance(content, list):
        content = "".join(part.get("text", "") if isinstance(part, dict) else str(part) for part in content)
    out: dict[str, Any] = {"role": role, "content": "" if content is None else str(content)}
    calls = message.get("tool_calls") or None
    if calls:
        out["tool_calls"] = [
            {
                "id": str(call.get("id") or f"call_{n}"),
                "type": "function",
                "function": {
                    "name": str(call["function"]["name"]),
                    "arguments": _arguments_text(call["function"].get("arguments")),
                },
            }
            for n, call in enumerate(calls)
        ]
    else:
        out["tool_calls"] = None
    out["tool_call_id"] = message.get("tool_call_id")
    out["name"] = message.get("name")
    return out


def _calls_of(trace: Trace) -> list[tuple[list[dict[str, Any]], dict[str, Any]]]:
    if trace.model_calls:
        return [(call.messages, call.response) for call in trace.model_calls]
    # A trace without per-call prompts: each assistant message answered the conversation before it.
    return [(trace.messages[:i], m) for i, m in enumerate(trace.messages) if m.get("role") == "assistant"]


def trace_rows(trace: Trace) -> list[dict[str, Any]]:
    """The SFT rows of one trace (no filtering)."""
    tools = json.dumps(trace.tools, ensure_ascii=False)  # key order kept: it is rendered into the prompt
    rows = []
    for position, (prompt, response) in enumerate(_calls_of(trace)):
        if not prompt:
            continue
        rows.append(
            {
                "prompt": [normalize_message(m) for m in prompt],
                "completion": [normalize_message({**response, "role": "assistant"})],
                "tools": tools,
                "episode_id": trace.episode_id,
                "framework": trace.framework,
                "env": trace.env or "",
                "position": position,
            }
        )
    return rows


_VOLATILE_ID = re.compile(
    r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b"  # a UUID
    r"|\b(?:[0-9a-f]{16}|[0-9a-f]{32})\b"  # uuid4().hex and the 16-character entry ids cut from it
    r"|\b(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{12,}\b",  # another random hex id: digits and letters
    re.IGNORECASE,
)


def row_key(row: dict[str, Any]) -> str:
    """The deduplication key of a row: its prompt, completion and tools with random ids masked.

    Each distinct id (a UUID, a hex run of 16 or 32 characters, any other hex run of 12 or more
    characters mixing digits and letters, a tool-call id) becomes ``<id0>``, ``<id1>`` … in order of first appearance, so two rows that
    differ only in the ids an episode drew are one row, and the structure (which result answers
    which call, which note a hint cites) still counts.
    """
    return _masked_key([*row["prompt"], *row["completion"]], row["tools"])


def prompt_key(row: dict[str, Any]) -> str:
    """`row_key` of the prompt and tools alone: rows with equal prompt keys answer the same state."""
    return _masked_key(list(row["prompt"]), row["tools"])


def _masked_key(messages: list[dict[str, Any]], tools: Any) -> str:
    call_ids: dict[str, str] = {}

    def mask_call(value: Any) -> Any:
        if not value:
            return value
        return call_ids.setdefault(str(value), f"<call{len(call_ids)}>")

    masked_messages = []
    for message in messages:
        masked = dict(message)
        if masked.get("tool_calls"):
            masked["tool_calls"] = [{**call, "id": mask_call(call.get("id"))} for call in masked["tool_calls"]]
        masked["tool_call_id"] = mask_call(masked.get("tool_call_id"))
        masked_messages.append(masked)
    text = json.dumps([masked_messages, tools], sort_keys=True, ensure_ascii=False)
    ids: dict[str, str] = {}
    text = _VOLATILE_ID.sub(lambda m: ids.setdefault(m.group(0).lower(), f"<id{len(ids)}>"), text)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _deduplicated(rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], Counter[str]]:
    """The first row of each `row_key`, and how many rows had each key."""
    copies: Counter[str] = Counter()
    kept = []
    for row in rows:
        key = row_key(row)
        if key not in copies:
            kept.append(row)
        copies[key] += 1
    return kept, copies


def balance_by_position(rows: list[dict[str, Any]], reached: dict[Any, int], *, seed: int = 0,
                        kind: Callable[[dict[str, Any]], Any] | None = None,
                        copies: dict[str, int] | None = None) -> list[dict[str, Any]]:
    """Repeat each call position's rows until it has `reached[position]` of them (one per episode reaching it).

    After deduplication the opening moves, which every episode of a task shares, are one row
    while later moves keep one row per episode; a policy trained on that rarely learns to open.
    The distinct states (prompts) of a position are cycled (in a seeded order) so each appears as
    evenly as possible. Where one state has several distinct replies, `copies` (`row_key` → rows
    before deduplication) keeps their proportion: an expert that opens with a recall in 11 episodes
    and without it in 5 still teaches 11 to 5, not 1 to 1. Without `copies` each reply counts once.

    With `kind` (a row's episode kind, such as its environment and difficulty) positions are
    balanced within each kind and `reached` is keyed by ``(kind, position)``: otherwise two kinds
    whose openings dedupe to one row each would share a position's rows half and half, whatever
    their episode counts (twelve easy episodes and two hard ones teaching the opening 7 to 7).
    """
    def key(row: dict[str, Any]) -> Any:
        return (kind(row), row["position"]) if kind is not None else row["position"]

    by_position: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by_position[key(row)].append(row)
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    for position in sorted(by_position, key=lambda k: (repr(k[0]), k[1]) if kind is not None else k):
        group = by_position[position]
        target = max(len(group), reached.get(position, len(group)))
        replies: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for row in group:
            replies[prompt_key(row)].append(row)
        states = list(replies.values())
        rng.shuffle(states)
        out.extend(group)
        given = {id(row): 1 for row in group}
        weight = {id(r): copies.get(row_key(r), 1) if copies else 1 for state in states if len(state) > 1 for r in state}
        for i in range(target - len(group)):
            out.append(_most_owed(states[i % len(states)], given, weight))
    return out


def _most_owed(replies: list[dict[str, Any]], given: dict[int, int], weight: dict[int, int]) -> dict[str, Any]:
    """The reply to one state furthest below its share (`weight`) of the state's rows, now given once more."""
    if len(replies) == 1:
        row = replies[0]
    else:
        slots = sum(given[id(r)] for r in replies) + 1
        total = sum(weight[id(r)] for r in replies)
        row = max(replies, key=lambda r: weight[id(r)] * slots / total - given[id(r)])
    given[id(row)] += 1
    return row


def load_traces(sources: Iterable[Trace | str | os.PathLike[str]] | str | os.PathLike[str]) -> list[Trace]:
    """Traces from `Trace` objects, JSONL files, or folders of ``*.jsonl`` files."""
    if isinstance(sources, (str, os.PathLike)):
        sources = [sources]
    traces: list[Trace] = []
    for source in sources:
        if isinstance(source, Trace):
            traces.append(source)
            continue
        path = Path(source)
        if path.is_dir():
            files = sorted(path.rglob("*.jsonl"))
            if not files:
                raise UserError(f"{path} holds no *.jsonl trace files")
        elif path.is_file():
            files = [path]
        else:
            raise UserError(f"trace source {path} does not exist; pass a JSONL file or a folder of them")
        for file in files:
            traces.extend(read_traces(file))
    return traces


def traces_to_sft_dataset(
    traces: Iterable[Trace | str | os.PathLike[str]] | str | os.PathLike[str],
    *,
    successful_only: bool = True,
    deduplicate: bool = True,
    balance_positions: bool = False,
    eval_fraction: float = 0.1,
    seed: int = 0,
    harness: str | None = None,
):  # -> datasets.DatasetDict
    """Build ``DatasetDict({"train", "eval"})`` of prompt-completion tool-calling rows.

    `successful_only` keeps episodes whose outcome is a success; `harness` keeps only traces
    recorded with that harness. The split is by episode (all calls of an episode land in the
    same split), `eval_fraction` of the episodes (at least one when there are two or more) going
    to ``eval``. Within each split, `deduplicate` drops rows equal to an earlier one once random
    ids are masked (`row_key`), and `balance_positions` repeats each call position's rows up to
    the number of episodes that reach it, within each environment and difficulty
    (`balance_by_position`).
    """
    from datasets import Dataset, DatasetDict

    if not 0.0 <= eval_fraction < 1.0:
        raise UserError(f"eval_fraction must be in [0, 1), got {eval_fraction}")
    kept = [
        t
        for t in load_traces(traces)
        if (not successful_only or t.outcome.success is True) and (harness is None or t.harness == harness)
    ]
    rows = [row for trace in kept for row in trace_rows(trace)]
    if not rows:
        raise NoTrainingRows(
            "no training rows: no trace passed the filters (pass successful_only=False to keep failed "
            "episodes) or the traces hold no model calls"
        )
    episodes = sorted({row["episode_id"] for row in rows})
    random.Random(seed).shuffle(episodes)
    n_eval = 0
    if eval_fraction > 0 and len(episodes) >= 2:
        n_eval = min(len(episodes) - 1, max(1, round(eval_fraction * len(episodes))))
    eval_episodes = set(episodes[:n_eval])
    splits = {"train": [r for r in rows if r["episode_id"] not in eval_episodes],
              "eval": [r for r in rows if r["episode_id"] in eval_episodes]}
    kinds = {t.episode_id: (t.env or "", t.metadata.get("difficulty")) for t in kept}

    def kind(row: dict[str, Any]) -> Any:
        return kinds.get(row["episode_id"])

    for name, split in splits.items():
        reached: dict[Any, int] = defaultdict(int)
        for row in split:
            reached[(kind(row), row["position"])] += 1
        copies = None  # without deduplication every row is its own copy
        if deduplicate:
            split, copies = _deduplicated(split)
        if balance_positions:
            split = balance_by_position(split, reached, seed=seed, kind=kind, copies=copies)
        splits[name] = split
    full = Dataset.from_list(splits["train"] + splits["eval"])  # one schema for both splits
    n_train = len(splits["train"])
    return DatasetDict({"train": full.select(list(range(n_train))), "eval": full.select(list(range(n_train, len(full))))})


def export_dataset(dataset, out_dir: str | os.PathLike[str], *, fmt: str = "parquet") -> list[Path]:
    """Write each split as ``<split>.parquet`` or ``<split>.jsonl``; return the files written."""
    if fmt not in ("parquet", "jsonl"):
        raise UserError(f"format must be parquet or jsonl, not {fmt!r}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for split, ds in dataset.items():
        path = out / f"{split}.{fmt}"
        if fmt == "parquet":
            ds.to_parquet(str(path))
        else:
            ds.to_json(str(path), lines=True, force_ascii=False)
        written.append(path)
    return written
