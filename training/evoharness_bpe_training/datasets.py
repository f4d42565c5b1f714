"""Traces → a Hugging Face `DatasetDict` in TRL's conversational tool-calling format.

One row per model call: ``prompt`` is exactly what the model received (the system message with
that step's dashboard, then the recent window), ``completion`` is the one assistant message it
answered with (tool calls carry JSON-string arguments), ``tools`` is the OpenAI tool list as a
JSON string (TRL's SFT trainer decodes it). Prompt-completion rows make TRL put the loss on the
assistant's tokens only. Traces from any framework mix freely: they share the core `Trace` format.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from evoharness_bpe import Trace, read_traces
from evoharness_bpe.exceptions import UserError

__all__ = ["SFT_COLUMNS", "normalize_message", "trace_rows", "traces_to_sft_dataset", "load_traces", "export_dataset"]

SFT_COLUMNS: tuple[str, ...] = ("prompt", "completion", "tools", "episode_id", "framework", "env")


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
    for prompt, response in _calls_of(trace):
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
            }
        )
    return rows


def _row_key(row: dict[str, Any]) -> str:
    text = json.dumps([row["prompt"], row["completion"], row["tools"]], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


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
    eval_fraction: float = 0.1,
    seed: int = 0,
    harness: str | None = None,
):  # -> datasets.DatasetDict
    """Build ``DatasetDict({"train", "eval"})`` of prompt-completion tool-calling rows.

    `successful_only` keeps episodes whose outcome is a success; `deduplicate` drops rows with
    the same prompt, completion and tools; the split is by episode (all calls of an episode land
    in the same split), `eval_fraction` of the episodes (at least one when there are two or
    more) going to ``eval``. `harness` keeps only traces recorded with that harness.
    """
    from datasets import Dataset, DatasetDict

    if not 0.0 <= eval_fraction < 1.0:
        raise UserError(f"eval_fraction must be in [0, 1), got {eval_fraction}")
    kept = [
        t
        for t in load_traces(traces)
        if (not successful_only or t.outcome.success is True) and (harness is None or t.harness == harness)
    ]
    rows: list[dict[str, Any]] = []
    seen: set[str] = set()
    for trace in kept:
        for row in trace_rows(trace):
            if deduplicate:
                key = _row_key(row)
                if key in seen:
                    continue
                seen.add(key)
            rows.append(row)
    if not rows:
        raise UserError(
            "no training rows: no trace passed the filters (pass successful_only=False to keep failed "
            "episodes) or the traces hold no model calls"
        )
    episodes = sorted({row["episode_id"] for row in rows})
    random.Random(seed).shuffle(episodes)
    n_eval = 0
    if eval_fraction > 0 and len(episodes) >= 2:
        n_eval = min(len(episodes) - 1, max(1, round(eval_fraction * len(episodes))))
    eval_episodes = set(episodes[:n_eval])
    full = Dataset.from_list(rows)
    train_idx = [i for i, row in enumerate(rows) if row["episode_id"] not in eval_episodes]
    eval_idx = [i for i, row in enumerate(rows) if row["episode_id"] in eval_episodes]
    return DatasetDict({"train": full.select(train_idx), "eval": full.select(eval_idx)})


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
