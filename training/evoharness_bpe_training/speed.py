"""Where a small model's time goes on a CPU, and the choices that save it.

- **bf16** where the CPU computes it natively (``avx512_bf16`` or AMX): training under autocast
  (fp32 master weights), inference on a bf16 copy of the weights (decode is memory-bound);
- **LoRA on the top layers only** (`lora_config`): the backward pass stops there;
- **one merged copy per policy for inference** (`inference_copy`): LoRA merged into the weights,
  in the inference dtype, without gradients, never the model being trained;
- **the LM head on the trained positions only** (`score_trained_positions_only`): TRL's fused head
  projects every position of a row off Triton devices; a reply is a few dozen of a row's ~900.
"""

from __future__ import annotations

import copy
import os
from typing import Any

from evoharness_bpe.exceptions import UserError

__all__ = ["PRECISIONS", "bf16_supported", "resolve_precision", "lora_config", "inference_copy", "decoder_layers",
           "score_trained_positions_only"]

PRECISIONS = ("auto", "bf16", "fp32")


def bf16_supported() -> bool:
    """True where bf16 runs natively: a CUDA device that has it, or a CPU with ``avx512_bf16`` / AMX."""
    import torch

    if torch.cuda.is_available():
        return bool(torch.cuda.is_bf16_supported())
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            flags = handle.read()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def resolve_precision(precision: str) -> str:
    """``bf16`` or ``fp32`` for a requested precision (``auto`` checks the machine)."""
    if precision not in PRECISIONS:
        raise UserError(f"--precision takes {', '.join(PRECISIONS)}, not {precision!r}")
    if precision == "auto":
        return "bf16" if bf16_supported() else "fp32"
    if precision == "bf16" and not bf16_supported() and os.environ.get("EVOHARNESS_FORCE_BF16") != "1":
        raise UserError("--precision bf16: this machine has no native bf16 (no avx512_bf16 or AMX, no CUDA bf16); "
                        "use --precision fp32 or auto")
    return precision


def decoder_layers(model: Any) -> int:
    """How many decoder layers `model` has (``num_hidden_layers`` of its config)."""
    config = getattr(model, "config", None)
    layers = getattr(config, "num_hidden_layers", None)
    if not layers:
        raise UserError(f"{type(model).__name__} has no num_hidden_layers in its config; LoRA layers cannot be chosen")
    return int(layers)


def lora_config(model: Any, *, r: int, alpha: int, top_layers: int = 0, dropout: float = 0.0) -> Any:
    """A PEFT `LoraConfig` on every linear layer, of the top `top_layers` decoder layers only
    (all of them for 0). The lower layers then need no backward pass."""
    from peft import LoraConfig

    total = decoder_layers(model)
    if top_layers < 0 or top_layers > total:
        raise UserError(f"--lora-layers must be between 0 (all) and {total}, got {top_layers}")
    if not top_layers:
        return LoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout, target_modules="all-linear", task_type="CAUSAL_LM")
    return LoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout, target_modules=_layer_linears(model), task_type="CAUSAL_LM",
                      layers_to_transform=list(range(total - top_layers, total)), layers_pattern="layers")


def _layer_linears(model: Any) -> list[str]:
    """The names of the linear layers inside the decoder layers (PEFT's "all-linear", spelt out:
    PEFT takes a layer range only with a list of names)."""
    import torch

    names = {name.rsplit(".", 1)[-1] for name, module in model.named_modules()
             if isinstance(module, torch.nn.Linear) and ".layers." in f".{name}"}
    if not names:
        raise UserError(f"{type(model).__name__} has no linear layers under `layers`; LoRA layers cannot be chosen")
    return sorted(names)


def _own_forward(model: Any) -> None:
    """Give every module of `model` (a copy) its class's own ``forward`` back.

    Trainers set ``forward`` on the instance: accelerate wraps it in autocast for mixed precision,
    TRL's fused LM head (GRPO, SFT) replaces it with a closure over the original's bound forward.
    A deep copy keeps both, so the copy would run the *original* model, in its training precision,
    against a cache in the copy's. Modules dispatched by accelerate hooks (``_hf_hook``) keep theirs.
    """
    for module in model.modules():
        if "_hf_hook" not in module.__dict__:
            module.__dict__.pop("forward", None)
            module.__dict__.pop("_original_forward", None)


def inference_copy(model: Any, precision: str) -> Any:
    """A copy of `model` for generation: LoRA merged in, weights in `precision`, eval mode, no gradients."""
    import torch

    clone = copy.deepcopy(model)
    _own_forward(clone)
    if hasattr(clone, "merge_and_unload"):
        clone = clone.merge_and_unload()
    clone = clone.to(torch.bfloat16 if precision == "bf16" else torch.float32)
    clone.eval()
    for parameter in clone.parameters():
        parameter.requires_grad_(False)
    return clone


def score_trained_positions_only() -> bool:
    """Make TRL's fused LM head score only the positions that carry a label on a CPU, as it does on
    Triton devices; True when it does (idempotent; other devices keep TRL's choice).

    Off Triton devices TRL (``trl.trainer.utils``) projects every position through the LM head and
    masks afterwards, so that tile shapes stay fixed for graph compilers. In eager CPU training that
    is wasted work: on an 890-token row with a 60-token reply the head, forward and backward, took
    37% of a LoRA step. The losses are the same either way.
    """
    try:
        from trl.trainer import utils
    except ImportError:
        return False
    chooser = getattr(utils, "_use_triton", None)
    if chooser is None:  # another TRL: nothing to adjust
        return False
    if getattr(chooser, "scores_cpu_compactly", False):
        return True

    def compact_on_cpu(device: Any) -> bool:
        return device.type == "cpu" or chooser(device)

    compact_on_cpu.scores_cpu_compactly = True  # type: ignore[attr-defined]
    utils._use_triton = compact_on_cpu
    return True
