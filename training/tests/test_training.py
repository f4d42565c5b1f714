"""run_sft and run_grpo on the tiny model: adapters that load and generate, logged rollouts."""

from __future__ import annotations

import json

import pytest

from evoharness_bpe_training.datasets import traces_to_sft_dataset
from evoharness_bpe_training.metrics import read_jsonl
from evoharness_bpe_training.presets import get_preset

pytestmark = pytest.mark.slow  # SFT and GRPO runs on the tiny model


@pytest.fixture(scope="module")
def sft_run(tmp_path_factory, tiny_dir, sft_traces):
    from evoharness_bpe_training.models import load_model_and_tokenizer
    from evoharness_bpe_training.sft import run_sft

    dataset = traces_to_sft_dataset(sft_traces, eval_fraction=0.25)
    out = tmp_path_factory.mktemp("sft")
    config = get_preset("tiny").sft_config(output_dir=str(out), max_steps=2)
    model, tokenizer = load_model_and_tokenizer("tiny", cache_dir=tiny_dir)
    return run_sft(config, dataset=dataset, model=model, tokenizer=tokenizer)


def test_run_sft_saves_an_adapter_that_loads_and_generates(sft_run, tiny_dir) -> None:
    import torch
    from peft import PeftModel
    from safetensors.torch import load_file

    from evoharness_bpe_training.models import load_model_and_tokenizer

    adapter = sft_run.adapter_dir
    assert (adapter / "adapter_config.json").exists()
    weights = load_file(adapter / "adapter_model.safetensors")
    lora_b = [w for name, w in weights.items() if "lora_B" in name]
    assert lora_b and any(w.abs().sum() > 0 for w in lora_b)  # B starts at zero: training moved it
    assert json.loads((adapter / "adapter_config.json").read_text())["r"] == 8
    log = read_jsonl(sft_run.output_dir / "metrics.jsonl")
    assert [r["step"] for r in log if "loss" in r] == [1, 2]
    assert "eval_loss" in json.loads((sft_run.output_dir / "metrics.json").read_text())

    base, tokenizer = load_model_and_tokenizer("tiny", cache_dir=tiny_dir)
    model = PeftModel.from_pretrained(base, adapter)
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "Open locker 1."}], add_generation_prompt=True, return_tensors="pt", return_dict=True)
    with torch.no_grad():
        out = model.generate(**prompt, max_new_tokens=8, do_sample=False)
    assert out.shape[1] > prompt["input_ids"].shape[1]


def test_run_grpo_rolls_out_in_the_environment_and_logs_harness_use(sft_run, tiny_dir, tmp_path, locker_env_cls) -> None:
    from evoharness_bpe_training.grpo import run_grpo
    from evoharness_bpe_training.models import load_model_and_tokenizer

    config = get_preset("tiny").grpo_config(output_dir=str(tmp_path), adapter=str(sft_run.adapter_dir), difficulties="1,2", seeds=2)
    model, tokenizer = load_model_and_tokenizer("tiny", cache_dir=tiny_dir)
    result = run_grpo(config, env_factory=locker_env_cls, model=model, tokenizer=tokenizer)
    log = [r for r in read_jsonl(tmp_path / "metrics.jsonl") if "reward" in r]
    assert [r["step"] for r in log] == [1, 2]
    for row in log:
        assert "rewards/cost_aware_reward/mean" in row and "harness/meta_calls" in row and "harness/track" in row
    episodes = read_jsonl(tmp_path / "episodes.jsonl")
    assert len(episodes) == 4 and {e["step"] for e in episodes} == {1, 2}
    assert all(e["harness_tokens"] > 0 and set(e["by_action"]) == {"track", "commit", "recall", "note"} for e in episodes)
    assert {e["difficulty"] for e in episodes} <= {1, 2}
    harness = result.metrics["harness"]
    assert [s["step"] for s in harness["by_step"]] == [1, 2]
    assert (tmp_path / "harness_annealing.png").exists() and (result.adapter_dir / "adapter_config.json").exists()


def test_loss_is_on_the_assistant_reply_only(sft_traces, tiny_dir, tmp_path) -> None:
    from trl import SFTTrainer

    from evoharness_bpe_training.models import load_model_and_tokenizer

    dataset = traces_to_sft_dataset(sft_traces, eval_fraction=0.0)["train"].select([1])
    config = get_preset("tiny").sft_config(output_dir=str(tmp_path))
    model, tokenizer = load_model_and_tokenizer("tiny", cache_dir=tiny_dir)
    trainer = SFTTrainer(model=model, args=config.sft_config(), train_dataset=dataset.select_columns(["prompt", "completion", "tools"]),
                         processing_class=tokenizer, peft_config=config.lora_config())
    row = trainer.train_dataset[0]
    trained = tokenizer.decode([label for label in row["labels"] if label != -100])
    call = dataset[0]["completion"][0]["tool_calls"][0]["function"]
    assert "<tool_call>" in trained and trained.rstrip().endswith("<|im_end|>") and call["name"] in trained and call["arguments"] in trained
    assert "</bpe-dashboard>" not in trained and "# Tools" not in trained


def test_the_opening_weight_weighs_the_first_reply_tokens_of_each_row() -> None:
    import torch

    from evoharness_bpe_training.sft import opening_weights

    mask = torch.tensor([[False, False, True, True, True, False], [False, True, True, True, True, True]])
    assert opening_weights(mask, 2, 4.0).tolist() == [[0, 0, 4, 4, 1, 0], [0, 4, 4, 1, 1, 1]]
    assert opening_weights(mask, 2, 1.0).tolist() == mask.float().tolist()


def test_the_trainer_loss_weighs_each_replys_opening(tiny_dir, sft_traces, tmp_path) -> None:
    import torch

    from evoharness_bpe_training import traces_to_sft_dataset
    from evoharness_bpe_training.models import load_model_and_tokenizer
    from evoharness_bpe_training.presets import get_preset
    from evoharness_bpe_training.sft import CompletionSafeSFTTrainer, opening_weights

    dataset = traces_to_sft_dataset(sft_traces, eval_fraction=0.0)["train"].select(range(2))
    config = get_preset("tiny").sft_config(output_dir=str(tmp_path), per_device_train_batch_size=2, use_peft=False)
    model, tokenizer = load_model_and_tokenizer("tiny", cache_dir=tiny_dir)
    losses = []
    for weight in (1.0, 6.0):
        trainer = CompletionSafeSFTTrainer(model=model, args=config, train_dataset=dataset, processing_class=tokenizer,
                                           opening_weight=weight, opening_tokens=3)
        batch = next(iter(trainer.get_train_dataloader()))
        with torch.no_grad():
            losses.append(float(trainer.compute_loss(trainer.model, dict(batch))))
            out = trainer.model(**batch, fused_lm_head=True)
    weights = opening_weights(out.label_mask, 3, 6.0)
    expected = float((-out.log_probs * weights).sum() / out.label_mask.sum())
    plain = float(-out.log_probs.sum() / out.label_mask.sum())
    assert abs(losses[0] - plain) < 1e-4 and abs(losses[1] - expected) < 1e-4
    assert losses[1] > losses[0]  # the opening's tokens count six times


def test_the_reproduction_weighs_as_many_reply_tokens_as_asked(tmp_path) -> None:
    from evoharness_bpe.exceptions import UserError
    from evoharness_bpe_training.reproduce_config import ReproduceConfig
    from evoharness_bpe_training.reproduce_training import sft_recipe

    config = ReproduceConfig(sft_opening_weight=10.0, sft_opening_tokens=12, sft_batch_size=4)
    recipe = sft_recipe(config, tmp_path, "fp32", lora=True)
    assert (recipe.opening_weight, recipe.opening_tokens) == (10.0, 12)
    assert (recipe.per_device_train_batch_size, recipe.gradient_accumulation_steps) == (1, 4)  # LoRA: one row a pass
    assert sft_recipe(ReproduceConfig(), tmp_path, "fp32", lora=False).opening_tokens == 24  # the default
    with pytest.raises(UserError, match="--sft-opening-tokens"):
        ReproduceConfig(sft_opening_tokens=0)
