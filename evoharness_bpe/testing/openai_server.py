"""`QuirkyServer`: a local OpenAI-compatible chat server with the quirks of llama.cpp's, for tests.

It answers ``POST /v1/chat/completions`` on 127.0.0.1 from a script (or a function of the
request) and reproduces, each switchable, what llama-cpp-python's server does (0.3.36):

- tools are left out unless ``tool_choice`` is set: the reply is plain text, no tool call;
- an assistant message with ``content: null`` next to ``tool_calls`` is a 500;
- ``max_completion_tokens`` is ignored: without ``max_tokens`` the reply runs to the end of the
  context (a long text, ``finish_reason: "length"``);
- a tool schema with a ``maxLength``/``maxItems`` above 100 makes its grammar fail: a 500;
- a streamed request with tools gets SSE pings and an empty stream;
- ``usage`` is reported (its own count, not the client's estimate).

`fail_first` answers that many requests with 503 first, for retry tests. Every request body is
kept in `requests`, the usage of each scripted answer in `reported`.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["QuirkyServer", "completion"]

Turn = str | list[tuple[str, dict[str, Any]]]


def completion(turn: Turn, index: int, prompt_tokens: int = 0) -> dict[str, Any]:
    """A scripted turn (text, or ``[(tool, arguments), ...]``) as a chat completion."""
    message: dict[str, Any] = {"role": "assistant", "content": turn if isinstance(turn, str) else None}
    if not isinstance(turn, str):
        message["tool_calls"] = [
            {"id": f"call_{index}_{n}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
            for n, (name, args) in enumerate(turn)
        ]
    return {
        "id": f"chatcmpl-{index}", "object": "chat.completion", "created": 0, "model": "quirky",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop" if isinstance(turn, str) else "tool_calls"}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 1, "total_tokens": prompt_tokens + 1},
    }


def _oversized_limit(schema: Any) -> bool:
    if isinstance(schema, list):
        return any(_oversized_limit(s) for s in schema)
    if not isinstance(schema, dict):
        return False
    if any(isinstance(schema.get(k), int) and schema[k] > 100 for k in ("maxLength", "maxItems", "minLength", "minItems")):
        return True
    return any(_oversized_limit(v) for v in schema.values())


class QuirkyServer:
    """A scripted chat server on 127.0.0.1 with llama.cpp's quirks; use as a context manager.

    `script` is a list of turns (past its end: ``"Done."``) or a function ``(request) -> turn``.
    """

    def __init__(self, script: list[Turn] | Callable[[dict[str, Any]], Turn], *, tools_need_choice: bool = True,
                 refuse_null_content: bool = True, ignore_max_completion_tokens: bool = True,
                 grammar_limit: bool = True, refuse_streaming_tools: bool = True, fail_first: int = 0) -> None:
        self.script = script
        self.quirks = {"tools_need_choice": tools_need_choice, "refuse_null_content": refuse_null_content,
                       "ignore_max_completion_tokens": ignore_max_completion_tokens, "grammar_limit": grammar_limit,
                       "refuse_streaming_tools": refuse_streaming_tools}
        self.fail_first = fail_first
        self.requests: list[dict[str, Any]] = []
        self.reported: list[int] = []  # the prompt_tokens of each scripted answer's usage
        self.answered = 0
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the http.server API
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                status, payload = outer._answer(body)
                if payload == "stream":
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.end_headers()
                    self.wfile.write(b": ping\n\ndata: [DONE]\n\n")
                    return
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def _answer(self, body: dict[str, Any]) -> tuple[int, Any]:
        with self._lock:
            self.requests.append(body)
            if self.fail_first > 0:
                self.fail_first -= 1
                return 503, {"error": {"message": "loading model"}}
            q = self.quirks
            tools = body.get("tools") or []
            if q["refuse_null_content"] and any(
                m.get("role") == "assistant" and m.get("content") is None for m in body.get("messages", [])
            ):
                return 500, {"error": {"message": "content: null is not a string"}}
            if q["grammar_limit"] and tools and _oversized_limit(tools):
                return 500, {"error": {"message": "number of repetitions exceeds sane defaults"}}
            if q["refuse_streaming_tools"] and tools and body.get("stream"):
                return 200, "stream"
            prompt_tokens = 1000 + len(json.dumps(body)) // 3  # the server's own count
            if q["ignore_max_completion_tokens"] and "max_tokens" not in body:
                runaway = completion("and so on " * 2000, self.answered, prompt_tokens)
                runaway["choices"][0]["finish_reason"] = "length"
                return 200, runaway
            if q["tools_need_choice"] and tools and "tool_choice" not in body:
                return 200, completion("I would like to help, but I have no tools.", self.answered, prompt_tokens)
            index = self.answered
            self.answered += 1
            self.reported.append(prompt_tokens)
            if callable(self.script):
                turn = self.script(body)
            else:
                turn = self.script[index] if index < len(self.script) else "Done."
            return 200, completion(turn, index, prompt_tokens)

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> QuirkyServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
