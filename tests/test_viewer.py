"""`evoharness view`: the page, loaded in a real headless Chromium and stepped through with keys."""

from __future__ import annotations

import asyncio
import base64
import importlib.util
import json
import os
import re
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from evoharness_bpe import TraceWriter
from evoharness_bpe.lab.cli import main
from evoharness_bpe.lab.envs import make_env
from evoharness_bpe.lab.frameworks import EpisodeConfig
from evoharness_bpe.lab.registry import load_framework
from evoharness_bpe.lab.policies import ExpertPolicy
from evoharness_bpe.lab.viewer import episode_steps, render_page
from evoharness_bpe.lab.viewer.page import script_json

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
NO_CHROMIUM = ("no chromium browser: the headless viewer tests need Debian's chromium package "
               "(apt-get install chromium); .ci/run installs it and sets EVOHARNESS_REQUIRE_CHROMIUM=1")

# Texts that end a script element or switch the HTML parser's script state if they reach the page raw.
# No "-->" among them: it would switch the parser back and hide what "<!--<script>" does.
HOSTILE = ["<!--<script>", "</script><script>alert(1)</script>", "</SCRIPT >", "<script>",
           "line\u2028separator\u2029paragraph", "]]> &amp; &lt;", "<\\/script>"]


def _need_chromium() -> None:
    """Skip when no Chromium is installed (allow-listed), fail instead when CI requires it."""
    if not CHROMIUM:
        if os.environ.get("EVOHARNESS_REQUIRE_CHROMIUM") == "1":
            pytest.fail("EVOHARNESS_REQUIRE_CHROMIUM=1 but no chromium is on PATH (apt-get install chromium)")
        pytest.skip(NO_CHROMIUM)


def _episode(tmp_path: Path) -> tuple[Path, Any]:
    env = make_env("crm-migration", 1)
    trace = load_framework("core")(env, ExpertPolicy(env), None, EpisodeConfig(harness="bpe", seed=2))
    trace.messages.append({"role": "tool", "tool_call_id": "x", "content": "</script><script>alert(1)</script>"})
    path = tmp_path / "traces.jsonl"
    with TraceWriter(path) as writer:
        writer.write(trace)
    return path, trace


def test_steps_pair_each_call_with_its_observation_events_and_next_state(tmp_path: Path) -> None:
    _path, trace = _episode(tmp_path)
    steps = episode_steps(trace)
    assert len(steps) == len(trace.model_calls)
    metas = [m["name"] for s in steps for m in s["meta_actions"]]
    assert metas == [e.name for e in trace.meta_actions if e.tool_call_id]
    with_obs = [s for s in steps if s["observations"]]
    assert with_obs and all(o["content"] for s in with_obs for o in s["observations"])
    # the state after step i is the dashboard the model saw at step i + 1
    system = next(m for m in steps[1]["prompt"] if m["role"] == "system")["content"]
    assert steps[0]["state_after"] and steps[0]["state_after"] in system


def test_the_page_is_self_contained_and_cannot_be_broken_by_trace_text(tmp_path: Path) -> None:
    _path, trace = _episode(tmp_path)
    html = render_page(trace)
    assert "<script>alert(1)" not in html       # the closing tag in the data is escaped
    assert "http://" not in html and "https://" not in html and "src=" not in html


def _hostile_episode(tmp_path: Path, harness: str = "bpe") -> tuple[Path, Any]:
    """An episode whose task, prompts, replies and observations carry every text in HOSTILE."""
    env = make_env("crm-migration", 1)
    trace = load_framework("core")(env, ExpertPolicy(env), None, EpisodeConfig(harness=harness, seed=2))
    bad = " ".join(HOSTILE)
    trace.task = f"{bad} {trace.task}"
    observed = {c["id"] for mc in trace.model_calls for c in mc.response.get("tool_calls") or []}
    for m in trace.messages:
        if m.get("role") == "tool" and m.get("tool_call_id") in observed:
            m["content"] = f"{bad} {m['content']}"
    for mc in trace.model_calls:
        mc.response["content"] = bad
        mc.messages.append({"role": "user", "content": bad})
    path = tmp_path / "traces.jsonl"
    with TraceWriter(path) as writer:
        writer.write(trace)
    return path, trace


def test_the_inline_data_holds_no_markup_and_reads_back_exactly() -> None:
    data = {"texts": [*HOSTILE, "<!-- -->", "-->"], "nested": [{"k": "<!--<script>", "u": "\u2028\u2029"}]}
    text = script_json(data)
    assert not set(text) & {"<", ">", "&", "\u2028", "\u2029"}
    assert json.loads(text) == data


def test_hostile_trace_text_cannot_reach_the_page_as_markup(tmp_path: Path) -> None:
    _path, trace = _hostile_episode(tmp_path)
    html = render_page(trace)
    body = re.search(r'<script id="episode-data" type="application/json">(.*?)</script>', html, re.S)
    assert body is not None
    assert "<" not in body.group(1) and "\u2028" not in body.group(1)
    data = json.loads(body.group(1))
    assert data["task"] == trace.task and data["steps"][0]["reply"] == " ".join(HOSTILE)
    assert html.count("<script") == 2  # the data element and the page's own script, nothing from the trace


def test_steps_of_a_harness_without_dashboard_have_no_state_after(tmp_path: Path) -> None:
    env = make_env("crm-migration", 1)
    trace = load_framework("core")(env, ExpertPolicy(env), None, EpisodeConfig(harness="none", seed=2))
    steps = episode_steps(trace)
    assert steps and all(s["state_after"] == "" for s in steps)  # not the system prompt shown as a dashboard


def test_view_command_writes_the_page_and_refuses_bad_input_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, _trace = _episode(tmp_path)
    assert main(["view", str(path), "--out", str(tmp_path / "p.html")]) == 0
    assert (tmp_path / "p.html").read_text().startswith("<!DOCTYPE html>")
    assert main(["view", str(path), "--episode", "5"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--episode 5 is out of range" in err[0]


class _Chromium:
    """A headless Chromium driven over the DevTools protocol (websocket, loopback only)."""

    def __init__(self, tmp: Path) -> None:
        self.profile = tmp / "profile"
        self.proc = subprocess.Popen(
            [str(CHROMIUM), "--headless=new", "--no-sandbox", "--disable-gpu", "--remote-debugging-port=0",
             "--remote-debugging-address=127.0.0.1", f"--user-data-dir={self.profile}", "--window-size=1400,1000", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        port_file = self.profile / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not port_file.exists() or not port_file.read_text().strip():
            if time.monotonic() > deadline:
                self.close()
                raise RuntimeError("chromium did not open its DevTools port")
            time.sleep(0.1)
        port = port_file.read_text().split()[0]
        pages = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10))
        self.ws_url = next(p["webSocketDebuggerUrl"] for p in pages if p.get("type") == "page")
        self._id = 0

    async def __aenter__(self) -> _Chromium:
        import websockets

        self.ws = await websockets.connect(self.ws_url, max_size=None)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.ws.close()

    async def send(self, method: str, **params: Any) -> dict[str, Any]:
        self._id += 1
        await self.ws.send(json.dumps({"id": self._id, "method": method, "params": params}))
        while True:
            message = json.loads(await self.ws.recv())
            if message.get("id") == self._id:
                if "error" in message:
                    raise RuntimeError(message["error"])
                return message.get("result", {})

    async def text(self, selector: str) -> str:
        result = await self.send("Runtime.evaluate", expression=f"document.querySelector({json.dumps(selector)}).textContent", returnByValue=True)
        return str(result["result"].get("value"))

    async def key(self, key: str, code: int) -> None:
        for kind in ("keyDown", "keyUp"):
            await self.send("Input.dispatchKeyEvent", type=kind, key=key, code=key, windowsVirtualKeyCode=code)

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def test_a_missing_chromium_is_an_allowed_skip_unless_ci_requires_it() -> None:
    # the root conftest's reading of tests/skip-allowlist.txt
    spec = importlib.util.spec_from_file_location("_root_conftest", Path(__file__).resolve().parents[1] / "conftest.py")
    assert spec is not None and spec.loader is not None
    root = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(root)
    _allowed_reasons = root._allowed_reasons
    saved = os.environ.pop("EVOHARNESS_REQUIRE_CHROMIUM", None)
    try:
        assert any(entry in NO_CHROMIUM for entry in _allowed_reasons())
        os.environ["EVOHARNESS_REQUIRE_CHROMIUM"] = "1"
        assert not any(entry in NO_CHROMIUM for entry in _allowed_reasons())
    finally:
        os.environ.pop("EVOHARNESS_REQUIRE_CHROMIUM", None)
        if saved is not None:
            os.environ["EVOHARNESS_REQUIRE_CHROMIUM"] = saved
    ci = (Path(__file__).resolve().parents[1] / ".ci" / "run").read_text("utf-8")
    assert "EVOHARNESS_REQUIRE_CHROMIUM=1" in ci


def test_the_page_steps_through_the_episode_in_headless_chromium(tmp_path: Path) -> None:
    _need_chromium()
    path, trace = _episode(tmp_path)
    page = tmp_path / "episode.html"
    assert main(["view", str(path), "--out", str(page)]) == 0
    steps = episode_steps(trace)
    browser = _Chromium(tmp_path)

    async def drive() -> None:
        async with browser as b:
            await b.send("Page.enable")
            await b.send("Page.navigate", url=page.as_uri())
            for _ in range(100):
                if (await b.text("#position")).startswith("step 1 of"):
                    break
                await asyncio.sleep(0.1)
            assert await b.text("#position") == f"step 1 of {len(steps)}"
            assert trace.task in await b.text("#task")
            # the dashboard in the prompt is highlighted
            assert "<bpe-dashboard" in await b.text("#prompt .dashboard")
            await b.key("ArrowRight", 39)
            await b.key("ArrowRight", 39)
            assert await b.text("#position") == f"step 3 of {len(steps)}"
            shown = await b.text("#reply")
            assert all(c["name"] in shown for c in steps[2]["calls"])
            await b.key("End", 35)
            assert await b.text("#position") == f"step {len(steps)} of {len(steps)}"
            await b.key("ArrowLeft", 37)
            assert await b.text("#position") == f"step {len(steps) - 1} of {len(steps)}"
            # the slider and the buttons step too
            await b.send("Runtime.evaluate", expression="const s = document.getElementById('slider'); "
                         "s.value = '4'; s.dispatchEvent(new Event('input'))")
            assert await b.text("#position") == f"step 4 of {len(steps)}"
            reply = await b.text("#reply")
            assert steps[3]["calls"] and all(c["name"] in reply for c in steps[3]["calls"])
            await b.send("Runtime.evaluate", expression="document.getElementById('next').click()")
            assert await b.text("#position") == f"step 5 of {len(steps)}"
            await b.key("Home", 36)
            assert await b.text("#position") == f"step 1 of {len(steps)}"
            # a step with a meta-action shows it with its cost; the state after is the next dashboard
            k = next(i for i, s in enumerate(steps) if s["meta_actions"])
            await b.send("Runtime.evaluate", expression=f"show({k + 1})")
            table = await b.text("#meta-actions")
            assert steps[k]["meta_actions"][0]["name"] in table and "tokens in/out" in table
            assert (await b.text("#state")).startswith("<bpe-dashboard")
            shot = await b.send("Page.captureScreenshot", format="png")
            (tmp_path / "viewer.png").write_bytes(base64.b64decode(shot["data"]))

    try:
        asyncio.run(drive())
    finally:
        browser.close()
    assert (tmp_path / "viewer.png").stat().st_size > 10_000


@pytest.mark.parametrize("harness", ["bpe", "none"])
def test_hostile_traces_render_every_step_in_headless_chromium(tmp_path: Path, harness: str) -> None:
    _need_chromium()
    path, trace = _hostile_episode(tmp_path, harness)
    page = tmp_path / "episode.html"
    assert main(["view", str(path), "--out", str(page)]) == 0
    steps = episode_steps(trace)
    browser = _Chromium(tmp_path)

    async def drive() -> None:
        async with browser as b:
            await b.send("Page.enable")
            await b.send("Page.navigate", url=page.as_uri())
            for _ in range(100):
                if (await b.text("#position")).startswith("step 1 of"):
                    break
                await asyncio.sleep(0.1)
            assert await b.text("#position") == f"step 1 of {len(steps)}"  # the page's own script ran
            assert await b.text("#task") == trace.task                       # the hostile text shown as text
            count = await b.send("Runtime.evaluate", expression="document.scripts.length", returnByValue=True)
            assert count["result"]["value"] == 2
            k = next(i for i, s in enumerate(steps) if s["observations"])
            await b.send("Runtime.evaluate", expression=f"show({k + 1})")
            assert await b.text("#position") == f"step {k + 1} of {len(steps)}"
            assert "<!--<script>" in await b.text("#observations")
            assert " ".join(HOSTILE) in await b.text("#reply")
            assert "<!--<script>" in await b.text("#prompt")
            state = await b.text("#state")
            if harness == "none":
                assert state == "no dashboard (harness none)"
            else:
                assert state.startswith("<bpe-dashboard")

    try:
        asyncio.run(drive())
    finally:
        browser.close()
