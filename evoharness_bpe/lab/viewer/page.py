"""An episode as a page: each model call's prompt (dashboard highlighted), reply and tool calls,
observations, meta-action events with their cost, and the state after the step.

The page is one HTML file with its data inline and no network access; every text from the trace
is inserted with ``textContent``, so a hostile trace cannot inject markup. The inline data has no
``<`` at all (nor ``>``, ``&``, U+2028/2029): written as JSON escapes, no text of a trace can end
the data element or switch the HTML parser's script state (``<!--<script>``), so the page's own
script always runs.
"""

from __future__ import annotations

import json
import os
from importlib import resources
from pathlib import Path
from typing import Any

from ...exceptions import UserError
from ...trace import Trace, read_traces

__all__ = ["episode_steps", "render_page", "write_page", "load_episode", "script_json"]

_TEMPLATE = "template.html"


def _calls(message: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for call in message.get("tool_calls") or []:
        fn = call.get("function") or {}
        out.append({"id": call.get("id"), "name": fn.get("name", ""), "arguments": fn.get("arguments", "")})
    return out


def episode_steps(trace: Trace) -> list[dict[str, Any]]:
    """One entry per model call: prompt, reply, calls, observations, meta-action events, state after."""
    results = {m.get("tool_call_id"): str(m.get("content") or "") for m in trace.messages if m.get("role") == "tool"}
    events = {e.tool_call_id: e for e in trace.meta_actions if e.tool_call_id}
    steps = []
    calls = trace.model_calls
    for i, mc in enumerate(calls):
        reply_calls = _calls(mc.response)
        metas, observations = [], []
        for call in reply_calls:
            event = events.get(call["id"])
            if event is not None:
                metas.append({"name": event.name, "arguments": event.arguments, "ok": event.ok, "content": event.content,
                              "tokens_in": event.cost.tokens_in, "tokens_out": event.cost.tokens_out,
                              "wall_ms": round(event.cost.wall_ms, 2)})
            else:
                observations.append({"name": call["name"], "content": results.get(call["id"], "")})
        if i + 1 < len(calls):
            after = _system_text(calls[i + 1].messages)
        else:
            after = trace.dashboards[-1].text if trace.dashboards else ""
        steps.append({
            "index": i + 1,
            "prompt": [{"role": str(m.get("role", "")), "content": str(m.get("content") or ""), "calls": _calls(m)} for m in mc.messages],
            "prompt_tokens": mc.prompt_tokens,
            "reply": str(mc.response.get("content") or ""),
            "calls": reply_calls,
            "observations": observations,
            "meta_actions": metas,
            "state_after": _dashboard_of(after),
        })
    return steps


def _system_text(messages: list[dict[str, Any]]) -> str:
    return next((str(m.get("content") or "") for m in messages if m.get("role") == "system"), "")


def _dashboard_of(text: str) -> str:
    """The dashboard part of a system prompt; empty when it has none (the ``none`` and ``append`` harnesses)."""
    start = text.find("<bpe-dashboard")
    end = text.find("</bpe-dashboard>", start)
    return text[start:end + len("</bpe-dashboard>")] if start >= 0 and end >= 0 else ""


_SCRIPT_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def script_json(data: Any) -> str:
    """`data` as JSON that is inert inside an HTML ``<script>`` element.

    Every ``<``, ``>`` and ``&`` (and U+2028/2029) is written as a ``\\uXXXX`` escape, so the text
    holds no tag, comment or entity start whatever the data says; ``JSON.parse`` reads back
    exactly `data`.
    """
    text = json.dumps(data, ensure_ascii=True)
    for char, escape in _SCRIPT_ESCAPES.items():
        text = text.replace(char, escape)
    return text


def load_episode(path: str | os.PathLike[str], episode: int = 0) -> Trace:
    """Episode `episode` (0-based; negative counts from the end) of a trace file."""
    if not Path(path).is_file():
        raise UserError(f"{path} is not a trace file: pass a traces.jsonl written by a run")
    traces = list(read_traces(path))
    if not traces:
        raise UserError(f"{path} holds no episode")
    if not -len(traces) <= episode < len(traces):
        raise UserError(f"--episode {episode} is out of range: {path} holds {len(traces)} episodes (0..{len(traces) - 1})")
    return traces[episode]


def render_page(trace: Trace) -> str:
    """The page for one episode, as HTML text."""
    data = {
        "task": trace.task, "env": trace.env, "harness": trace.harness, "framework": trace.framework,
        "episode_id": trace.episode_id, "success": trace.outcome.success,
        "steps": episode_steps(trace),
        "meta_calls": trace.ledger.meta_action_calls if trace.ledger else len(trace.meta_actions),
    }
    payload = script_json(data)
    template = resources.files(__package__).joinpath(_TEMPLATE).read_text("utf-8")
    return template.replace("/*EPISODE_DATA*/null", payload)


def write_page(traces: str | os.PathLike[str], out: str | os.PathLike[str] | None = None, episode: int = 0) -> Path:
    """Write the page of episode `episode` of `traces`; returns its path (default: beside the traces)."""
    trace = load_episode(traces, episode)
    target = Path(out) if out else Path(traces).with_name(f"episode-{episode if episode >= 0 else 'last'}.html")
    try:
        target.write_text(render_page(trace), "utf-8")
    except OSError as exc:
        raise UserError(f"cannot write {target} ({exc.strerror or exc}): choose another --out") from exc
    return target
