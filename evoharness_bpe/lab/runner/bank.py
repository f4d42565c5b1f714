"""How a run treats its Experience store (``evoharness run --bank``): live, episode, frozen or evolving.

* ``live`` — episodes read and write the store as they run (notes are consolidated at note
  time, recalled entries credited at the end of each episode).
* ``episode`` — each episode plays on an empty store of its own: what it notes it recalls, and
  nothing outlives it (how `evoharness reproduce` records and evaluates episodes, so a trained
  adapter plays as it was trained).
* ``frozen`` — episodes read the store and write nothing (a `FrozenView`): every episode sees
  the same bank, and its fingerprint holds the bank's content hash.
* ``evolving`` — each combination (environment, policy, harness, framework) evolves its own
  private copy of the seed bank (the store's namespace as it was when the run started; the store
  itself is never written). Episodes run in windows of ``consolidate_every``; the bank is frozen
  inside a window, and when the window ends one consolidation pass books the window's credit and
  turns its notes into edits validated by `evoharness_bpe.consolidator.window` (ids must exist,
  a cap per kind, a delete veto for entries recalled often). The edit counts of every window go
  to ``metrics.json`` and the report; the evolved banks to ``evolved-bank.jsonl``. An evolving
  run depends on its whole history, so it is never resumed: it starts again from its seed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from ...consolidator.batch import trace_notes
from ...consolidator.window import BankLimits, WindowConsolidator, WindowNote, consolidate_window
from ...stores.base import ExperienceStore, Namespace
from ...stores.frozen import FrozenView, content_hash
from ...stores.memory import MemoryExperienceStore
from ...trace import Trace

__all__ = ["BankMode", "BANK_MODES", "EVOLVED_BANK", "RunBank"]

BankMode = Literal["live", "episode", "frozen", "evolving"]
BANK_MODES = ("live", "episode", "frozen", "evolving")
EVOLVED_BANK = "evolved-bank.jsonl"
"""The run folder's file of evolved banks: one entry a line, with its combination."""

Combo = tuple[str, str, str, str]


class _Evolving:
    """One combination's private bank, the open window's view, and its evidence."""

    def __init__(self, seed: ExperienceStore, namespace: Namespace) -> None:
        self.namespace = namespace
        self.store = MemoryExperienceStore()
        for entry in seed.list(namespace, limit=max(1, seed.count(namespace)))[::-1]:  # oldest first: ties rank alike
            self.store.add(namespace, entry)
        self.view = FrozenView(self.store)
        self.notes: list[WindowNote] = []
        self.episodes = 0
        self.window = 0


class RunBank:
    """The Experience store each episode of a run plays on, and the evolving mode's windows."""

    def __init__(self, mode: BankMode, store: ExperienceStore, *, consolidate_every: int = 5,
                 consolidator: WindowConsolidator | None = None, limits: BankLimits = BankLimits()) -> None:
        self.mode, self.store = mode, store
        self.consolidate_every, self.consolidator, self.limits = consolidate_every, consolidator, limits
        self.frozen = FrozenView(store)
        self.windows: list[dict[str, Any]] = []
        """Per window of an evolving run: its combination and `WindowCounts`."""
        self._hashes: dict[Namespace, str] = {}
        self._evolving: dict[Combo, _Evolving] = {}

    def episode_store(self, combo: Combo, namespace: Namespace) -> ExperienceStore:
        """The store the next episode of `combo` plays on."""
        if self.mode == "live":
            return self.store
        if self.mode == "episode":
            return MemoryExperienceStore()
        if self.mode == "frozen":
            return self.frozen
        return self._bank(combo, namespace).view

    def bank_hash(self, combo: Combo, namespace: Namespace) -> str | None:
        """The content hash of the bank the next episode of `combo` sees when it cannot change
        during the run (``frozen``); None otherwise."""
        if self.mode != "frozen":
            return None
        if namespace not in self._hashes:
            self._hashes[namespace] = content_hash(self.store, namespace)
        return self._hashes[namespace]

    def _bank(self, combo: Combo, namespace: Namespace) -> _Evolving:
        if combo not in self._evolving:
            self._evolving[combo] = _Evolving(self.store, namespace)
        return self._evolving[combo]

    def episode_done(self, combo: Combo, namespace: Namespace, trace: Trace | None, *, last: bool) -> dict[str, Any] | None:
        """Gather a finished episode's evidence (`trace` None: it did not finish); at the end of a
        window (or when `last`), run the consolidation pass. Returns the window's record, if one ran."""
        if self.mode != "evolving":
            return None
        bank = self._bank(combo, namespace)
        bank.episodes += 1
        if trace is not None:
            bank.notes.extend(WindowNote.from_arguments(args) for args in trace_notes(trace))
        if bank.episodes < self.consolidate_every and not last:
            return None
        counts = consolidate_window(bank.store, namespace, bank.notes, credits=bank.view.take_credits(namespace),
                                    consolidator=self.consolidator, limits=self.limits, window=bank.window,
                                    episodes=bank.episodes)
        bank.notes, bank.episodes = [], 0
        bank.window += 1
        env, policy, harness, framework = combo
        record = {"env": env, "policy": policy, "harness": harness, "framework": framework, **counts.as_dict()}
        self.windows.append(record)
        return record

    def close(self) -> None:
        """Stop the consolidator (a model consolidator's pending request is abandoned)."""
        close = getattr(self.consolidator, "close", None)
        if close is not None:
            close()

    def write(self, out: Path) -> None:
        """Write the evolved banks to ``out/evolved-bank.jsonl`` (nothing unless evolving)."""
        if self.mode != "evolving":
            return
        with open(out / EVOLVED_BANK, "w", encoding="utf-8") as f:
            for (env, policy, harness, framework), bank in self._evolving.items():
                ns = bank.namespace
                for entry in bank.store.list(ns, limit=max(1, bank.store.count(ns))):
                    row = {"env": env, "policy": policy, "harness": harness, "framework": framework,
                           "namespace": list(ns), "entry": entry.model_dump(mode="json")}
                    f.write(json.dumps(row, ensure_ascii=False) + "\n")
