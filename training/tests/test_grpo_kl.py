"""GRPO's KL term (--grpo-beta): the SFT adapter trains against a frozen copy of itself."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from evoharness_bpe.exceptions import UserError


def test_grpo_beta_is_checked_and_reaches_trls_config(tmp_path: Path) -> None:
    from evoharness_bpe_training.reproduce_config import load_reproduce_preset, shared_stages
    from evoharness_bpe_training.reproduce_training import grpo_arguments
    from evoharness_bpe_training.tiny import build_tiny_tokenizer

    with pytest.raises(UserError, match="--grpo-beta must be 0 or more"):
        load_reproduce_preset("tiny", out=str(tmp_path), model="smollm2-135m", lora_r=4, grpo_beta=-0.1)
    with pytest.raises(UserError, match="without LoRA"):
        load_reproduce_preset("tiny", out=str(tmp_path), grpo_beta=0.1)  # the student trains every weight
    config = load_reproduce_preset("tiny", out=str(tmp_path), model="smollm2-135m", lora_r=4, grpo_beta=0.04)
    assert grpo_arguments(config, tmp_path, "fp32", build_tiny_tokenizer(512)).beta == 0.04
    assert "grpo-train" not in shared_stages({"grpo_beta": 0.0}, {"grpo_beta": 0.04})  # a fork retrains GRPO only
    assert "sft-train" in shared_stages({"grpo_beta": 0.0}, {"grpo_beta": 0.04})


@pytest.mark.slow
def test_grpo_beta_trains_the_adapter_against_a_frozen_copy_of_itself(expert_trace, tmp_path: Path) -> None:
    """The real GRPOTrainer on a tiny model wrapped in a LoRA adapter that differs from the base
    (as after SFT): with β > 0 the reference is a copy of that adapter, which stays as it was while
    the adapter trains, and every update logs a finite KL."""
    import torch
    from peft import get_peft_model

    from evoharness_bpe import TraceWriter
    from evoharness_bpe_training.continuation import consulting_states, state_rows
    from evoharness_bpe_training.reproduce_config import load_reproduce_preset
    from evoharness_bpe_training.reproduce_episodes import policy_for
    from evoharness_bpe_training.reproduce_training import lora_for, train_grpo
    from evoharness_bpe_training.tiny import build_tiny_model

    config = load_reproduce_preset("tiny", out=str(tmp_path), model="smollm2-135m", lora_r=4, grpo_beta=0.5, window=4,
                                   dashboard_tokens=120, max_steps=30, grpo_steps=2, grpo_states_per_step=2, grpo_generations=3,
                                   grpo_skip_samples=1, grpo_continuation_calls=2, max_new_tokens=16,
                                   grpo_lr_schedule="constant", grpo_learning_rate=5e-2)
    base, tokenizer = build_tiny_model(layers=1, vocab_size=512)
    model = get_peft_model(base, lora_for(base, config))
    torch.manual_seed(0)
    for name, parameter in model.named_parameters():
        if "lora_B" in name:  # LoRA starts at B = 0, the base model itself; an SFT adapter does not
            parameter.data.normal_(0.0, 0.05)
    sft = {name: parameter.detach().clone() for name, parameter in model.named_parameters() if ".default." in name}
    with TraceWriter(tmp_path / "grpo-states.jsonl") as writer:
        writer.write(expert_trace)
    player = policy_for(model, tokenizer, config)
    states = consulting_states(state_rows([expert_trace], player.render_prompt))[:2]

    trained, _ = train_grpo(model, tokenizer, states, config, tmp_path, "fp32", lambda line: None)

    assert "ref" in trained.peft_config
    parameters = dict(trained.named_parameters())
    assert all(torch.equal(parameters[name.replace(".default.", ".ref.")], before) for name, before in sft.items())
    assert any(not torch.equal(parameters[name], before) for name, before in sft.items())
    rows = [json.loads(line) for line in (tmp_path / "grpo" / "metrics.jsonl").read_text().splitlines()]
    kl = [row["kl"] for row in rows if "kl" in row]
    assert len(kl) == config.grpo_steps and all(math.isfinite(value) for value in kl)
