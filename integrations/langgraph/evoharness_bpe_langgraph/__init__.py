"""evoharness-bpe for LangChain and LangGraph.

- `BPEMiddleware`: the workspace for ``langchain.agents.create_agent``.
- `BPENode`, `bpe_tools`, `BPEGraphState`, `with_dashboard`: the same in a hand-built `StateGraph`.
- `LangGraphExperienceStore`: experience in any LangGraph `BaseStore` (memory, SQLite, Postgres).
- `TraceCallbackHandler`: runs recorded as core `Trace`s.
- `PolicyChatModel`: a core `Policy` as a chat model; `testing.ScriptedChatModel` for tests.

Names are imported on first use, so ``import evoharness_bpe_langgraph`` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .callbacks import TraceCallbackHandler
    from .channel import BPEGraphState, bpe_reducer
    from .chat_model import PolicyChatModel
    from .middleware import BPEAgentState, BPEMiddleware
    from .node import BPENode, bpe_tools, with_dashboard
    from .store import LangGraphExperienceStore

__all__ = [
    "BPEMiddleware",
    "BPEAgentState",
    "BPENode",
    "bpe_tools",
    "with_dashboard",
    "BPEGraphState",
    "bpe_reducer",
    "LangGraphExperienceStore",
    "TraceCallbackHandler",
    "PolicyChatModel",
]

_WHERE = {
    "BPEMiddleware": "middleware",
    "BPEAgentState": "middleware",
    "BPENode": "node",
    "bpe_tools": "node",
    "with_dashboard": "node",
    "BPEGraphState": "channel",
    "bpe_reducer": "channel",
    "LangGraphExperienceStore": "store",
    "TraceCallbackHandler": "callbacks",
    "PolicyChatModel": "chat_model",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)
