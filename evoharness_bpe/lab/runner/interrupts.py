"""SIGINT and SIGTERM during a run: stop between writes, never in the middle of one.

Inside `Interrupts`, either signal raises `RunInterrupted` at once, unless a `critical()` block
(writing a finished episode and checkpointing the store) is running; then it is raised when that
block ends, so what was reported finished is on disk.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any

__all__ = ["Interrupts", "RunInterrupted"]


class RunInterrupted(BaseException):  # noqa: N818 - it is an event, not an error
    """The run received SIGINT or SIGTERM; `exit_code` is 130 or 143.

    A `BaseException`, as `KeyboardInterrupt` is: the catch-alls that keep a model's run going
    past a failing store or framework (``except Exception``) must not swallow it.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.exit_code = 128 + signum


class Interrupts:
    """Turns SIGINT/SIGTERM into `RunInterrupted` for the duration of a ``with`` block."""

    def __init__(self) -> None:
        self._pending: int | None = None
        self._depth = 0
        self._previous: dict[int, Any] = {}

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        if self._depth:
            self._pending = signum
            return
        raise RunInterrupted(signum)

    def __enter__(self) -> Interrupts:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    @contextlib.contextmanager
    def critical(self) -> Iterator[None]:
        """A block a signal must not cut; a signal received inside is raised after it."""
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
            if not self._depth and self._pending is not None:
                signum, self._pending = self._pending, None
                raise RunInterrupted(signum)
