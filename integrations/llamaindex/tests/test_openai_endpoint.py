"""The example's real-model path against a local OpenAI-compatible server (stdlib HTTP).

The server answers with the example's script, so the run is the offline one; what is checked is
what goes over the wire: one system message carrying the dashboard, the exact tool schemas, and
tool results keyed by `tool_call_id`.
"""

from __future__ import annotations

import importlib.util
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from evoharness_bpe import Workspace, read_traces

import llama_index.llms.openai_like  # noqa: F401 - the [openai] extra (requirements-dev.txt): missing is an error

pytestmark = pytest.mark.slow  # a local HTTP server and the example

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "llamaindex_function_agent.py"


def load_example() -> Any:
    spec = importlib.util.spec_from_file_location("llamaindex_function_agent_openai", EXAMPLE)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def completion_chunks(turn: Any, index: int) -> list[dict[str, Any]]:
    """One scripted turn as OpenAI streaming chunks."""
    base = {"id": f"chatcmpl-{index}", "object": "chat.completion.chunk", "created": 0, "model": "scripted"}
    if isinstance(turn, str):
        deltas = [{"role": "assistant", "content": turn}]
        finish = "stop"
    else:
        calls = [
            {"index": n, "id": f"call_{index}_{n}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
            for n, (name, args) in enumerate(turn)
        ]
        # one call per chunk, by index, as OpenAI and vLLM stream them
        deltas = [{"role": "assistant", "content": None}, *({"tool_calls": [call]} for call in calls)]
        finish = "tool_calls"
    chunks = [{**base, "choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas]
    chunks.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    return chunks


def completion(turn: Any, index: int) -> dict[str, Any]:
    """One scripted turn as a (non-streaming) OpenAI chat completion."""
    message: dict[str, Any] = {"role": "assistant", "content": turn if isinstance(turn, str) else None}
    if not isinstance(turn, str):
        message["tool_calls"] = [
            {"id": f"call_{index}_{n}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
            for n, (name, args) in enumerate(turn)
        ]
    finish = "stop" if isinstance(turn, str) else "tool_calls"
    return {
        "id": f"chatcmpl-{index}",
        "object": "chat.completion",
        "created": 0,
        "model": "scripted",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


def _serve(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture
def server() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    script = list(load_example().SCRIPT)
    requests: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - the http.server API
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            requests.append(body)
            index = len(requests) - 1
            turn = script[index] if index < len(script) else "Done."
            if not body.get("stream"):
                data = json.dumps(completion(turn, index)).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for chunk in completion_chunks(turn, index):
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.write(b"data: [DONE]\n\n")

        def log_message(self, *args: Any) -> None:
            pass

    for url in _serve(Handler):
        yield url, requests


def test_example_against_an_openai_compatible_server(server: tuple[str, list[dict[str, Any]]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url, requests = server
    monkeypatch.setenv("OPENAI_BASE_URL", url)
    monkeypatch.setenv("OPENAI_MODEL", "scripted")
    module = load_example()
    (trace,) = list(read_traces(module.main([str(tmp_path)])))

    assert len(requests) == 6 and trace.outcome.success is True
    for body in requests:  # bounded replies, tools offered with tool_choice, no streaming
        assert body["max_tokens"] == 512 and body["tool_choice"] == "auto" and not body.get("stream")
    for body in requests:
        roles = [m["role"] for m in body["messages"]]
        assert roles.count("system") == 1 and roles[0] == "system"
        assert "<bpe-dashboard" in body["messages"][0]["content"]
    third = requests[3]["messages"]  # after track + commit
    assert "stock.SKU-42" in third[0]["content"]
    assert "1 done" in third[0]["content"]
    tools = {t["function"]["name"]: t["function"] for t in requests[0]["tools"]}
    assert set(tools) == {"check_stock", "reserve", "track", "commit", "recall", "note"}
    for spec in Workspace("x").tools:
        assert tools[spec.name]["parameters"] == spec.parameters
    tool_messages = [m for m in requests[-1]["messages"] if m["role"] == "tool"]
    assert tool_messages and all(m["tool_call_id"].startswith("call_") for m in tool_messages)
    # the trace holds the prompts as the server received them
    for call, body in zip(trace.model_calls, requests, strict=True):
        assert [m["role"] for m in call.messages] == [m["role"] for m in body["messages"]]
        assert call.messages[0]["content"] == body["messages"][0]["content"]


class _RefusesStreamingWithTools(BaseHTTPRequestHandler):
    """What llama.cpp's server does with a streamed request that carries tools: SSE pings, no data."""

    def do_POST(self) -> None:  # noqa: N802 - the http.server API
        json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        self.wfile.write(b": ping\n\n")
        self.wfile.write(b"data: [DONE]\n\n")

    def log_message(self, *args: Any) -> None:
        pass


def test_a_refused_stream_fails_the_run_instead_of_an_empty_answer() -> None:
    import asyncio

    from evoharness_bpe.exceptions import ModelCallError
    from evoharness_bpe_llamaindex import BPETraceHandler, with_bpe
    from llama_index.core.agent.workflow import FunctionAgent
    from llama_index.llms.openai_like import OpenAILike

    for url in _serve(_RefusesStreamingWithTools):
        llm = OpenAILike(
            model="scripted", api_base=url, api_key="unused", is_chat_model=True, is_function_calling_model=True,
            max_tokens=64, timeout=10, max_retries=0,
        )
        traces = BPETraceHandler()
        agent = with_bpe(FunctionAgent(tools=[], llm=llm, streaming=True), trace=traces)

        async def main() -> None:
            await agent.run(user_msg="Reserve 3 units")

        with pytest.raises(ModelCallError, match="stream ended without a reply"):
            asyncio.run(main())
        assert traces.last is not None and traces.last.outcome.success is False
