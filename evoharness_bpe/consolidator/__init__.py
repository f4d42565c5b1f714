"""Consolidation by a teacher model: in the background (`ModelConsolidator`), offline over
traces (`consolidate_traces`, ``evoharness consolidate``), and in windows of an evaluation whose
bank evolves (`consolidate_window` with `RuleConsolidator` or `ModelWindowConsolidator`)."""

from .batch import BatchResult, ConsolidationFailed, consolidate_traces, trace_notes
from .decisions import DecisionBatch, DecisionError, apply_decisions, parse_decisions, validate_decisions
from .journal import Job, JobJournal
from .request import SYSTEM_PROMPT, TeacherCaller, TeacherError, build_request
from .teachers import MAX_ANSWER_CHARS, AnswerTooLarge, OpenAITeacher, Teacher, as_teacher
from .window import BankLimits, ModelWindowConsolidator, RuleConsolidator, WindowCounts, WindowNote, consolidate_window
from .worker import ModelConsolidator

__all__ = [
    "ModelConsolidator", "consolidate_traces", "BatchResult", "ConsolidationFailed", "trace_notes",
    "Teacher", "as_teacher", "OpenAITeacher", "TeacherCaller", "TeacherError", "build_request",
    "AnswerTooLarge", "MAX_ANSWER_CHARS",
    "DecisionBatch", "DecisionError", "parse_decisions", "validate_decisions", "apply_decisions",
    "Job", "JobJournal", "SYSTEM_PROMPT",
    "consolidate_window", "BankLimits", "RuleConsolidator", "ModelWindowConsolidator", "WindowCounts", "WindowNote",
]
