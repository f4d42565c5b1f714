"""traces_to_sft_dataset: frameworks mixed, one row per model call, filters, split, export."""

from __future__ import annotations

import json

import pytest

from evoharness_bpe import TraceWriter
from evoharness_bpe.exceptions import UserError
from evoharness_bpe_training.datasets import export_dataset, normalize_message, traces_to_sft_dataset


def test_frameworks_mix_into_one_dataset(framework_traces, workspace_trace) -> None:
    """Real LangGraph and LlamaIndex runs of the expert, plus a core run, in one dataset."""
    traces = [*framework_traces, workspace_trace]
    ds = traces_to_sft_dataset(traces, eval_fraction=0.0, deduplicate=False)  # episodes of one runner open alike
    rows = list(ds["train"])
    assert {r["framework"] for r in rows} == {"langgraph", "llamaindex", "core"}
    # one row per model call of each successful episode, in order, prompt exactly as the model received it
    successful = [t for t in traces if t.outcome.success]
    assert len(rows) == sum(len(t.model_calls) for t in successful)
    for trace in successful:
        mine = [r for r in rows if r["episode_id"] == trace.episode_id]
        assert [r["prompt"] for r in mine] == [[normalize_message(m) for m in call.messages] for call in trace.model_calls]
        assert [r["completion"][0] for r in mine] == [normalize_message(call.response) for call in trace.model_calls]
        assert all(json.loads(r["tools"]) == trace.tools for r in mine)
    assert framework_traces[-1].episode_id not in {r["episode_id"] for r in rows}
    assert len(ds["eval"]) == 0


def test_the_tool_call_format_does_not_depend_on_the_framework(run_expert) -> None:
    """The same expert episode through each runner gives the same completions, call for call."""
    rows = {fw: traces_to_sft_dataset([run_expert(fw, 0)], eval_fraction=0.0, deduplicate=False)["train"]
            for fw in ("core", "langgraph", "llamaindex")}
    completions = {fw: [r["completion"] for r in ds] for fw, ds in rows.items()}
    assert len(completions["core"]) > 5
    assert completions["langgraph"] == completions["core"] == completions["llamaindex"]
    for (reply,) in completions["core"]:
        (call,) = reply["tool_calls"]
        assert set(reply) == {"role", "content", "tool_calls", "tool_call_id", "name"} and reply["content"] == ""
        assert call["type"] == "function" and isinstance(json.loads(call["function"]["arguments"]), dict)
    # one harness: the system prompt, window and tools are the same in every framework
    prompts = {fw: [r["prompt"] for r in ds] for fw, ds in rows.items()}
    assert prompts["langgraph"][0] == prompts["core"][0] == prompts["llamaindex"][0]
    assert rows["langgraph"][0]["tools"] == rows["core"][0]["tools"] == rows["llamaindex"][0]["tools"]


def test_row_is_exactly_the_prompt_and_reply(workspace_trace) -> None:
    ds = traces_to_sft_dataset([workspace_trace], eval_fraction=0.0)
    first, second = ds["train"][0], ds["train"][1]
    call = workspace_trace.model_calls[1]
    assert second["prompt"] == [normalize_message(m) for m in call.messages]
    assert second["prompt"][0]["role"] == "system" and "</bpe-dashboard>" in second["prompt"][0]["content"]
    # the dashboard changed between the two calls: each row carries that step's dashboard
    assert first["prompt"][0]["content"] != second["prompt"][0]["content"]
    (reply,) = second["completion"]
    assert reply["role"] == "assistant"
    arguments = reply["tool_calls"][0]["function"]["arguments"]
    assert isinstance(arguments, str) and json.loads(arguments) == {"number": 1}
    tools = json.loads(second["tools"])
    assert {t["function"]["name"] for t in tools} == {"track", "commit", "recall", "note", "open_locker"}


def test_deduplication_and_failed_filter(framework_traces) -> None:
    twice = [*framework_traces, *framework_traces]
    once = traces_to_sft_dataset(framework_traces, eval_fraction=0.0)["train"]
    deduped = traces_to_sft_dataset(twice, eval_fraction=0.0)["train"]
    kept = traces_to_sft_dataset(twice, eval_fraction=0.0, deduplicate=False)["train"]
    calls = sum(len(t.model_calls) for t in framework_traces[:-1])
    # episodes of one runner open with the same prompt and move: those rows are kept once
    assert len(deduped) == len(once) < calls and len(kept) == 2 * calls
    with_failed = traces_to_sft_dataset(framework_traces, eval_fraction=0.0, successful_only=False, deduplicate=False)["train"]
    assert len(with_failed) == calls + len(framework_traces[-1].model_calls)


def test_split_is_by_episode(framework_traces, workspace_trace) -> None:
    ds = traces_to_sft_dataset([*framework_traces, workspace_trace], eval_fraction=0.4, seed=3)
    train_eps = set(ds["train"]["episode_id"])
    eval_eps = set(ds["eval"]["episode_id"])
    assert eval_eps and train_eps and not train_eps & eval_eps
    assert len(eval_eps) == 2  # 40% of the 5 successful episodes


def test_bad_input_is_refused(framework_traces, tmp_path) -> None:
    with pytest.raises(UserError, match="successful_only"):
        traces_to_sft_dataset([framework_traces[-1]])
    with pytest.raises(UserError, match="eval_fraction"):
        traces_to_sft_dataset(framework_traces, eval_fraction=1.5)
    with pytest.raises(UserError, match="does not exist"):
        traces_to_sft_dataset(tmp_path / "missing.jsonl")


def test_export_round_trips_from_a_trace_file(framework_traces, workspace_trace, tmp_path) -> None:
    from datasets import load_dataset

    path = tmp_path / "traces.jsonl"
    with TraceWriter(path) as writer:
        for trace in [*framework_traces, workspace_trace]:
            writer.write(trace)
    ds = traces_to_sft_dataset(path, eval_fraction=0.2)
    for fmt, builder in (("parquet", "parquet"), ("jsonl", "json")):
        files = export_dataset(ds, tmp_path / fmt, fmt=fmt)
        back = load_dataset(builder, data_files={"train": str(files[0])})["train"]
        assert len(back) == len(ds["train"])
        assert back[0]["completion"][0]["tool_calls"][0]["function"]["arguments"] == ds["train"][0]["completion"][0]["tool_calls"][0]["function"]["arguments"]


def test_export_command(framework_traces, tmp_path, capsys) -> None:
    from evoharness_bpe.lab.cli import main

    path = tmp_path / "traces.jsonl"
    with TraceWriter(path) as writer:
        for trace in framework_traces:
            writer.write(trace)
    assert main(["export", str(path), "--out", str(tmp_path / "out"), "--format", "jsonl", "--eval-fraction", "0.25"]) == 0
    assert (tmp_path / "out" / "train.jsonl").exists() and (tmp_path / "out" / "eval.jsonl").exists()
    assert "train: " in capsys.readouterr().out
    assert main(["export", str(tmp_path / "nope.jsonl"), "--out", str(tmp_path / "x")]) == 1


def test_tools_keep_the_order_the_model_saw(workspace_trace) -> None:
    row = traces_to_sft_dataset([workspace_trace], eval_fraction=0.0)["train"][0]
    assert json.loads(row["tools"]) == workspace_trace.tools
    assert row["tools"] == json.dumps(workspace_trace.tools, ensure_ascii=False)
