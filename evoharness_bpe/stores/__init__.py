"""Experience stores: the contract and the built-in backends."""

from .base import (
    ExperienceEntry,
    ExperienceKind,
    ExperienceStore,
    Namespace,
    ScoredEntry,
    namespace_key,
    validate_namespace,
)
from .memory import MemoryExperienceStore
from .postgres import PostgresExperienceStore
from .sqlite import SQLiteExperienceStore

__all__ = [
    "ExperienceEntry",
    "ExperienceKind",
    "ExperienceStore",
    "Namespace",
    "ScoredEntry",
    "namespace_key",
    "validate_namespace",
    "MemoryExperienceStore",
    "SQLiteExperienceStore",
    "PostgresExperienceStore",
]
