"""The speed choices of a run: bf16 where native, LoRA on the top layers only, inference copies."""

from __future__ import annotations

import pytest

from evoharness_bpe.exceptions import UserError


def test_lora_on_the_top_layers_trains_only_those(tiny_dir) -> None:
    from peft import get_peft_model
    from transformers import AutoModelForCausalLM

    from evoharness_bpe_training.speed import lora_config

    base = AutoModelForCausalLM.from_pretrained(tiny_dir)
    layers = base.config.num_hidden_layers
    model = get_peft_model(base, lora_config(base, r=4, alpha=8, top_layers=1))
    trained = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trained and all(f"layers.{layers - 1}." in n and "lora_" in n for n in trained)
    assert any(n.endswith("q_proj.lora_A.default.weight") for n in trained)
    assert any("mlp" in n for n in trained)  # every linear layer of the block, as all-linear
    with pytest.raises(UserError, match="--lora-layers must be between 0"):
        lora_config(base, r=4, alpha=8, top_layers=layers + 1)


def test_inference_copy_is_merged_frozen_and_leaves_the_trained_model_alone(tiny_dir) -> None:
    import torch
    from peft import get_peft_model
    from transformers import AutoModelForCausalLM

    from evoharness_bpe_training.speed import inference_copy, lora_config

    base = AutoModelForCausalLM.from_pretrained(tiny_dir)
    model = get_peft_model(base, lora_config(base, r=4, alpha=8))
    for name, p in model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.5)  # an adapter that changes the outputs
    model.train()
    ids = torch.tensor([[1, 2, 3, 4]])
    copy = inference_copy(model, "fp32")
    assert not hasattr(copy, "peft_config") and not copy.training
    assert not any(p.requires_grad for p in copy.parameters())
    with torch.no_grad():
        model.eval()
        assert torch.allclose(copy(ids).logits, model(ids).logits, atol=1e-4)
    assert any(p.requires_grad for p in model.parameters()) and hasattr(model, "peft_config")
    assert inference_copy(model, "bf16").dtype == torch.bfloat16


def test_inference_copy_runs_its_own_weights_under_the_trainers_forward_patches(tiny_dir) -> None:
    """GRPO patches the trained model's forward (TRL's fused LM head; accelerate's autocast under
    mixed precision); a copy must not call back into the model it was copied from."""
    import torch
    from accelerate import Accelerator
    from peft import get_peft_model
    from transformers import AutoModelForCausalLM
    from trl.trainer.utils import add_fused_lm_head

    from evoharness_bpe_training.speed import inference_copy, lora_config

    base = AutoModelForCausalLM.from_pretrained(tiny_dir)
    model = get_peft_model(base, lora_config(base, r=4, alpha=8))
    add_fused_lm_head(model.get_base_model())
    model = Accelerator(cpu=True).prepare_model(model)
    model.eval()
    ids = torch.tensor([[1, 2, 3, 4]])
    copy = inference_copy(model, "fp32")
    with torch.no_grad():
        before = copy(ids).logits.clone()
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter))  # the trained model moves on
        assert not torch.allclose(model(ids).logits, before, atol=1e-3)
        assert torch.equal(copy(ids).logits, before)


def test_precision_resolves_by_the_machine(monkeypatch) -> None:
    from evoharness_bpe_training import speed

    monkeypatch.setattr(speed, "bf16_supported", lambda: False)
    assert speed.resolve_precision("auto") == "fp32" and speed.resolve_precision("fp32") == "fp32"
    monkeypatch.delenv("EVOHARNESS_FORCE_BF16", raising=False)
    with pytest.raises(UserError, match="no native bf16"):
        speed.resolve_precision("bf16")
    monkeypatch.setattr(speed, "bf16_supported", lambda: True)
    assert speed.resolve_precision("auto") == "bf16"
    with pytest.raises(UserError, match="--precision takes"):
        speed.resolve_precision("fp8")


def test_the_fused_lm_head_scores_only_labelled_positions_on_cpu_with_the_same_loss(tiny_dir, monkeypatch) -> None:
    import torch
    from transformers import AutoModelForCausalLM
    from trl.trainer import utils
    from trl.trainer.utils import add_fused_lm_head

    from evoharness_bpe_training.speed import score_trained_positions_only

    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    add_fused_lm_head(model, outputs=("log_probs", "entropy", "is_top1"))
    ids = torch.arange(1, 41).reshape(2, 20)
    labels = ids.clone()
    labels[:, :16] = -100  # a long prompt, a short reply
    scored: list[int] = []
    apply = utils._ChunkedLogProbFunction.apply

    def counting(hidden, *args):
        scored.append(hidden.shape[0])
        return apply(hidden, *args)

    monkeypatch.setattr(utils._ChunkedLogProbFunction, "apply", counting)
    from trl.kernels.chunked_logprob import _use_triton as trl_choice

    monkeypatch.setattr(utils, "_use_triton", trl_choice)  # TRL's own choice (a run_sft earlier in the test process adjusted it)
    every = model(input_ids=ids, labels=labels, fused_lm_head=True)
    assert score_trained_positions_only() and score_trained_positions_only()  # idempotent
    compact = model(input_ids=ids, labels=labels, fused_lm_head=True)
    assert scored == [2 * 19, 2 * 4]  # every shifted position, then the four labelled ones of each row
    torch.testing.assert_close(compact.log_probs, every.log_probs)
    torch.testing.assert_close(compact.entropy, every.entropy)
