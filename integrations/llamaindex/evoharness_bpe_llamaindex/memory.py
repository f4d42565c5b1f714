"""`BPEMemoryBlock`: the BPE dashboard as a block of LlamaIndex's `Memory`.

For code that composes `llama_index.core.memory.Memory` itself. Give the agent the meta-action
tools too (`meta_action_tools(workspace)`), or the model can read the dashboard but not change
it. `Memory` inserts blocks as a system message of their own; an agent that also has a
``system_prompt`` then sends two system messages, which several providers reject — `with_bpe`
merges them (and injects the dashboard itself, so do not combine the two for one workspace).
"""

from __future__ import annotations

from typing import Any

from evoharness_bpe import Workspace
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.bridge.pydantic import Field
from llama_index.core.memory.memory import BaseMemoryBlock

__all__ = ["BPEMemoryBlock"]


class BPEMemoryBlock(BaseMemoryBlock[str]):
    """The workspace's dashboard, rendered fresh each time the memory is read.

    >>> from llama_index.core.memory import Memory
    >>> ws = Workspace("Plan the release", subgoals=["changelog"])
    >>> memory = Memory.from_defaults(memory_blocks=[BPEMemoryBlock(workspace=ws)])
    """

    name: str = Field(default="workspace", description="The block's name in the memory template.")
    priority: int = Field(default=0, description="0: never truncated (the dashboard has its own budget).")
    accept_short_term_memory: bool = Field(default=False, description="Flushed chat is not kept here.")
    workspace: Workspace = Field(exclude=True, description="The workspace whose dashboard is shown.")

    async def _aget(self, messages: list[ChatMessage] | None = None, **block_kwargs: Any) -> str:
        return self.workspace.dashboard()

    async def _aput(self, messages: list[ChatMessage]) -> None:
        # Belief and Progress change through the meta-actions only; flushed chat is not state.
        return None
