"""BPEMemoryBlock: the dashboard inside llama_index.core.memory.Memory."""

from __future__ import annotations

import asyncio

from evoharness_bpe import Workspace
from evoharness_bpe_llamaindex import BPEMemoryBlock, meta_action_tools
from evoharness_bpe_llamaindex.testing import ScriptedLLM
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.llms import ChatMessage
from llama_index.core.memory import Memory


def test_block_renders_the_current_dashboard() -> None:
    ws = Workspace("Ship the release", subgoals=["changelog"])
    memory = Memory.from_defaults(memory_blocks=[BPEMemoryBlock(workspace=ws)])

    async def go() -> list[ChatMessage]:
        await memory.aput(ChatMessage(role="user", content="hi"))
        ws.act("track", {"key": "version", "value": "1.4.0"})
        return await memory.aget()

    messages = asyncio.run(go())
    assert messages[0].role.value == "system"
    assert "<workspace>" in (messages[0].content or "") and "version" in (messages[0].content or "")
    assert len(ws.snapshots) == 1


def test_block_with_meta_action_tools_and_no_system_prompt_gives_one_system_message() -> None:
    ws = Workspace("Ship the release", subgoals=["changelog"])
    llm = ScriptedLLM([[("commit", {"subgoal": "changelog", "status": "done"})], "shipped"])
    agent = FunctionAgent(tools=meta_action_tools(ws), llm=llm)
    memory = Memory.from_defaults(memory_blocks=[BPEMemoryBlock(workspace=ws)])

    async def go() -> None:
        await agent.run(user_msg="ship it", memory=memory)

    asyncio.run(go())
    second = [m for m in llm.calls[1] if m.role.value == "system"]
    assert len(second) == 1 and "1 done" in (second[0].content or "")
    assert ws.state.progress.subgoals["changelog"].status == "done"
