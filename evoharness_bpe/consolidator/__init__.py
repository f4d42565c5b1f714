"""Consolidation by a teacher model, in the background (`ModelConsolidator`)."""

from .decisions import DecisionBatch, DecisionError, apply_decisions, parse_decisions, validate_decisions
from .journal import Job, JobJournal
from .teachers import OpenAITeacher, Teacher, as_teacher
from .worker import SYSTEM_PROMPT, ModelConsolidator

__all__ = [
    "ModelConsolidator", "Teacher", "as_teacher", "OpenAITeacher", "DecisionBatch", "DecisionError",
    "parse_decisions", "validate_decisions", "apply_decisions", "Job", "JobJournal", "SYSTEM_PROMPT",
]
