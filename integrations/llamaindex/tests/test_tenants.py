"""Tenant isolation through LlamaIndex state (issue family: tenant bypass through framework state).

The namespace of a run comes from `with_bpe`'s configuration for that run — here a function of
the keyword the run was started with — never from the BPE state a `Context` carries.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from evoharness_bpe import BPEState, ExperienceEntry, SQLiteExperienceStore
from evoharness_bpe.exceptions import UserError
from evoharness_bpe_llamaindex import BPETraceHandler, with_bpe
from evoharness_bpe_llamaindex.testing import TaskScriptedLLM
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.workflow import Context

ALICE = ("users", "alice")
BOB = ("users", "bob")
SCRIPTS = {"invoice": [[("recall", {"query": "invoice vendor secret"})], "Done."]}


@pytest.fixture
def setup(tmp_path: Any) -> tuple[Any, ...]:
    store = SQLiteExperienceStore(tmp_path / "exp.db")
    secret = store.add(ALICE, ExperienceEntry(text="Alice's invoice vendor secret: pay ACME account 4711"))
    llm = TaskScriptedLLM(SCRIPTS)
    policy = llm.policy
    traces = BPETraceHandler()
    agent = with_bpe(
        FunctionAgent(tools=[], llm=llm, streaming=False),
        store=store,
        namespace=lambda run: ("users", run.get("user")),
        trace=traces,
    )
    return store, secret, policy, traces, agent


def _recall_results(policy: Any) -> list[str]:
    return [m["content"] for p in policy.calls for m in p if m["role"] == "tool"]


def test_each_tenant_recalls_only_its_own_lessons(setup: tuple[Any, ...]) -> None:
    store, secret, policy, traces, agent = setup

    async def main() -> None:
        await agent.run(user_msg="Pay the invoice", user="alice")
        await agent.run(user_msg="Pay the invoice", user="bob")

    asyncio.run(main())
    alice, bob = _recall_results(policy)
    assert "4711" in alice and "4711" not in bob
    assert [t.metadata["namespace"] for t in traces.traces] == [list(ALICE), list(BOB)]


def test_a_restored_context_of_another_tenant_is_refused(setup: tuple[Any, ...]) -> None:
    store, secret, policy, traces, agent = setup

    async def main() -> None:
        handler = agent.run(user_msg="Pay the invoice", user="alice")
        await handler
        alice_ctx = json.loads(json.dumps(handler.ctx.to_dict()))
        # Bob resumes Alice's saved context under his own identity.
        await agent.run(user_msg="Pay the invoice", user="bob", ctx=Context.from_dict(agent, alice_ctx))

    with pytest.raises(UserError, match="belongs to namespace"):
        asyncio.run(main())
    assert len(_recall_results(policy)) == 1  # only Alice's own recall ran
    assert store.get(ALICE, secret.id).uses == 1
    assert store.count(BOB) == 0


def test_a_forged_state_naming_another_tenant_is_refused(setup: tuple[Any, ...]) -> None:
    store, secret, policy, traces, agent = setup
    forged = BPEState.model_validate(
        {"progress": {"goal": "Pay the invoice"}, "experience": {"namespace": list(ALICE), "recalled": [secret.id]}}
    )

    async def main() -> None:
        ctx = Context(agent)
        await ctx.store.set("bpe_state", forged.model_dump_json())
        await agent.run(user_msg="Pay the invoice", user="bob", ctx=ctx)

    with pytest.raises(UserError, match="belongs to namespace"):
        asyncio.run(main())
    assert policy.calls == []  # refused before any model call
    untouched = store.get(ALICE, secret.id)
    assert untouched.uses == 0 and untouched.wins == 0 and untouched.losses == 0


def test_a_state_swapped_mid_run_is_refused(setup: tuple[Any, ...]) -> None:
    """State written into the context during a run is re-checked at the next step."""
    store, secret, policy, traces, agent = setup
    forged = BPEState.model_validate({"progress": {"goal": "x"}, "experience": {"namespace": list(ALICE)}})

    async def main() -> None:
        handler = agent.run(user_msg="Pay the invoice", user="bob")
        async for event in handler.stream_events():
            if type(event).__name__ == "AgentOutput":
                await handler.ctx.store.set("bpe_state", forged.model_dump_json())
                break
        await handler

    with pytest.raises(UserError, match="belongs to namespace"):
        asyncio.run(main())
    assert all("4711" not in text for text in _recall_results(policy))
    assert store.get(ALICE, secret.id).uses == 0
