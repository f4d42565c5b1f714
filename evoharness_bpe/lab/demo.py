"""`evoharness demo`: a short scripted episode that shows the dashboard change as the model acts."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..stores.sqlite import SQLiteExperienceStore
from ..trace import Outcome, TraceWriter
from ..workspace import Workspace

__all__ = ["DEMO_SCRIPT", "run_demo"]

DEMO_SCRIPT: list[tuple[str, dict[str, Any]]] = [
    ("recall", {"query": "upload customer batches rate limit"}),
    ("commit", {"subgoal": "batch 1", "status": "doing"}),
    ("track", {"key": "api.rate_limit", "value": "5 requests per second", "source": "target_api"}),
    ("commit", {"subgoal": "batch 1", "status": "done", "note": "50 records uploaded"}),
    ("commit", {"subgoal": "batch 2", "status": "failed", "note": "429 Too Many Requests"}),
    ("note", {"text": "The target API answers 429 above 5 requests per second: wait for retry-after",
              "kind": "pitfall", "tags": ["crm", "rate-limit"]}),
    ("commit", {"subgoal": "batch 2", "status": "doing", "note": "retrying after the wait"}),
    ("commit", {"subgoal": "batch 2", "status": "done", "note": "50 records uploaded"}),
    ("commit", {"subgoal": "batch 3", "status": "wrong"}),  # a malformed call: refused, nothing changes
]


def run_demo(out_dir: str | Path = "evoharness-demo", *, echo: Callable[[str], None] = print) -> Path:
    """Play `DEMO_SCRIPT`, printing each call and the dashboard; return the trace file's path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    store = SQLiteExperienceStore(out / "experience.db")
    try:
        ws = Workspace(
            "Migrate 150 customer records to the new CRM",
            subgoals=["batch 1", "batch 2", "batch 3"],
            store=store,
            namespace=("demo", "crm-agent"),
        )
        messages: list[dict[str, Any]] = [{"role": "user", "content": ws.state.progress.goal}]
        echo(ws.dashboard())
        for number, (name, args) in enumerate(DEMO_SCRIPT, start=1):
            call_id = f"call_{number}"
            result = ws.act(name, args, tool_call_id=call_id)
            messages.append(_assistant_call(call_id, name, args))
            messages.append({"role": "tool", "tool_call_id": call_id, "content": result.content})
            echo(f"\n> {name}({args})\n  {'ok' if result.ok else 'refused'}: {result.content}")
            echo(ws.dashboard())
        ws.finish(success=True)
        path = out / "traces.jsonl"
        with TraceWriter(path) as writer:
            writer.write(ws.trace(messages=messages, outcome=Outcome(success=True), env="demo"))
        summary = ws.ledger.summary()
        last = ws.snapshots[-1].tokens if ws.snapshots else 0
        echo(
            f"\n{summary.meta_action_calls} meta-actions ({summary.invalid_calls} refused), "
            f"{summary.harness_tokens} harness tokens in all: {summary.harness_tokens - last} as the last dashboard "
            f"counts them (the calls and the {summary.dashboard_renders - 1} dashboards before it), plus its own {last}."
        )
        echo(f"wrote {path} (the episode's trace; `evoharness view {path}` shows it as a page) "
             f"and {out / 'experience.db'} (its Experience store)")
        return path
    finally:
        store.close()


def _assistant_call(call_id: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    import json

    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}],
    }
