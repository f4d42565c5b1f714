"""Running episodes: the core loop, metrics, reports and the evaluation suite."""

from .core import run_episode

__all__ = ["run_episode"]
