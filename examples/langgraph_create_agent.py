"""A LangChain `create_agent` agent with the BPE workspace, its memory kept across threads.

    python examples/langgraph_create_agent.py                 # offline, scripted model
    OPENAI_BASE_URL=http://localhost:8000/v1 OPENAI_MODEL=qwen3 python examples/langgraph_create_agent.py

The first thread migrates customer records, tracks a fact, commits subgoals and notes a lesson;
a second thread of the same tenant recalls it. Traces go to ``traces/langgraph_create_agent.jsonl``.
With ``OPENAI_BASE_URL`` set, a real model (``pip install 'evoharness-bpe-langgraph[openai]'``)
drives both threads instead of the script: at most ``OPENAI_MAX_TOKENS`` (512) tokens a reply,
``OPENAI_TIMEOUT`` (60) seconds a call, ``tool_choice="auto"``, and the quirks of local servers
handled by `evoharness_bpe.endpoint.EndpointSettings` (``EVOHARNESS_NULL_CONTENT=empty`` for
llama-cpp-python). A run whose model call fails or returns nothing exits with status 1.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from evoharness_bpe import read_traces
from evoharness_bpe.endpoint import EndpointSettings
from evoharness_bpe.exceptions import ModelCallError
from evoharness_bpe_langgraph import BPEMiddleware, TraceCallbackHandler
from evoharness_bpe_langgraph.testing import ScriptedChatModel, ai_tool_call
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore

RECORDS = {"C-1": "Ada, Berlin", "C-2": "Linus, Helsinki", "C-3": "Grace, +1 555 0100"}


@tool
def upload(record_id: str) -> str:
    """Upload one customer record to the new CRM."""
    if record_id not in RECORDS:
        return f"error: no record {record_id}"
    if "+" in RECORDS[record_id]:
        return f"error: {record_id} has a phone number without country code field"
    return f"uploaded {record_id}"


def scripted_model(thread: int):
    if thread == 1:
        script = [
            ai_tool_call("upload", {"record_id": "C-1"}),
            ai_tool_call("upload", {"record_id": "C-3"}),
            ai_tool_call("track", {"key": "crm.phone_format", "value": "phone needs its own country code field"}),
            ai_tool_call("note", {"text": "Split phone numbers into country code and number before upload", "tags": ["crm"]}),
            ai_tool_call("commit", {"subgoal": "upload records", "status": "done"}),
            "Uploaded C-1; C-3 needs its phone split first.",
        ]
    else:
        script = [ai_tool_call("recall", {"query": "phone number upload"}), "I will split phone numbers first."]
    return ScriptedChatModel(responses=script)


def real_model():
    try:
        from langchain_openai import ChatOpenAI
    except ImportError as exc:  # pragma: no cover - optional
        raise SystemExit("a real model needs: pip install 'evoharness-bpe-langgraph[openai]'") from exc
    return ChatOpenAI(**EndpointSettings.from_env().langchain_kwargs())


def final_answer(out: dict) -> str:
    """The run's last reply; a run whose model returned nothing (no text, no tool call) failed."""
    last = out["messages"][-1]
    if last.type != "ai" or not (str(last.content).strip() or last.tool_calls):
        raise ModelCallError("the model returned an empty reply (no text, no tool call)")
    return str(last.content)


def main(trace_path: str = "traces/langgraph_create_agent.jsonl") -> int:
    online = bool(os.environ.get("OPENAI_BASE_URL"))
    bpe = BPEMiddleware(namespace=("acme", "crm-migration"), subgoals=["upload records", "report"])
    checkpointer, store = InMemorySaver(), InMemoryStore()
    Path(trace_path).parent.mkdir(parents=True, exist_ok=True)
    handler = TraceCallbackHandler(trace_path, middleware=bpe)
    for thread, task in [(1, "Migrate customers C-1 and C-3 to the new CRM"), (2, "Migrate customer C-2")]:
        model = real_model() if online else scripted_model(thread)
        agent = create_agent(model, [upload], system_prompt="You migrate CRM data.", middleware=[bpe], checkpointer=checkpointer, store=store)
        out = agent.invoke({"messages": [HumanMessage(task)]}, {"configurable": {"thread_id": f"t{thread}"}, "callbacks": [handler]})
        print(f"--- thread t{thread}: {final_answer(out)}")
        for message in out["messages"]:
            if message.type == "tool":
                print(f"  {message.name}: {message.content}")
    handler.writer.close()
    last = list(read_traces(trace_path))[-2:]
    print("--- dashboard the model saw last in thread t1:")
    print(last[0].dashboards[-1].text)
    print(f"--- {len(last)} traces written to {trace_path}; ledger of t1: {last[0].ledger.meta_action_calls} meta-actions")
    return 0


def cli(argv: list[str]) -> int:
    """`main` as a command: status 1, and the reason on stderr, when a model call failed."""
    try:
        return main(*argv)
    except Exception as exc:  # a refused, timed-out or empty model call lands here
        print(f"run failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(cli(sys.argv[1:]))
