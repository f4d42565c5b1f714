"""The frozen layers below LoRA handed up from a cache: the same training, the layers run once per row."""

from __future__ import annotations

from pathlib import Path

import pytest

from evoharness_bpe_training.datasets import traces_to_sft_dataset


def test_frozen_bottom_counts_the_layers_below_lora_and_none_with_dropout(tiny_lora_model) -> None:
    from evoharness_bpe_training.frozen_layers import frozen_bottom_layers

    model, _ = tiny_lora_model(layers=4, top_layers=1)
    assert frozen_bottom_layers(model) == 3
    everywhere, _ = tiny_lora_model(layers=4, top_layers=0)
    assert frozen_bottom_layers(everywhere) == 0
    model.base_model.model.model.layers[1].self_attn.attention_dropout = 0.1  # random in training: no cache from layer 1 on
    assert frozen_bottom_layers(model) == 1


def test_a_cached_row_skips_the_frozen_layers_and_gives_the_same_loss_and_gradients(tiny_lora_model) -> None:
    import torch

    from evoharness_bpe_training.frozen_layers import cache_frozen_layers

    model, _ = tiny_lora_model(layers=4, top_layers=1)
    model.train()
    ids = torch.randint(5, 1000, (1, 40), generator=torch.Generator().manual_seed(0))
    other = torch.randint(5, 1000, (1, 40), generator=torch.Generator().manual_seed(1))

    def loss_and_grads(batch):
        model.zero_grad()
        loss = model(input_ids=batch, labels=batch, use_cache=False).loss  # as trainers call it
        loss.backward()
        return loss.item(), [p.grad.clone() for p in model.parameters() if p.requires_grad]

    expected, expected_grads = loss_and_grads(ids)
    calls = []
    frozen = model.base_model.model.model.layers[0]
    frozen.mlp.register_forward_hook(lambda *_: calls.append(1))
    with cache_frozen_layers(model) as cache:
        assert cache is not None and len(cache.layers) == 3
        first = loss_and_grads(ids)
        runs_after_first = len(calls)
        again = loss_and_grads(ids)
        assert len(calls) == runs_after_first  # the frozen layers did not run for the row seen before
        loss_and_grads(other)
        assert len(calls) == runs_after_first + 1  # a new row runs them
        assert (cache.hits, cache.misses) == (1, 2)
    for loss, grads in (first, again):
        assert loss == expected
        assert all(torch.equal(g, e) for g, e in zip(grads, expected_grads))
    assert "forward" not in frozen.__dict__  # the layers' own forwards are back
    with torch.no_grad():
        assert model(input_ids=ids, labels=ids).loss.item() == expected


def test_generation_with_a_kv_cache_runs_the_layers_as_they_are(tiny_lora_model) -> None:
    import torch

    from evoharness_bpe_training.frozen_layers import cache_frozen_layers

    model, _ = tiny_lora_model(layers=4, top_layers=1)
    model.eval()
    ids = torch.randint(5, 1000, (1, 12), generator=torch.Generator().manual_seed(0))
    expected = model.generate(input_ids=ids, max_new_tokens=6, do_sample=False)
    with cache_frozen_layers(model) as cache:
        assert torch.equal(model.generate(input_ids=ids, max_new_tokens=6, do_sample=False), expected)
        assert cache.hits == 0 and cache.kept_bytes == 0


@pytest.mark.slow
def test_sft_with_the_cache_trains_the_same_adapter_and_runs_the_frozen_layers_once_per_row(tmp_path: Path, sft_traces, tiny_lora_model) -> None:
    from safetensors.torch import load_file

    from evoharness_bpe_training.sft import SFTRecipeConfig, run_sft

    dataset = traces_to_sft_dataset(sft_traces, eval_fraction=0.0)
    adapters, results = {}, {}
    for cached, rows_a_pass in ((False, 1), (True, 1), ("batched", 2)):
        model, tokenizer = tiny_lora_model(layers=4, top_layers=1)
        config = SFTRecipeConfig(output_dir=str(tmp_path / str(cached)), num_train_epochs=3, learning_rate=1e-2,
                                 per_device_train_batch_size=rows_a_pass, gradient_accumulation_steps=2 // rows_a_pass,
                                 eval_fraction=0.0, logging_steps=1, report_to="none", save_strategy="no", seed=0,
                                 disable_tqdm=True, activation_checkpointing=False, cache_frozen_layers=bool(cached))
        result = run_sft(config, dataset=dataset, model=model, tokenizer=tokenizer, peft_config=None, quiet=True)
        adapters[cached] = load_file(str(result.adapter_dir / "adapter_model.safetensors"))
        results[cached] = result
    assert "frozen_layers_cached" not in results["batched"].metrics  # batches of several rows: no cache
    rows = results[True].rows["train"]["kept"]
    assert results[True].metrics["frozen_layers_cached"] == 3
    assert results[True].metrics["frozen_layers_cache_hits"] == 2 * rows  # epochs 2 and 3
    assert "frozen_layers_cached" not in results[False].metrics
    assert results[True].metrics["train_loss"] == pytest.approx(results[False].metrics["train_loss"], rel=1e-6)
    assert adapters[True].keys() == adapters[False].keys()
    assert max((adapters[True][k] - adapters[False][k]).abs().max().item() for k in adapters[True]) < 1e-6
    assert any(adapters[True][k].abs().max() > 0 for k in adapters[True] if "lora_B" in k)  # it trained
