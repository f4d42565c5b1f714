"""Spans of the harness under OpenInference's LangChain spans, when that instrumentation is active.

OpenInference's LangChain tracer keeps its spans by LangChain run id rather than in the
OpenTelemetry context, so the core cannot see them; this module registers a span source
(`evoharness_bpe.telemetry.add_span_source`) that asks the instrumentation for the span of the
run in progress. Nothing is imported: without the instrumentation loaded and instrumented, the
source answers None.
"""

from __future__ import annotations

import sys
from typing import Any

from evoharness_bpe import telemetry

__all__ = ["openinference_span"]


def openinference_span(root: bool) -> Any:
    """The current OpenInference LangChain span (or its run's root span with `root`), if any."""
    module = sys.modules.get("openinference.instrumentation.langchain")
    if module is None or getattr(module.LangChainInstrumentor(), "_tracer", None) is None:
        return None
    if root:
        ancestors = module.get_ancestor_spans()
        return ancestors[-1] if ancestors else None
    return module.get_current_span()


telemetry.add_span_source(openinference_span)
