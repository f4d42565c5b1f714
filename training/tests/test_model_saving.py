"""Saving a trained adapter over a base without ``config.json`` (a GGUF base, like the embedded SmolLM2)."""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

from evoharness_bpe_training.models import save_model_and_tokenizer

PEFT_NOTICE = "Could not find a config file"


def _adapter_over_configless_base(tiny_dir: Path, tmp_path: Path):
    from peft import get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from evoharness_bpe_training.speed import lora_config

    base_dir = tmp_path / "gguf-like-base"
    shutil.copytree(tiny_dir, base_dir)
    base = AutoModelForCausalLM.from_pretrained(base_dir)
    (base_dir / "config.json").unlink()  # what a base read from a .gguf file looks like to PEFT
    model = get_peft_model(base, lora_config(base, r=4, alpha=8, top_layers=1))
    return model, AutoTokenizer.from_pretrained(tiny_dir), base_dir


def _notices(save) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        save()
    return [str(w.message) for w in caught if PEFT_NOTICE in str(w.message)]


def test_saving_over_a_configless_base_keeps_the_adapter_without_peft_notice(tiny_dir: Path, tmp_path: Path) -> None:
    model, tokenizer, base_dir = _adapter_over_configless_base(tiny_dir, tmp_path)
    assert _notices(lambda: model.save_pretrained(tmp_path / "plain")), "PEFT no longer warns here; the filter can go"

    out = tmp_path / "adapter"
    assert _notices(lambda: save_model_and_tokenizer(model, tokenizer, out)) == []
    config = json.loads((out / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == str(base_dir)
    assert (out / "adapter_model.safetensors").stat().st_size > 0
    assert (out / "tokenizer_config.json").exists()
    # the embeddings were neither targeted nor resized, so none is saved with the adapter
    from safetensors.torch import load_file

    assert not any("embed" in key for key in load_file(out / "adapter_model.safetensors"))


def test_other_warnings_of_a_save_still_reach_the_caller(tiny_dir: Path, tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_dir)

    class Noisy:
        def save_pretrained(self, folder):
            warnings.warn("something else went wrong")

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        save_model_and_tokenizer(Noisy(), tokenizer, tmp_path / "noisy")
    assert [str(w.message) for w in caught] == ["something else went wrong"]
