"""evoharness-bpe: a trainable Belief / Progress / Experience harness for LLM agents.

The core is framework-neutral (pydantic and the standard library only). Framework adapters
live in `evoharness_bpe_langgraph` and `evoharness_bpe_llamaindex`; training in
`evoharness_bpe_training`.
"""

from .actions import META_ACTIONS, ToolSpec
from .dashboard import InjectMode
from .exceptions import EvoHarnessError, MetaActionError, StoreError, UserError
from .experience import ConsolidationPolicy, NoteOutcome
from .ledger import ActionCost, CostLedger, LedgerSummary
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
from .recorder import EpisodeRecorder
from .workspace import ActionResult, EpisodeSummary, Workspace, WorkspaceOptions

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    # The model consolidator loads on first use, so `import evoharness_bpe` stays small.
    if name == "ModelConsolidator":
        from .consolidator import ModelConsolidator

        return ModelConsolidator
    raise AttributeError(f"module 'evoharness_bpe' has no attribute {name!r}")

__all__ = [
    "Workspace",
    "WorkspaceOptions",
    "EpisodeRecorder",
    "ActionResult",
    "EpisodeSummary",
    "BPEState",
    "Belief",
    "Fact",
    "Progress",
    "Subgoal",
    "OpenException",
    "Experience",
    "ExperienceEntry",
    "ExperienceStore",
    "MemoryExperienceStore",
    "SQLiteExperienceStore",
    "PostgresExperienceStore",
    "ScoredEntry",
    "ConsolidationPolicy",
    "ModelConsolidator",
    "NoteOutcome",
    "ToolSpec",
    "META_ACTIONS",
    "InjectMode",
    "ActionCost",
    "CostLedger",
    "LedgerSummary",
    "Trace",
    "TraceWriter",
    "read_traces",
    "MetaActionEvent",
    "DashboardSnapshot",
    "Outcome",
    "ModelCall",
    "EvoHarnessError",
    "UserError",
    "MetaActionError",
    "StoreError",
    "__version__",
]
