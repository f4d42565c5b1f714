"""evoharness-bpe: a trainable Belief / Progress / Experience harness for LLM agents.

The core is framework-neutral (pydantic and the standard library only). Framework adapters
live in `evoharness_bpe_langgraph` and `evoharness_bpe_llamaindex`; training in
`evoharness_bpe_training`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

__version__ = "0.1.0"

# Each public name and the module that defines it. Modules load on first use, so `import
# evoharness_bpe` costs next to nothing and an adapter pays only for what it touches (pydantic's
# model building is most of a full load).
_EXPORTS: dict[str, str] = {
    **dict.fromkeys(("META_ACTIONS", "ToolSpec"), "actions"),
    "InjectMode": "dashboard",
    **dict.fromkeys(("EvoHarnessError", "MetaActionError", "StoreError", "UserError"), "exceptions"),
    **dict.fromkeys(("ConsolidationPolicy", "NoteOutcome"), "experience"),
    **dict.fromkeys(("ActionCost", "CostLedger", "LedgerSummary"), "ledger"),
    **dict.fromkeys(("BPEState", "Belief", "Experience", "Fact", "OpenException", "Progress", "Subgoal"), "state"),
    **dict.fromkeys(("ExperienceEntry", "ExperienceStore", "MemoryExperienceStore", "PostgresExperienceStore",
                     "ScoredEntry", "SQLiteExperienceStore"), "stores"),
    **dict.fromkeys(("DashboardSnapshot", "MetaActionEvent", "ModelCall", "Outcome", "Trace", "TraceWriter",
                     "read_traces"), "trace"),
    "EpisodeRecorder": "recorder",
    **dict.fromkeys(("ActionResult", "EpisodeSummary", "Workspace", "WorkspaceOptions"), "workspace"),
    "ModelConsolidator": "consolidator",
}

if TYPE_CHECKING:
    from .actions import META_ACTIONS, ToolSpec
    from .consolidator import ModelConsolidator
    from .dashboard import InjectMode
    from .exceptions import EvoHarnessError, MetaActionError, StoreError, UserError
    from .experience import ConsolidationPolicy, NoteOutcome
    from .ledger import ActionCost, CostLedger, LedgerSummary
    from .recorder import EpisodeRecorder
    from .state import BPEState, Belief, Experience, Fact, OpenException, Progress, Subgoal
    from .stores import (
        ExperienceEntry,
        ExperienceStore,
        MemoryExperienceStore,
        PostgresExperienceStore,
        ScoredEntry,
        SQLiteExperienceStore,
    )
    from .trace import DashboardSnapshot, MetaActionEvent, ModelCall, Outcome, Trace, TraceWriter, read_traces
    from .workspace import ActionResult, EpisodeSummary, Workspace, WorkspaceOptions


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'evoharness_bpe' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


__all__ = [*_EXPORTS, "__version__"]
