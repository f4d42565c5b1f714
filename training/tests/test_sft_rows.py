"""What becomes of SFT rows: long prompts cut from the left, completions never lost silently,
deduplication with random ids masked, and rows balanced by call position."""

from __future__ import annotations

import json
import logging
from collections import Counter

import pytest

from evoharness_bpe.exceptions import UserError
from evoharness_bpe.testing.scripted import ScriptedPolicy, tool_call
from evoharness_bpe_training.datasets import row_key, traces_to_sft_dataset
from evoharness_bpe_training.presets import get_preset

from evoharness_bpe.lab.frameworks import EpisodeConfig
from evoharness_bpe.lab.registry import load_framework

FILLER = " ".join(f"record {n} migrated with status ok and checksum verified" for n in range(120))


def _long_prompt_rows(sft_traces):
    """The expert rows with a long tool observation in front of each prompt's recent window."""
    rows = traces_to_sft_dataset(sft_traces, eval_fraction=0.0)["train"]

    def lengthen(row):
        system, *window = row["prompt"]
        note = {"role": "user", "content": FILLER, "tool_calls": None, "tool_call_id": None, "name": None}
        return {"prompt": [system, note, *window]}

    return rows.map(lengthen).select_columns(["prompt", "completion", "tools"])


def _trainer(config, dataset, tiny_dir):
    from evoharness_bpe_training.models import load_model_and_tokenizer
    from evoharness_bpe_training.sft import CompletionSafeSFTTrainer

    model, tokenizer = load_model_and_tokenizer("tiny", cache_dir=tiny_dir)
    trainer = CompletionSafeSFTTrainer(model=model, args=config, train_dataset=dataset, processing_class=tokenizer,
                                       peft_config=config.peft_config(), truncation_side=config.truncation_side,
                                       max_lost_completions=config.max_lost_completions)
    return trainer, tokenizer


def test_a_long_prompt_loses_its_start_and_keeps_its_completion(sft_traces, tiny_dir, tmp_path) -> None:
    dataset = _long_prompt_rows(sft_traces)
    config = get_preset("tiny").sft_config(output_dir=str(tmp_path), max_length=384)
    trainer, tokenizer = _trainer(config, dataset, tiny_dir)
    prepared = trainer.train_dataset
    assert len(prepared) == len(dataset)  # TRL alone drops every one of these rows
    assert trainer.row_report["train"]["prompts_cut"] == len(dataset)
    assert trainer.row_report["train"]["completions_lost"] == 0
    for row, source in zip(prepared, dataset):
        assert len(row["input_ids"]) == 384
        trained = tokenizer.decode([t for t in row["labels"] if t != -100])
        call = source["completion"][0]["tool_calls"][0]["function"]
        assert call["name"] in trained and call["arguments"] in trained and trained.rstrip().endswith("<|im_end|>")
        # the end of the prompt is kept: the tokens just before the reply are the generation prompt
        first = next(i for i, t in enumerate(row["labels"]) if t != -100)
        assert tokenizer.decode(row["input_ids"][:first]).rstrip().endswith("assistant")


def test_run_sft_trains_on_every_long_row_and_reports_it(sft_traces, tiny_dir, tmp_path) -> None:
    from evoharness_bpe_training.models import load_model_and_tokenizer
    from evoharness_bpe_training.sft import run_sft

    dataset = _long_prompt_rows(sft_traces)
    config = get_preset("tiny").sft_config(output_dir=str(tmp_path), max_length=384, max_steps=1, eval_fraction=0.0)
    model, tokenizer = load_model_and_tokenizer("tiny", cache_dir=tiny_dir)
    result = run_sft(config, dataset=dataset, model=model, tokenizer=tokenizer)
    report = json.loads((tmp_path / "metrics.json").read_text())["rows"]["train"]
    assert report["kept"] == report["rows"] == len(dataset) == report["prompts_cut"]
    assert result.rows["train"]["completions_lost"] == 0 and result.metrics["train_loss"] > 0


def test_completions_longer_than_max_length_make_the_run_refuse_with_the_count(sft_traces, tiny_dir, tmp_path) -> None:
    dataset = _long_prompt_rows(sft_traces)
    config = get_preset("tiny").sft_config(output_dir=str(tmp_path), max_length=12)
    with pytest.raises(UserError, match=rf"{len(dataset)} of {len(dataset)} train rows would lose completion tokens at max_length 12") as err:
        _trainer(config, dataset, tiny_dir)
    assert "raise max_length to" in str(err.value) and "max_lost_completions" in str(err.value)


def test_below_the_threshold_lost_rows_are_dropped_and_logged(sft_traces, tiny_dir, tmp_path, caplog) -> None:
    dataset = _long_prompt_rows(sft_traces)
    huge = dict(dataset[0])
    huge["completion"] = [{**huge["completion"][0], "content": FILLER}]
    from datasets import concatenate_datasets, Dataset

    mixed = concatenate_datasets([dataset, Dataset.from_list([huge]).cast(dataset.features)])
    config = get_preset("tiny").sft_config(output_dir=str(tmp_path), max_length=384, max_lost_completions=0.25)
    with caplog.at_level(logging.WARNING, logger="evoharness_bpe_training.sft"):
        trainer, _ = _trainer(config, mixed, tiny_dir)
    assert len(trainer.train_dataset) == len(dataset)
    assert trainer.row_report["train"]["completions_lost"] == 1
    assert f"1 of {len(mixed)} train rows would lose completion tokens" in caplog.text


def run_core(env, policy, seed: int = 0):
    return load_framework("core")(env, policy, None, EpisodeConfig(seed=seed, max_steps=30))


def _note_then_open() -> list:
    return [tool_call("note", {"text": "Lockers open in order: 1 before 2.", "kind": "lesson"}),
            tool_call("track", {"key": "plan", "value": "open 1..2"}),
            tool_call("open_locker", {"number": 1}), tool_call("open_locker", {"number": 2})]


def test_the_opening_move_survives_deduplication_of_100_identical_task_episodes(locker_env_cls) -> None:
    """Each episode notes a lesson, whose random id then shows in every later prompt of that episode."""
    traces = [run_core(locker_env_cls(2), ScriptedPolicy(_note_then_open()), seed=0) for _ in range(100)]
    calls = len(traces[0].model_calls)
    rows = traces_to_sft_dataset(traces, eval_fraction=0.0)["train"]
    # one row per call position: the re-recorded episodes collapse whole, not only in their opening
    assert len(rows) == calls
    openings = [r for r in rows if r["completion"][0]["tool_calls"][0]["function"]["name"] == "note"]
    assert len(openings) == 1 and len(openings) / len(rows) == 1 / calls
    assert sorted(rows["position"]) == list(range(calls))


def test_balancing_gives_every_position_one_row_per_episode_reaching_it(locker_env_cls) -> None:
    class SameOpeningLockers(locker_env_cls):
        """Every seed opens alike; what the lockers report depends on the seed."""

        def reset(self, seed: int) -> tuple[str, str]:
            super().reset(seed)
            self.seed = seed
            return (f"Open lockers 1 to {self.difficulty} in order.", "All lockers closed.")

        def step(self, tool_call):
            result = super().step(tool_call)
            return result.model_copy(update={"observation": f"{result.observation} (room {self.seed})"})

    traces = [run_core(SameOpeningLockers(2), ScriptedPolicy(_note_then_open()), seed=s) for s in range(12)]
    calls = len(traces[0].model_calls)
    plain = traces_to_sft_dataset(traces, eval_fraction=0.0)["train"]
    assert Counter(plain["position"])[0] == 1 < Counter(plain["position"])[calls - 1]
    ds = traces_to_sft_dataset(traces, eval_fraction=0.25, balance_positions=True)
    for split, episodes in (("train", 9), ("eval", 3)):
        assert Counter(ds[split]["position"]) == {p: episodes for p in range(calls)}
    assert len({row_key(r) for r in ds["train"] if r["position"] == 0}) == 1


def test_the_deduplication_key_masks_random_ids_and_keeps_their_structure() -> None:
    def row(*ids: str, call: str = "call_1", value: str = "ok") -> dict:
        text = " ".join(f"noted as {i}" for i in ids)
        return {
            "prompt": [{"role": "tool", "content": f"{text} {value}", "tool_call_id": call, "tool_calls": None, "name": None}],
            "completion": [{"role": "assistant", "content": "", "tool_calls": [{"id": call, "type": "function",
                            "function": {"name": "recall", "arguments": "{}"}}], "tool_call_id": None, "name": None}],
            "tools": "[]",
        }

    assert row_key(row("88fef2fa8f7f41e8")) == row_key(row("09b6e1816aac4341", call="chatcmpl-tool-9f2"))
    assert row_key(row("3f2a1b6c-0d4e-4f5a-9b7c-1d2e3f4a5b6c")) == row_key(row("aa2a1b6c-0d4e-4f5a-9b7c-1d2e3f4a5b6d"))
    assert row_key(row("88fef2fa8f7f41e8", "88fef2fa8f7f41e8")) != row_key(row("88fef2fa8f7f41e8", "09b6e1816aac4341"))
    assert row_key(row("88fef2fa8f7f41e8")) != row_key(row("88fef2fa8f7f41e8", value="failed"))
    assert row_key(row("88fef2fa8f7f41e8")) == row_key(row("1234567890123456"))  # an entry id may draw no letter
    assert row_key(row("order 1234567890123")) != row_key(row("order 1234567890124"))  # other numbers are data


def test_balancing_weighs_each_difficulty_by_its_own_episodes() -> None:
    """Twelve easy crm-migration episodes and two hard ones: every easy episode opens with the
    same batch (ids 1-10) and every hard one with another (ids 1-25), so each difficulty's first
    batch dedupes to one row; balanced, the first batch is taught 12 to 2, not half and half."""
    from evoharness_bpe.lab.envs import make_env
    from evoharness_bpe.lab.policies import ExpertPolicy
    from evoharness_bpe.lab.runner.core import run_episode

    config = EpisodeConfig(harness="bpe", window=4, dashboard_tokens=160, spec_style="compact")
    traces = []
    for level, seeds in ((1, range(12)), (2, range(2))):
        for seed in seeds:
            env = make_env("crm-migration", level)
            traces.append(run_episode(env, ExpertPolicy(env), None, config.model_copy(update={"seed": seed})))
    rows = traces_to_sft_dataset(traces, eval_fraction=0.0, balance_positions=True)["train"]
    names = [c.response["tool_calls"][0]["function"]["name"] for c in traces[0].model_calls]
    first_submit = names.index("submit_batch")  # after recall, the page's planned batches and fetch_page
    assert first_submit == [c.response["tool_calls"][0]["function"]["name"] for c in traces[-1].model_calls].index("submit_batch")
    first_batches = Counter()
    for row in rows:
        call = row["completion"][0]["tool_calls"][0]["function"]
        arguments = json.loads(call["arguments"])
        if call["name"] == "submit_batch" and arguments["batch_id"] == 1 and row["position"] == first_submit:
            first_batches[len(arguments["record_ids"])] += 1
    assert first_batches == {10: 12, 25: 2}


def test_balancing_keeps_the_proportion_of_replies_to_one_state() -> None:
    """Twelve crm-migration episodes from an expert that plays some of them lean: all share the
    opening prompt, which dedupes to one row per reply; balanced, the opening is taught in the
    episodes' proportion (recall in the full ones, the plan's commit in the lean ones), not 1 to 1."""
    from evoharness_bpe.lab.envs import make_env
    from evoharness_bpe.lab.policies import ExpertPolicy
    from evoharness_bpe.lab.runner.core import run_episode

    config = EpisodeConfig(harness="bpe", window=4, dashboard_tokens=160, spec_style="compact")
    traces, lean = [], 0
    for seed in range(12):
        env = make_env("crm-migration", 1)
        policy = ExpertPolicy(env, lean_rate=0.3, seed=0)
        traces.append(run_episode(env, policy, None, config.model_copy(update={"seed": seed})))
        lean += policy.lean
    assert 0 < lean < 6
    rows = traces_to_sft_dataset(traces, eval_fraction=0.0, balance_positions=True)["train"]
    openings = Counter(row["completion"][0]["tool_calls"][0]["function"]["name"] for row in rows if row["position"] == 0)
    assert openings == {"recall": 12 - lean, "commit": lean}
