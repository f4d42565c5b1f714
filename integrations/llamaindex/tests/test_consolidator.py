"""`with_bpe(..., consolidator=...)`: each run of a real `FunctionAgent` hands its notes to a teacher in the background."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import pytest
from evoharness_bpe import BPEState, ExperienceEntry, MemoryExperienceStore, ModelConsolidator
from evoharness_bpe.consolidator.testing import ScriptedTeacher as Teacher
from evoharness_bpe.exceptions import UserError
from evoharness_bpe_llamaindex import with_bpe
from evoharness_bpe_llamaindex.testing import ScriptedLLM
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.workflow import Context

NS = ("acme", "crm")


def _agent(store: Any, consolidator: Any, notes: list[str], **options: Any) -> FunctionAgent:
    llm = ScriptedLLM([*([("note", {"text": t})] for t in notes), "Done."])
    return with_bpe(FunctionAgent(tools=[], llm=llm), store=store, namespace=NS, consolidator=consolidator, **options)


def _run(agent: FunctionAgent, message: str) -> str:
    async def run() -> str:  # a workflow run needs a running event loop
        return str(await agent.run(user_msg=message))

    return asyncio.run(run())


def _procedures(store: Any) -> list[str]:
    return sorted(e.text for e in store.list(NS, limit=100) if e.kind == "procedure")


def test_each_run_hands_its_notes_over_once_when_it_ends() -> None:
    store, teacher = MemoryExperienceStore(), Teacher()

    async def main(consolidator: ModelConsolidator) -> None:
        agent = _agent(store, consolidator, ["Phone numbers need a country code"])
        ctx = Context(agent)
        assert str(await agent.run(user_msg="Migrate the contacts", ctx=ctx)).endswith("Done.")
        state = BPEState.model_validate_json(await ctx.store.get("bpe_state"))
        assert state.experience.noted == []                     # handed over: cleared for the next run
        assert await consolidator.aflush(timeout=30)
        await agent.run(user_msg="Once more, nothing new", ctx=ctx)   # continues the context; the script is played out
        assert await consolidator.aflush(timeout=30)

    with ModelConsolidator(teacher, store) as consolidator:
        asyncio.run(main(consolidator))
    assert teacher.requests == [["Phone numbers need a country code"]]
    assert _procedures(store) == ["Procedure: Phone numbers need a country code"]


def test_the_answer_does_not_wait_for_the_teacher() -> None:
    store, gate = MemoryExperienceStore(), threading.Event()
    teacher = Teacher(gate=gate)

    async def main(consolidator: ModelConsolidator) -> None:
        first = _agent(store, consolidator, ["Uploads fail on weekends"])
        assert str(await first.run(user_msg="Upload")).endswith("Done.")
        assert consolidator.pending() == 1 and not teacher.requests
        nxt = _agent(store, consolidator, ["Retry a 503 after two seconds"])   # the next episode starts at once
        await nxt.run(user_msg="Next")
        gate.set()
        assert await consolidator.aflush(timeout=30)

    with ModelConsolidator(teacher, store) as consolidator:
        asyncio.run(main(consolidator))
    assert sorted(map(tuple, teacher.requests)) == [("Retry a 503 after two seconds",), ("Uploads fail on weekends",)]
    assert len(_procedures(store)) == 2


def test_concurrent_runs_and_every_n_notes() -> None:
    store, teacher = MemoryExperienceStore(), Teacher()
    notes = [["Phone numbers need a country code", "The CRM API allows 5 requests a second", "Emails are unique per account"],
             ["Invoices carry a VAT id", "Exports are day-first dates", "Refunds wait for approval"]]

    async def main(consolidator: ModelConsolidator) -> None:
        agents = [_agent(store, consolidator, texts) for texts in notes]
        await asyncio.gather(*(a.run(user_msg=f"Migrate {i}") for i, a in enumerate(agents)))
        assert await consolidator.aflush(timeout=30)

    with ModelConsolidator(teacher, store, every_notes=2) as consolidator:
        asyncio.run(main(consolidator))
    assert sorted(len(r) for r in teacher.requests) == [1, 1, 2, 2]
    assert len(_procedures(store)) == 6


def test_decisions_about_another_tenants_entries_change_nothing() -> None:
    store = MemoryExperienceStore()
    secret = ExperienceEntry(text="Globex invoices need the VAT id")
    store.add(("globex", "crm"), secret)

    def hostile(messages: list[dict[str, str]]) -> str:
        note = json.loads(messages[-1]["content"])["notes"][0]["id"]
        return json.dumps({"decisions": [{"op": "delete", "id": secret.id}, {"op": "merge", "id": note, "into": secret.id}]})

    with ModelConsolidator(hostile, store) as consolidator:
        _run(_agent(store, consolidator, ["Invoices need a VAT id"]), "Invoice")
        assert consolidator.flush(timeout=30)
        assert consolidator.journal.counts() == {"fallback": 1}
    assert [e.text for e in store.list(("globex", "crm"))] == ["Globex invoices need the VAT id"]
    assert [e.text for e in store.list(NS)] == ["Invoices need a VAT id"]


def test_a_llamaindex_llm_is_a_teacher() -> None:
    store = MemoryExperienceStore()

    def answer(messages: list[dict[str, Any]], tools: Any) -> dict[str, Any]:
        notes = json.loads(messages[-1]["content"])["notes"]
        decisions = [{"op": "add", "text": f"Procedure: {n['text']}", "kind": "procedure"} for n in notes]
        return {"role": "assistant", "content": json.dumps({"decisions": decisions})}

    llm_teacher = ScriptedLLM([answer])
    with ModelConsolidator(llm_teacher, store) as consolidator:
        _run(_agent(store, consolidator, ["Dates are day-first in the export"]), "Export")
        assert consolidator.flush(timeout=30)
    assert [m.role.value for m in llm_teacher.calls[0]] == ["system", "user"]
    assert _procedures(store) == ["Procedure: Dates are day-first in the export"]


def test_a_consolidator_that_is_not_one_is_refused() -> None:
    with pytest.raises(UserError, match="ModelConsolidator"):
        _agent(MemoryExperienceStore(), "teacher", [])


def test_the_agent_uses_the_consolidators_store_and_refuses_another() -> None:
    store, teacher = MemoryExperienceStore(), Teacher()
    with ModelConsolidator(teacher, store) as consolidator:
        llm = ScriptedLLM([[("note", {"text": "Totals are in cents"})], "Done."])
        _run(with_bpe(FunctionAgent(tools=[], llm=llm), namespace=NS, consolidator=consolidator), "Sum up")  # no store=
        assert consolidator.flush(timeout=30)
        with pytest.raises(UserError, match="same store"):
            _agent(MemoryExperienceStore(), consolidator, [])
    assert _procedures(store) == ["Procedure: Totals are in cents"]
