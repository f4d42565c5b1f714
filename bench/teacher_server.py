"""A loopback OpenAI-compatible chat server over a local model: the consolidator against a real model, offline.

    python bench/teacher_server.py --port 8091 &          # the embedded SmolLM2-135M-Instruct, CPU
    evoharness consolidate traces.jsonl --base-url http://127.0.0.1:8091/v1 --model smollm2 --out consolidation --timeout 600

Only ``POST /v1/chat/completions`` (no streaming, no tools): greedy generation with
`TransformersPolicy`, the reply started with ``{"decisions": [`` so that a small model stays in the
format it is asked for. It reports the prompt and completion token counts of each request. For
real work use vLLM or llama.cpp's server (docs/consolidation.md); this is for measuring the path.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from evoharness_bpe.lab.policies.transformers import TransformersPolicy

PREFILL = '{"decisions": ['


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="a local model folder (default: the embedded SmolLM2-135M-Instruct)")
    parser.add_argument("--port", type=int, default=8091)
    parser.add_argument("--max-new-tokens", type=int, default=160)
    args = parser.parse_args()
    policy = TransformersPolicy(args.model, max_new_tokens=args.max_new_tokens, prefill=PREFILL, threads=2)
    lock = threading.Lock()  # one generation at a time

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            if self.path.rstrip("/") != "/v1/chat/completions":
                self._send(404, {"error": {"message": f"no route {self.path}"}})
                return
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            start = time.perf_counter()
            with lock:
                reply = policy.complete(body["messages"], [])
                prompt_tokens = policy.prompt_tokens[-1]
            content = str(reply.get("content") or "")
            completion_tokens = len(policy.tokenizer(content, add_special_tokens=False)["input_ids"])
            print(f"request: {prompt_tokens} prompt tokens, {completion_tokens} completion tokens, "
                  f"{time.perf_counter() - start:.1f} s", flush=True)
            self._send(200, {
                "id": f"chatcmpl-{int(time.time() * 1000)}", "object": "chat.completion", "created": int(time.time()),
                "model": body.get("model", policy.name),
                "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}],
                "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                          "total_tokens": prompt_tokens + completion_tokens},
            })

        def _send(self, code: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    print(f"serving {policy.name} on http://127.0.0.1:{args.port}/v1", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
