"""A run folder of stages that can be left and come back to.

Every stage writes what it made (a model, traces, metrics) and then a marker,
``stages/<name>.json``, holding its results and wall time; a stage with a marker is finished. A
resumed run (`StageFolder.open(..., resume=True)`) keeps the folder's config, refuses one that
differs, and starts at the first stage without a marker; a new run can adopt another run's
finished stages (`StageFolder.adopt`) that its own settings leave alone. A long stage can save
what it has done so far in its scratch folder (`StageFolder.scratch`), which outlives a stop and
goes when the stage finishes. `Progress` prints a line per step of a
long stage, with the elapsed time and an estimate of what is left.
"""

from __future__ import annotations

import ctypes
import gc
import json
import os
import shutil
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from evoharness_bpe.exceptions import UserError

__all__ = ["StageFolder", "Progress", "config_differences", "load_average", "release_memory", "write_whole", "SCRATCH"]

SCRATCH = "unfinished"
"""The folder, in a run, of the stages' scratch folders (`StageFolder.scratch`)."""


def write_whole(path: Path, text: str) -> None:
    """Write `text` to `path` whole or not at all: a stop mid-write leaves the old file, or none."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text, "utf-8")
    os.replace(tmp, path)


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()


def config_differences(saved: Mapping[str, Any], wanted: Mapping[str, Any], *, ignore: tuple[str, ...] = ()) -> list[str]:
    """``field: saved → wanted`` for every field whose value differs (`ignore` left out)."""
    keys = sorted((set(saved) | set(wanted)) - set(ignore))
    return [f"{k}: {saved.get(k)!r} → {wanted.get(k)!r}" for k in keys if saved.get(k) != wanted.get(k)]


class StageFolder:
    """The folder of one run: its config, and a marker per finished stage."""

    def __init__(self, root: Path, config: dict[str, Any], outputs: Mapping[str, tuple[str, ...]] | None = None) -> None:
        self.root = root
        self.config = config
        # stage → the files and folders it writes (relative to `root`): an unfinished stage's are removed before it runs
        self.outputs = dict(outputs or {})
        self.wall: dict[str, float] = {}

    @classmethod
    def open(cls, root: str | os.PathLike[str], config: dict[str, Any], *, resume: bool = False,
             ignore: tuple[str, ...] = ("out",), defaults: Mapping[str, Any] | None = None,
             outputs: Mapping[str, tuple[str, ...]] | None = None) -> "StageFolder":
        """A new run in `root` (its config written), or with `resume` the run already there.

        A resumed run must have been made with the same config (fields in `ignore` aside); a field
        its saved config lacks (a setting added since) counts as its value in `defaults`. `outputs`
        names what each stage writes, so that a stage run again starts without an interrupted try's leftovers.
        """
        root = Path(root)
        path = root / "config.json"
        if resume:
            if not path.exists():
                raise UserError(f"--resume {root}: no run there (no config.json); start one without --resume")
            try:
                saved = json.loads(path.read_text("utf-8"))
            except ValueError as exc:
                raise UserError(f"--resume {root}: config.json is not valid JSON ({exc})") from None
            differences = config_differences({**(defaults or {}), **saved}, config, ignore=ignore)
            if differences:
                raise UserError(f"--resume {root}: the run was made with another config ({'; '.join(differences)}); "
                                "resume without those flags, or start a new run in another folder")
        else:
            root.mkdir(parents=True, exist_ok=True)
            if (root / "stages").exists() and any((root / "stages").glob("*.json")):
                raise UserError(f"{root} already holds a run; continue it with --resume {root}, or pick another --out")
            path.write_text(json.dumps(config, indent=2), "utf-8")
        folder = cls(root, config, outputs)
        (root / "stages").mkdir(exist_ok=True)
        return folder

    def adopt(self, source: str | os.PathLike[str], outputs: Mapping[str, tuple[str, ...]]) -> list[str]:
        """Copy the finished stages of the run in `source` named in `outputs` (stage → the files and
        folders it wrote, relative to the run) with their markers; returns the stages copied.

        A stage unfinished in `source` is skipped (it runs here). Each copied marker names its source.
        """
        source = Path(source)
        copied = []
        for stage, paths in outputs.items():
            marker = source / "stages" / f"{stage}.json"
            if not marker.exists():
                continue
            for relative in paths:
                origin, target = source / relative, self.root / relative
                if origin.is_dir():
                    shutil.copytree(origin, target, dirs_exist_ok=True)
                elif origin.exists():
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(origin, target)
            record = json.loads(marker.read_text("utf-8"))
            record["copied_from"] = str(source)
            self.marker(stage).write_text(json.dumps(record, indent=2, default=float), "utf-8")
            copied.append(stage)
        return copied

    def _clear(self, stage: str) -> None:
        for relative in self.outputs.get(stage, ()):
            _remove(self.root / relative)

    def marker(self, stage: str) -> Path:
        return self.root / "stages" / f"{stage}.json"

    def scratch(self, stage: str) -> Path:
        """Where `stage` saves what it has done so far (``unfinished/<stage>/``), for a try after a
        stop to pick up: kept when the stage is interrupted, removed when it finishes, and removed
        when any other stage runs (an earlier stage run again makes it stale; a later one runs only
        once this stage has finished). Not created here; never copied by `adopt`."""
        return self.root / SCRATCH / stage

    def _clear_scratch(self, keep: str | None = None) -> None:
        folder = self.root / SCRATCH
        if folder.is_dir():
            for path in folder.iterdir():
                if path.name != keep:
                    _remove(path)
            if not any(folder.iterdir()):
                folder.rmdir()

    def done(self, stage: str) -> bool:
        """True when `stage` finished (its marker exists)."""
        return self.marker(stage).exists()

    def finished(self) -> list[str]:
        """The finished stages, in the order they finished."""
        markers = [(json.loads(p.read_text("utf-8")).get("finished_at", 0), p.stem) for p in (self.root / "stages").glob("*.json")]
        return [name for _, name in sorted(markers)]

    def result(self, stage: str) -> Any:
        """What a finished `stage` returned."""
        return json.loads(self.marker(stage).read_text("utf-8"))["result"]

    def run(self, stage: str, work: Callable[[], Any], log: Callable[[str], None]) -> Any:
        """`work()`'s result, computed now, or read back when `stage` already finished."""
        if self.done(stage):
            record = json.loads(self.marker(stage).read_text("utf-8"))
            self.wall[stage] = float(record.get("wall_s", 0.0))
            log(f"{stage}: finished earlier ({record.get('wall_s', 0):.0f} s), kept")
            return record["result"]
        self._clear(stage)  # what an interrupted try left (a log appended to, traces half written)
        self._clear_scratch(keep=stage)  # another stage's saves were made from outputs this run no longer holds
        started = time.perf_counter()
        result = work()
        release_memory()  # a trainer and its rollouts must not stay beside the next stage's evaluation
        wall = round(time.perf_counter() - started, 1)
        self.wall[stage] = wall
        record = {"stage": stage, "wall_s": wall, "finished_at": time.time(), "load": load_average(), "result": result}
        write_whole(self.marker(stage), json.dumps(record, indent=2, default=float))
        self._clear_scratch()
        return result


def release_memory() -> None:
    """Free what a finished stage left behind and hand it back to the system.

    A trainer, its optimizer state and its reward's rollout policy hold one another in reference
    cycles, which Python's collector may not reach for a long time; and glibc keeps freed heap
    for the process unless asked (``malloc_trim``). Without this a GRPO stage's memory (13–21 GB
    resident on the CPU preset) stays beside the evaluation that follows it.
    """
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: the freed memory is reused in-process all the same
        pass


def load_average() -> list[float] | None:
    """The machine's load averages (1, 5, 15 minutes), or None where the system has none."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


class Progress:
    """A line per step of a stage: ``[stage] 12/75 episodes · 3m10s · about 16m left``.

    Lines are printed at most every `every` seconds (and always for the last step). A stage
    resumed at step `start` counts from there, and estimates what is left from its own pace.
    """

    def __init__(self, stage: str, total: int, unit: str, log: Callable[[str], None], *, every: float = 20.0, start: int = 0) -> None:
        self.stage, self.total, self.unit, self.log, self.every = stage, max(1, total), unit, log, every
        self.started = time.perf_counter()
        self.count = self.start = min(max(0, start), self.total)
        self._last = 0.0

    def advance(self, n: int = 1, note: str = "") -> None:
        self.count = min(self.total, self.count + n)
        now = time.perf_counter()
        if self.count < self.total and now - self._last < self.every:
            return
        self._last = now
        elapsed = now - self.started
        done_here = self.count - self.start
        left = elapsed / done_here * (self.total - self.count) if done_here else 0.0
        suffix = f" · {note}" if note else ""
        self.log(f"[{self.stage}] {self.count}/{self.total} {self.unit} · {_clock(elapsed)} · about {_clock(left)} left{suffix}")


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"
