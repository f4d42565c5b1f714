"""A run folder: what it holds, and whether a new run may write into it.

A folder holds ``traces.jsonl`` (finished episodes, one a line), ``metrics.json``, ``report.md``
and its plots, and ``experience.db`` (the run's own Experience store, unless ``--store`` names
another) with ``experience.checkpoint.db``, its copy as of the last finished episode, which
``--resume`` restores so a resumed run continues from exactly the state the finished episodes
left.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

from ...exceptions import UserError
from ...trace import Trace, read_traces

__all__ = ["FolderMode", "RUN_FILES", "make_out_folder", "prepare_folder", "finished_episodes", "episode_key", "checkpoint_store", "restore_store"]

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
    """What identifies an episode of a run: environment, policy, harness, framework, seed."""
    m = trace.metadata
    return (trace.env, m.get("policy"), trace.harness, trace.framework, m.get("seed"), m.get("difficulty"))


def finished_episodes(out: Path) -> list[Trace]:
    """The episodes a previous run in `out` finished (a torn last line is skipped)."""
    path = out / "traces.jsonl"
    return list(read_traces(path)) if path.exists() else []


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
