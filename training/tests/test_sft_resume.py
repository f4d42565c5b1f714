"""SFT stopped after a checkpoint and resumed from it: the steps after the save trained again, the
same adapter and the same log as a training never stopped."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from transformers import TrainerCallback

from evoharness_bpe_training.datasets import traces_to_sft_dataset


class _StepCounter(TrainerCallback):
    def __init__(self) -> None:
        self.steps: list[int] = []

    def on_step_end(self, args, state, control, **kwargs):  # noqa: ANN001 - transformers' signature
        self.steps.append(state.global_step)


class _StopAtLog(TrainerCallback):
    """Ctrl-C once step `step` is logged (its line written to the metrics file, which logs first)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_log(self, args, state, control, **kwargs):  # noqa: ANN001 - transformers' signature
        if state.global_step == self.step:
            raise KeyboardInterrupt


def _losses(path: Path) -> dict[int, float]:
    lines = [json.loads(line) for line in path.read_text("utf-8").splitlines()]
    steps = [line["step"] for line in lines if "loss" in line]
    assert len(steps) == len(set(steps)), f"a step logged twice: {steps}"
    return {line["step"]: line["loss"] for line in lines if "loss" in line}


@pytest.mark.slow
def test_a_resumed_sft_trains_only_the_steps_after_its_save_and_ends_where_an_unstopped_one_does(
        tmp_path: Path, sft_traces, tiny_lora_model) -> None:
    from safetensors.torch import load_file

    from evoharness_bpe_training.checkpoints import last_checkpoint
    from evoharness_bpe_training.sft import SFTRecipeConfig, run_sft

    dataset = traces_to_sft_dataset(sft_traces, eval_fraction=0.0)

    def recipe(name: str, **saving) -> SFTRecipeConfig:
        return SFTRecipeConfig(output_dir=str(tmp_path / name), num_train_epochs=3, learning_rate=1e-2,
                               per_device_train_batch_size=1, gradient_accumulation_steps=2, eval_fraction=0.0,
                               logging_steps=1, report_to="none", seed=0, disable_tqdm=True,
                               activation_checkpointing=False, **({"save_strategy": "no"} | saving))

    def train(config: SFTRecipeConfig, *callbacks: TrainerCallback):
        model, tokenizer = tiny_lora_model(layers=4, top_layers=1)
        return run_sft(config, dataset=dataset, model=model, tokenizer=tokenizer, peft_config=None, quiet=True,
                       callbacks=list(callbacks))

    whole_counter = _StepCounter()
    whole = train(recipe("whole"), whole_counter)
    total = whole_counter.steps[-1]
    assert total >= 6

    checkpoints = tmp_path / "checkpoints"
    saving = {"save_strategy": "steps", "save_steps": 2, "save_total_limit": 1, "checkpoint_dir": str(checkpoints)}
    with pytest.raises(KeyboardInterrupt):  # stopped at step 5, after the save of step 4
        train(recipe("stopped", **saving), _StopAtLog(5))
    assert max(json.loads(line)["step"] for line in (tmp_path / "stopped" / "metrics.jsonl").read_text("utf-8").splitlines()) == 5
    assert not (tmp_path / "stopped" / "adapter").exists()  # the checkpoints went apart from the output folder
    resume_from = last_checkpoint(checkpoints)
    assert resume_from is not None and Path(resume_from).name == "checkpoint-4"

    resumed_counter = _StepCounter()
    resumed = train(recipe("stopped", **saving, resume_from_checkpoint=resume_from), resumed_counter)
    assert resumed_counter.steps == list(range(5, total + 1))  # steps 1-4 came from the save

    adapters = [load_file(str(result.adapter_dir / "adapter_model.safetensors")) for result in (whole, resumed)]
    assert adapters[0].keys() == adapters[1].keys()
    assert max((adapters[0][k] - adapters[1][k]).abs().max().item() for k in adapters[0]) < 1e-6
    assert any(adapters[1][k].abs().max() > 0 for k in adapters[1] if "lora_B" in k)  # it trained
    whole_log, resumed_log = _losses(tmp_path / "whole" / "metrics.jsonl"), _losses(tmp_path / "stopped" / "metrics.jsonl")
    assert sorted(resumed_log) == list(range(1, total + 1))  # each step once: the save's log, then the steps after it
    # (step 5 of the stopped try is dropped from the log with the rest of what came after the save)
    assert resumed_log == pytest.approx(whole_log, rel=1e-5)


def test_run_sft_refuses_to_resume_from_what_is_not_a_whole_save_before_loading_a_model(tmp_path: Path, sft_traces) -> None:
    from evoharness_bpe.exceptions import UserError
    from evoharness_bpe_training.sft import SFTRecipeConfig, run_sft

    dataset = traces_to_sft_dataset(sft_traces, eval_fraction=0.0)
    saves = tmp_path / "saves"
    (saves / "checkpoint-4").mkdir(parents=True)  # a save stopped before its trainer state
    for resume in (True, str(saves / "checkpoint-4"), str(saves / "checkpoint-8")):
        config = SFTRecipeConfig(output_dir=str(tmp_path / "out"), checkpoint_dir=str(saves), eval_fraction=0.0,
                                 report_to="none", resume_from_checkpoint=resume)
        with pytest.raises(UserError, match="checkpoint"):
            run_sft(config, dataset=dataset)
    assert not (tmp_path / "out").exists()
