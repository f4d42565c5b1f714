"""Experience written through LlamaIndex lands in the shared store, readable by any framework.

The LangGraph middleware reads experience through a core `Workspace` on the configured
`ExperienceStore` and namespace; a fresh core workspace on the same SQLite file is that path.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from evoharness_bpe import SQLiteExperienceStore, Workspace
from evoharness_bpe_llamaindex import with_bpe
from evoharness_bpe_llamaindex.testing import ScriptedLLM
from llama_index.core.agent.workflow import FunctionAgent

NAMESPACE = ("acme", "crm-agent")
LESSON = "The CRM API answers 429 above 5 requests per second: wait for retry-after"


def test_note_from_llamaindex_is_recalled_by_a_fresh_workspace_on_the_same_store(tmp_path: Path) -> None:
    db = tmp_path / "experience.db"
    store = SQLiteExperienceStore(db)
    try:
        llm = ScriptedLLM([[("note", {"text": LESSON, "kind": "pitfall", "tags": ["crm", "rate-limit"]})], "noted"])
        ws = Workspace("Upload customer batches", store=store, namespace=NAMESPACE)
        agent = with_bpe(FunctionAgent(tools=[], llm=llm), ws)

        async def go() -> None:
            await agent.run(user_msg="upload the batches")

        asyncio.run(go())
        assert ws.events[0].ok and ws.state.experience.noted
    finally:
        store.close()

    other = SQLiteExperienceStore(db)  # another process, another framework
    try:
        reader = Workspace("Upload the invoices to the CRM", store=other, namespace=NAMESPACE)
        found = reader.act("recall", {"query": "CRM rate limit 429"})
        assert found.ok and "retry-after" in found.content
        assert "retry-after" in reader.dashboard()  # shown as a hint without asking
        stranger = Workspace("Upload the invoices to the CRM", store=other, namespace=("other", "agent"))
        assert "retry-after" not in stranger.act("recall", {"query": "CRM rate limit 429"}).content
    finally:
        other.close()
