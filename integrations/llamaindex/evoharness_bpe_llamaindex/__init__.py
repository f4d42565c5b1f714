"""evoharness-bpe for LlamaIndex: the Belief / Progress / Experience harness on workflow agents.

- `with_bpe(agent, workspace)` / `BPEFunctionAgent`: meta-action tools, the dashboard merged into
  the system message before every model call, tool results observed, state kept in the `Context`.
- `BPEMemoryBlock`: the dashboard as a block of `llama_index.core.memory.Memory`.
- `TraceRecorder`: a run's events and model calls as a framework-neutral `Trace`.
- `PolicyLLM`: any core `Policy` as a function-calling LLM.
- `run_episode`: the ``llamaindex`` framework runner of the evaluation harness.
"""

from .agent import BPEFunctionAgent, BPEReActAgent, get_binding, merge_system, window_messages, with_bpe
from .binding import WorkspaceBinding
from .llm import PolicyLLM
from .memory import BPEMemoryBlock
from .recorder import TraceRecorder
from .tools import meta_action_tools, openai_function_tool

__version__ = "0.1.0"

__all__ = [
    "with_bpe",
    "BPEFunctionAgent",
    "BPEReActAgent",
    "get_binding",
    "WorkspaceBinding",
    "BPEMemoryBlock",
    "TraceRecorder",
    "PolicyLLM",
    "meta_action_tools",
    "openai_function_tool",
    "merge_system",
    "window_messages",
    "__version__",
]
