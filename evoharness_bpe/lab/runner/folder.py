"""A run folder: what it holds, and whether a new run may write into it.

A folder holds ``traces.jsonl`` (finished episodes, one a line), ``metrics.json``, ``report.md``
and its plots, and ``experience.db`` (the run's own Experience store, unless ``--store`` names
another) with ``experience.checkpoint.db``, its copy as of the last finished episode, which
``--resume`` restores so a resumed run continues from exactly the state the finished episodes
left.

What a folder holds is checked when it is read: a ``traces.jsonl`` line that is not an episode
of a run, or a ``--resume`` whose environments, policies, harnesses, frameworks or difficulty
differ from the folder's run, is refused in one line instead of being mixed into the figures.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from ...exceptions import UserError
from ...trace import Trace, TornTraceWarning

__all__ = ["FolderMode", "RUN_FILES", "make_out_folder", "prepare_folder", "finished_episodes", "read_run_traces",
           "episode_key", "check_resume", "checkpoint_store", "restore_store"]

FolderMode = Literal["new", "resume", "overwrite"]
STORE, CHECKPOINT = "experience.db", "experience.checkpoint.db"
RUN_FILES = ("traces.jsonl", "metrics.json", "report.md", STORE, CHECKPOINT)


def make_out_folder(out: Path, flag: str = "--out") -> None:
    """Create the output folder `out`, or raise a `UserError` naming `flag` that says why it cannot be one."""
    if out.exists() and not out.is_dir():
        raise UserError(f"{flag} {out} is a file, not a folder: choose another {flag}")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"{flag} {out} cannot be created ({exc.strerror or exc}): choose another {flag}") from exc
    if not os.access(out, os.W_OK | os.X_OK):
        raise UserError(f"{flag} {out} is not writable: choose another {flag}")


def prepare_folder(out: Path, mode: FolderMode, plots: Iterable[str] = ()) -> None:
    """Check that `out` can take a run in `mode`, and clear it for ``overwrite``.

    ``new`` refuses a folder that holds anything; ``resume`` needs nothing; ``overwrite`` removes
    the files a run writes (and nothing else).
    """
    make_out_folder(out)
    present = sorted(p.name for p in out.iterdir())
    if mode == "new" and present:
        raise UserError(
            f"--out {out} already holds a run ({', '.join(present[:4])}{', …' if len(present) > 4 else ''}): "
            "add --resume to continue it, --overwrite to replace it, or choose another --out"
        )
    if mode == "overwrite":
        for name in (*RUN_FILES, *plots):
            path = out / name
            if path.is_file():
                path.unlink()
            for suffix in ("-wal", "-shm"):
                side = out / (name + suffix)
                if side.exists():
                    side.unlink()


def episode_key(trace: Trace) -> tuple[object, ...]:
    """What identifies an episode of a run: environment, policy, harness (with its ablation),
    framework, seed."""
    from .metrics import trace_parts, variant  # noqa: PLC0415 - metrics imports nothing of this module

    m = trace.metadata
    harness = variant(trace.harness, trace_parts(trace))
    return (trace.env, m.get("policy"), harness, trace.framework, m.get("seed"), m.get("difficulty"))


def finished_episodes(out: Path) -> list[Trace]:
    """The episodes a previous run in `out` finished (a torn last line is skipped).

    Raises a `UserError` naming the line when a line is not an episode of a run.
    """
    path = out / "traces.jsonl"
    return read_run_traces(path) if path.exists() else []


# What `evoharness run` records of every episode it writes (see `episode_key`).
_RUN_FIELDS = ("episode_id", "env", "harness", "framework", "outcome", "metadata")
_RUN_METADATA = {"policy": str, "seed": int, "difficulty": int}


def _not_an_episode(record: Any) -> str | None:
    """Why the parsed line `record` is not an episode written by `evoharness run`, or None."""
    if not isinstance(record, dict):
        return f"a JSON {type(record).__name__}, not an object"
    missing = [k for k in _RUN_FIELDS if k not in record]
    if missing:
        return f"no {', '.join(repr(k) for k in missing)}"
    if not isinstance(record["env"], str):
        return "'env' is not a name"
    metadata = record["metadata"]
    if not isinstance(metadata, dict):
        return "'metadata' is not an object"
    for key, kind in _RUN_METADATA.items():
        value = metadata.get(key)
        if not isinstance(value, kind) or isinstance(value, bool):
            return f"metadata.{key} is {'missing' if value is None else 'not a ' + kind.__name__}"
    return None


def read_run_traces(path: Path) -> list[Trace]:
    """The episodes of a run's ``traces.jsonl``: a torn last line is skipped with a warning;
    any other line that is not an episode of a run is a `UserError` naming the line."""
    traces = []
    with open(path, "rb") as fh:
        for number, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            why = None
            try:
                record = json.loads(raw)
            except ValueError as exc:
                if not raw.endswith(b"\n"):  # the torn last line of a crashed writer
                    warnings.warn(f"{path}:{number}: skipped a line: torn or invalid JSON", TornTraceWarning, stacklevel=2)
                    continue
                why = f"not JSON ({exc})"
            else:
                why = _not_an_episode(record)
                if why is None:
                    try:
                        traces.append(Trace.model_validate(record))
                    except ValidationError as exc:
                        first = exc.errors()[0]
                        why = f"{'.'.join(str(p) for p in first.get('loc', ())) or 'trace'}: {first.get('msg', exc)}"
            if why is not None:
                raise UserError(f"{path} line {number} is not an episode of `evoharness run` ({why[:200]}): "
                                "remove that line, or start again with --overwrite")
    return traces


# The settings that decide which episodes a run holds, as RunConfig fields and their flags.
_RESUME_SETTINGS = {"envs": "--env", "policies": "--policy", "harnesses": "--harness", "frameworks": "--framework",
                    "difficulty": "--difficulty"}


def _folder_settings(out: Path) -> dict[str, Any] | None:
    """The settings of the run in `out` as its metrics.json records them (None without a readable one)."""
    try:
        config = json.loads((out / "metrics.json").read_text("utf-8")).get("config")
    except (OSError, ValueError, AttributeError):
        config = None
    if isinstance(config, dict) and all(k in config for k in _RESUME_SETTINGS):
        return {k: config[k] for k in _RESUME_SETTINGS}
    return None


def _show(value: Any) -> str:
    return " ".join(str(v) for v in value) if isinstance(value, list | tuple) else str(value)


def check_resume(out: Path, settings: Mapping[str, Any], done: list[Trace]) -> None:
    """Refuse ``--resume`` of `out` when it holds no run, or a run with other `settings`.

    `settings` holds the resuming run's ``envs``, ``policies``, ``harnesses``, ``frameworks`` and
    ``difficulty``. They must equal those of the folder's run (its ``metrics.json``), or, when the
    run was stopped before it wrote one, cover every finished episode.
    """
    if not out.is_dir() or not any((out / name).exists() for name in RUN_FILES):
        raise UserError(f"--out {out} holds no run: there is nothing to resume; drop --resume to start one there")
    refuse = ("differs from the run in {out} ({theirs}): resume with the folder's settings, "
              "or choose another --out (--overwrite replaces the run)")
    folder = _folder_settings(out)
    if folder is not None:
        for key, flag in _RESUME_SETTINGS.items():
            mine, theirs = settings[key], folder[key]
            if (list(mine) if isinstance(mine, list | tuple) else mine) != theirs:
                raise UserError(f"--resume: {flag} {_show(mine)} " + refuse.format(out=out, theirs=f"{flag} {_show(theirs)}"))
        return
    for trace in done:
        values = {"envs": trace.env, "policies": trace.metadata.get("policy"), "harnesses": trace.harness,
                  "frameworks": trace.framework, "difficulty": trace.metadata.get("difficulty")}
        for key, flag in _RESUME_SETTINGS.items():
            mine = settings[key]
            if values[key] not in (mine if isinstance(mine, list | tuple) else [mine]):
                raise UserError(f"--resume: {flag} {_show(mine)} " + refuse.format(
                    out=out, theirs=f"it holds an episode of {flag} {values[key]}"))


def checkpoint_store(out: Path) -> None:
    """Copy the run's SQLite store as it is now (after a finished episode) to the checkpoint."""
    source = out / STORE
    if not source.exists():
        return
    tmp = out / (CHECKPOINT + ".tmp")
    with sqlite3.connect(source) as src, sqlite3.connect(tmp) as dst:
        src.backup(dst)
    src.close()
    dst.close()
    os.replace(tmp, out / CHECKPOINT)


def restore_store(out: Path) -> None:
    """Put the store back as the last finished episode left it (drops an unfinished episode's notes)."""
    checkpoint = out / CHECKPOINT
    for suffix in ("-wal", "-shm"):
        side = out / (STORE + suffix)
        if side.exists():
            side.unlink()
    if checkpoint.exists():
        shutil.copyfile(checkpoint, out / STORE)
    elif (out / STORE).exists():
        (out / STORE).unlink()
