"""The reproduction's pretrained-model path: a local model folder fine-tuned with LoRA on its top
layer, through SFT and GRPO, each stage leaving an adapter with its card."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


@pytest.mark.slow
def test_a_local_model_trains_top_layer_lora_through_every_stage(tiny_dir: Path, tmp_path: Path) -> None:
    from evoharness_bpe.lab.policies.adapter import read_adapter_card
    from evoharness_bpe_training.reproduce import reproduce
    from evoharness_bpe_training.reproduce_config import load_reproduce_preset

    out = tmp_path / "run"
    config = load_reproduce_preset("tiny", out=str(out), model=str(tiny_dir), lora_r=4, lora_alpha=8, lora_layers=1,
                                   max_invalid_run=2)
    lines: list[str] = []
    summary = reproduce(config, log=lines.append)

    assert [r["stage"] for r in summary["results"]] == ["raw", "sft", "grpo"]
    for stage in ("sft", "grpo"):
        folder = out / stage / "model"
        adapter = json.loads((folder / "adapter_config.json").read_text("utf-8"))
        # LoRA on the top decoder layer only: the tiny model has two
        assert adapter["layers_to_transform"] == [1]
        card = read_adapter_card(folder)
        assert card["base"] == str(tiny_dir)
        assert card["produced_by"]["stage"] == stage
        assert card["episode"]["max_invalid_run"] == 2
    assert summary["config"]["lora_layers"] == 1
    assert (out / "grpo" / "rewards.jsonl").read_text("utf-8").strip(), "GRPO scored no continuation"


@pytest.mark.parametrize("layout", ["compact", "compact-tools-first"])
def test_the_chat_template_setting_chooses_the_prompt_layout(tiny_dir: Path, tmp_path: Path, layout: str) -> None:
    from evoharness_bpe_training.grpo import CHAT_TEMPLATE_KWARGS
    from evoharness_bpe_training.reproduce import _built_or_loaded
    from evoharness_bpe_training.reproduce_config import load_reproduce_preset

    config = load_reproduce_preset("tiny", out=str(tmp_path), model=str(tiny_dir), chat_template=layout)
    _, tokenizer = _built_or_loaded(config, tmp_path, None)
    tools = [{"type": "function", "function": {"name": "finish", "description": "End.", "parameters": {"type": "object", "properties": {}}}}]
    text = tokenizer.apply_chat_template([{"role": "system", "content": "DASHBOARD"}, {"role": "user", "content": "go"}], tools=tools,
                                         tokenize=False, **CHAT_TEMPLATE_KWARGS)
    assert "finish() End." in text  # the compact tool section either way
    assert (text.index("# Tools") < text.index("DASHBOARD")) == (layout == "compact-tools-first")
