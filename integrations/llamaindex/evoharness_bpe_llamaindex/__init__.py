"""evoharness-bpe for LlamaIndex: the Belief / Progress / Experience harness on workflow agents.

- `with_bpe(agent, store=..., namespace=..., trace=BPETraceHandler(path))` / `BPEFunctionAgent`
  / `BPEReActAgent`: a fresh workspace per ``run()`` (kept in the run's `Context`, finished when
  the run ends, one trace per run), meta-action tools, the dashboard merged into the system
  message before every model call, tool results observed. ``with_bpe(agent, workspace)``: one
  given workspace for every run (the advanced form).
- `BPEMemoryBlock`: the dashboard as a block of `llama_index.core.memory.Memory`.
- `TraceRecorder`: a run's events and model calls as a framework-neutral `Trace`.
- `PolicyLLM`: any core `Policy` as a function-calling LLM; `testing.ScriptedLLM` for tests.
- `runner.run_episode`: the ``llamaindex`` framework runner of the evaluation harness.

Names are imported on first use, so ``import evoharness_bpe_llamaindex`` stays cheap; the first
one used imports LlamaIndex (about a second).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .agent import (
        BPEAgentHooks,
        BPEFunctionAgent,
        BPEReActAgent,
        BPERunSteps,
        get_binding,
        merge_system,
        window_messages,
        with_bpe,
    )
    from .binding import WorkspaceBinding
    from .runs import RunBinding, RunEpisode, RunInfo, default_success
    from .trace_handler import BPETraceHandler
    from .llm import PolicyLLM
    from .memory import BPEMemoryBlock
    from .recorder import TraceRecorder
    from .tools import meta_action_tools, openai_function_tool

__version__ = "0.1.0"

__all__ = [
    "with_bpe",
    "BPEFunctionAgent",
    "BPEReActAgent",
    "BPEAgentHooks",
    "BPERunSteps",
    "get_binding",
    "WorkspaceBinding",
    "RunBinding",
    "RunEpisode",
    "RunInfo",
    "default_success",
    "BPETraceHandler",
    "BPEMemoryBlock",
    "TraceRecorder",
    "PolicyLLM",
    "meta_action_tools",
    "openai_function_tool",
    "merge_system",
    "window_messages",
    "__version__",
]

_WHERE = {
    "with_bpe": "agent",
    "BPEFunctionAgent": "agent",
    "BPEReActAgent": "agent",
    "get_binding": "agent",
    "merge_system": "agent",
    "window_messages": "agent",
    "BPEAgentHooks": "agent",
    "BPERunSteps": "agent",
    "WorkspaceBinding": "binding",
    "RunBinding": "runs",
    "RunEpisode": "runs",
    "RunInfo": "runs",
    "default_success": "runs",
    "BPETraceHandler": "trace_handler",
    "BPEMemoryBlock": "memory",
    "TraceRecorder": "recorder",
    "PolicyLLM": "llm",
    "meta_action_tools": "tools",
    "openai_function_tool": "tools",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *_WHERE])
