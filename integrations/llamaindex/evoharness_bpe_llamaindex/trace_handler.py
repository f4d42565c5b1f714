"""`BPETraceHandler`: one trace per finished agent run, appended to a JSONL file.

>>> agent = with_bpe(FunctionAgent(...), store=store, trace=BPETraceHandler("traces.jsonl"))  # doctest: +SKIP

Each run of the wrapped agent ends with one `Trace` — the conversation, every model call as
sent (system message, dashboard and window included), the meta-actions with their costs, the
dashboards, the ledger and the outcome — written with `TraceWriter` (locked, fsynced, one line
per episode) in a worker thread, so the event loop does not wait on the disk.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections import deque
from typing import Any

from evoharness_bpe import Trace, TraceWriter

__all__ = ["BPETraceHandler"]


class BPETraceHandler:
    """Receives the trace of every finished run: writes it to `path` (if given), keeps the last.

    Args:
        path: JSONL file to append to; None keeps traces in memory only.
        keep: how many recent traces `traces` holds.
        env: environment name stamped on every trace (``Trace.env``), if any.
        metadata: extra metadata merged into every trace.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        keep: int = 100,
        env: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        self.path = path
        self.env = env
        self.metadata = dict(metadata or {})
        self.traces: deque[Trace] = deque(maxlen=keep)
        self._writer: TraceWriter | None = None
        self._lock = threading.Lock()

    def handle(self, trace: Trace) -> None:
        """Stamp, keep and write one run's trace."""
        if self.env is not None:
            trace.env = self.env
        if self.metadata:
            trace.metadata = {**self.metadata, **trace.metadata}
        with self._lock:
            self.traces.append(trace)
            if self.path is not None and self._writer is None:
                self._writer = TraceWriter(self.path)
            writer = self._writer
        if writer is not None:
            writer.write(trace)

    async def ahandle(self, trace: Trace) -> None:
        """`handle` in a worker thread (the file write is fsynced)."""
        await asyncio.to_thread(self.handle, trace)

    @property
    def last(self) -> Trace | None:
        """The most recent trace, if any."""
        return self.traces[-1] if self.traces else None

    def close(self) -> None:
        """Close the file (a later trace reopens it)."""
        with self._lock:
            if self._writer is not None:
                self._writer.close()
                self._writer = None
