"""The student trained from scratch: its tokenizer, template, and the reproduction's smoke run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evoharness_bpe.lab.envs import make_env
from evoharness_bpe.lab.frameworks import EpisodeConfig
from evoharness_bpe.lab.policies import ExpertPolicy
from evoharness_bpe.lab.policies.toolcalls import parse_tool_calls
from evoharness_bpe.lab.runner.core import run_episode
from evoharness_bpe_training.datasets import trace_rows
from evoharness_bpe_training.grpo import CHAT_TEMPLATE_KWARGS
from evoharness_bpe_training.student import build_student, id_atoms, render_rows


@pytest.fixture(scope="module")
def rows():
    env = make_env("crm-migration", 1)
    trace = run_episode(env, ExpertPolicy(env), None, EpisodeConfig(seed=1, spec_style="compact", window=4))
    return trace_rows(trace)


def test_student_template_renders_calls_that_parse_back_and_keeps_prefixes(rows) -> None:
    model, tokenizer = build_student(rows, vocab_size=400, hidden_size=32, layers=1, template_kwargs=CHAT_TEMPLATE_KWARGS)
    assert model.config.vocab_size == len(tokenizer)
    row = next(r for r in rows if r["completion"][0]["tool_calls"][0]["function"]["name"] == "submit_batch")
    tools = json.loads(row["tools"])
    prompt = tokenizer.apply_chat_template(row["prompt"], tools=tools, add_generation_prompt=True, tokenize=False, **CHAT_TEMPLATE_KWARGS)
    full = render_rows([row], tokenizer, **CHAT_TEMPLATE_KWARGS)[0]
    assert full.startswith(prompt)  # prompt-completion training sees exactly the inference prompt
    call = parse_tool_calls(full[len(prompt):], {t["function"]["name"] for t in tools})
    assert call and call[0]["name"] == "submit_batch"
    assert json.loads(call[0]["arguments"]) == json.loads(row["completion"][0]["tool_calls"][0]["function"]["arguments"])
    assert "submit_batch(batch_id: integer, record_ids: array)" in prompt  # one signature line per tool
    assert '"parameters"' not in prompt


def test_tools_first_layout_puts_the_dashboard_after_the_tools_and_lengthens_the_shared_prefix(rows) -> None:
    import os

    from evoharness_bpe_training.student import student_chat_template
    from evoharness_bpe_training.tiny import build_tiny_tokenizer

    tokenizer = build_tiny_tokenizer(512, chat_template=student_chat_template())
    tools = json.loads(rows[0]["tools"])
    prompts = [r["prompt"] for r in rows[2:6]]  # other dashboards, other windows
    assert len({p[0]["content"] for p in prompts}) > 1

    def shared_and_texts(tools_first: bool) -> tuple[int, list[str]]:
        tokenizer.chat_template = student_chat_template(tools_first=tools_first)
        texts = [tokenizer.apply_chat_template(p, tools=tools, add_generation_prompt=True, tokenize=False, **CHAT_TEMPLATE_KWARGS)
                 for p in prompts]
        return len(os.path.commonprefix([tokenizer(t)["input_ids"] for t in texts])), texts

    (behind, usual), (ahead, first) = shared_and_texts(False), shared_and_texts(True)
    system = prompts[0][0]["content"]
    assert usual[0].index(system) < usual[0].index("# Tools")
    assert first[0].startswith("<|im_start|>system\n# Tools\n") and first[0].index("</tool_call>\n\n" + system) > 0
    assert sorted(usual[0]) == sorted(first[0])  # the same text, in another order
    assert ahead > behind + 100  # the tool section joins the prefix every prompt shares


def test_fitted_vocabulary_makes_rows_shorter_than_a_generic_one(rows) -> None:
    from evoharness_bpe_training.tiny import build_tiny_tokenizer

    _, fitted = build_student(rows, vocab_size=1024, hidden_size=32, layers=1, template_kwargs=CHAT_TEMPLATE_KWARGS)
    generic = build_tiny_tokenizer(1024, chat_template=fitted.chat_template)
    text = render_rows(rows[-1:], fitted, **CHAT_TEMPLATE_KWARGS)[0]
    assert len(fitted(text)["input_ids"]) < len(generic(text)["input_ids"])


@pytest.mark.slow
def test_reproduce_smoke_run_writes_the_report(tmp_path: Path) -> None:
    """The whole pipeline on the tiny preset: every stage, the report, the targets, the plots."""
    from evoharness_bpe_training.reproduce import reproduce
    from evoharness_bpe_training.reproduce_config import load_reproduce_preset

    lines: list[str] = []
    summary = reproduce(load_reproduce_preset("tiny", out=str(tmp_path)), log=lines.append)
    assert [r["stage"] for r in summary["results"]] == ["raw", "sft", "grpo"]
    assert set(summary["results"][0]["levels"]) == {"1", "2"}
    assert {t["target"][:3] for t in summary["targets"]} == {"(a)", "(b)", "(c)"}
    assert summary["grpo_curve"] and all("reward" in r for r in summary["grpo_curve"])
    report = (tmp_path / "report.md").read_text()
    assert "(a smoke test of the pipeline, not a result)" in report.splitlines()[0]
    assert "| sft-train |" in report and "torch threads, load average" in report  # wall time per stage, the machine
    for name in ("success.png", "meta_by_kind.png", "harness_tokens.png", "grpo_curves.png"):
        assert (tmp_path / name).stat().st_size > 1000 and name in report
    for stage in ("raw", "sft", "grpo"):
        assert (tmp_path / f"eval-{stage}.jsonl").exists()
    assert any(line.startswith("sft:") for line in lines)


@pytest.mark.parametrize("name", ["cpu", "tiny", "smollm2-gpu"])
def test_every_reproduce_preset_loads_and_validates(name: str) -> None:
    from evoharness_bpe_training.reproduce_config import load_reproduce_preset

    config = load_reproduce_preset(name, out="x")
    assert config.out == "x" and config.stage_list() == ["raw", "sft", "grpo"]
    assert config.levels()[0] == 1 and sorted(config.episodes_per_level()) == config.levels()  # target (a) is read at difficulty 1
    assert config.episode_config(7).seed == 7 and config.episode_config().spec_style == config.spec_style


def test_reproduce_flags_are_checked() -> None:
    from evoharness_bpe.exceptions import UserError
    from evoharness_bpe_training.reproduce_config import load_reproduce_preset

    with pytest.raises(UserError, match="--train-episodes needs one count per difficulty"):
        load_reproduce_preset("tiny", train_episodes="3")
    with pytest.raises(UserError, match="--stages takes raw, sft and grpo"):
        load_reproduce_preset("tiny", stages="raw,rl")
    with pytest.raises(UserError, match="--preset must be one of"):
        load_reproduce_preset("huge")


def test_record_ids_are_single_tokens_of_the_student(rows) -> None:
    model, tokenizer = build_student(rows, vocab_size=400, hidden_size=32, layers=1, template_kwargs=CHAT_TEMPLATE_KWARGS)
    atoms = id_atoms(render_rows(rows, tokenizer, **CHAT_TEMPLATE_KWARGS))
    assert '"R0001"' in atoms and '"R0020"' in atoms
    pieces = tokenizer.tokenize(' ["R0011", "R0012"]')
    assert '"R0011"' in pieces and '"R0012"' in pieces  # one token per id, quotes included
    ids = tokenizer(' {"ids":["R0003","R0004"]}')["input_ids"]
    assert tokenizer.decode(ids) == ' {"ids":["R0003","R0004"]}'  # decodes back unchanged
    assert model.config.vocab_size == len(tokenizer)
