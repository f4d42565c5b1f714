"""Overhead of live OpenTelemetry spans on a scripted `BPEMiddleware` agent, against no tracer provider.

    python bench/telemetry.py [--steps 30] [--rounds 40]

One `create_agent` run with a scripted model: each step is one tool call (an ordinary tool,
with a `track` or a `note` every third step), so every step renders a dashboard and emits an
``execute_tool`` or memory span. Two variants, interleaved round by round in one process:
``off`` — the harness's hooks see no tracer provider (what a process without one runs) — and
``live`` — an SDK `TracerProvider` with a `BatchSpanProcessor` and the OTLP/HTTP exporter sending
to a receiver in another process on loopback (the production shape). Prints per-step times
(median and minimum over rounds), process CPU time, and the ratios live / off.
Target: live ≤ 1.10× off.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import subprocess
import sys
import time

from evoharness_bpe import telemetry
from evoharness_bpe_langgraph import BPEMiddleware
from evoharness_bpe_langgraph.testing import ScriptedChatModel, ai_tool_call
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langchain_core.tools import tool

_SINK = """
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200); self.send_header("Content-Length", "0"); self.end_headers()
    def log_message(self, *a): pass
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
"""


@tool
def fetch(page: int) -> str:
    """Fetch one page of records."""
    return f"page {page}: 50 records, next page {page + 1}"


def script(steps: int) -> list:
    calls = []
    for i in range(steps):
        if i % 3 == 1:
            calls.append(ai_tool_call("track", {"key": f"page.{i}", "value": "fetched"}))
        elif i % 3 == 2:
            calls.append(ai_tool_call("note", {"text": f"page {i} needs the export token refreshed"}))
        else:
            calls.append(ai_tool_call("fetch", {"page": i}))
    return calls


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=40)
    args = parser.parse_args()
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    sink = subprocess.Popen([sys.executable, "-c", _SINK], stdout=subprocess.PIPE, text=True)
    port = int(sink.stdout.readline())
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=f"http://127.0.0.1:{port}/v1/traces")))
    trace.set_tracer_provider(provider)
    live_module = telemetry._trace_module
    switch = {"off": lambda: None, "live": live_module}  # off: the hooks find no OpenTelemetry, as without a provider

    model = ScriptedChatModel(responses=script(args.steps), final="All pages fetched.")
    agent = create_agent(model, [fetch], system_prompt="You fetch records page by page.",
                         middleware=[BPEMiddleware(subgoals=["fetch pages", "report"])])
    inputs = {"messages": [HumanMessage("Fetch every page of the customer export")]}
    limit = {"recursion_limit": 4 * args.steps + 20}
    variants = ["off", "live"]
    per_step: dict[str, list[float]] = {v: [] for v in variants}
    cpu_step: dict[str, list[float]] = {v: [] for v in variants}
    try:
        for r in range(args.rounds + 1):
            for variant in variants if r % 2 else variants[::-1]:
                telemetry._trace_module = switch[variant]
                model.reset()
                gc.collect()
                started, cpu = time.perf_counter(), time.process_time()
                out = agent.invoke(inputs, limit)
                wall, used = time.perf_counter() - started, time.process_time() - cpu
                assert out["messages"][-1].content == "All pages fetched."
                if r:  # round 0 warms up
                    per_step[variant].append(wall * 1000 / args.steps)
                    cpu_step[variant].append(used * 1000 / args.steps)
        provider.force_flush()
    finally:
        telemetry._trace_module = live_module
        provider.shutdown()
        sink.kill()
    print(f"{args.steps}-step scripted BPEMiddleware agent, {args.rounds} interleaved rounds, ms per step")
    print("  variant   wall median  wall min  cpu median")
    for variant in variants:
        print(f"  {variant:7s} {statistics.median(per_step[variant]):11.3f} {min(per_step[variant]):9.3f}"
              f" {statistics.median(cpu_step[variant]):11.3f}")
    med = statistics.median(per_step["live"]) / statistics.median(per_step["off"])
    low = min(per_step["live"]) / min(per_step["off"])
    cpu = statistics.median(cpu_step["live"]) / statistics.median(cpu_step["off"])
    print(f"  live / off: wall median {med:.2f}x, wall min {low:.2f}x, cpu median {cpu:.2f}x (target <= 1.10x)")


if __name__ == "__main__":
    main()
