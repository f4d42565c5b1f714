"""A trained LoRA adapter as a policy: the base model, the adapter merged in, and the prompt format
it was trained with.

An adapter folder (what `evoharness reproduce` saves after each training stage) holds PEFT's
``adapter_config.json`` and weights, and an adapter card, ``evoharness.json``:

- ``base`` — the base model (``smollm2-135m``, the embedded GGUF, or a local folder);
- ``episode`` — the episode settings the adapter was trained and evaluated under (harness, spec
  style, window, dashboard budget, system prompt), applied to every episode it plays;
- ``policy`` — how replies are rendered and read: the chat template itself, its arguments, the
  tool-call prefill;
- ``produced_by`` — the command, config and seeds that made it.

``torch``, ``transformers`` and ``peft`` are imported when the policy is built.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ...exceptions import UserError

__all__ = ["ADAPTER_CARD", "EPISODE_FIELDS", "read_adapter_card", "adapter_policy"]

ADAPTER_CARD = "evoharness.json"
EPISODE_FIELDS = ("harness", "max_steps", "window", "dashboard_tokens", "system_prompt", "spec_style", "max_invalid_run")
"""The episode settings an adapter card may fix."""


def read_adapter_card(folder: str | Path) -> dict[str, Any]:
    """The adapter card of `folder`, checked: a `UserError` names what is missing or wrong."""
    path = Path(folder)
    if not (path / "adapter_config.json").is_file():
        raise UserError(f"--adapter {folder}: no adapter_config.json there; pass the folder a training stage saved "
                        "(for example runs/miniature/sft/model)")
    try:
        card = json.loads((path / ADAPTER_CARD).read_text("utf-8"))
    except FileNotFoundError:
        raise UserError(f"--adapter {folder}: no {ADAPTER_CARD} (the base model and prompt format it was trained with)") from None
    except ValueError as exc:
        raise UserError(f"--adapter {folder}: {ADAPTER_CARD} is not valid JSON ({exc})") from None
    if not isinstance(card, dict) or not isinstance(card.get("episode"), dict) or not isinstance(card.get("policy"), dict):
        raise UserError(f"--adapter {folder}: {ADAPTER_CARD} needs `base`, `episode` and `policy` objects")
    unknown = set(card["episode"]) - set(EPISODE_FIELDS)
    if unknown:
        raise UserError(f"--adapter {folder}: {ADAPTER_CARD} sets unknown episode fields: {', '.join(sorted(unknown))}")
    return card


def adapter_policy(folder: str | Path, *, max_new_tokens: int = 224, with_adapter: bool = True) -> Any:
    """A `TransformersPolicy` playing the adapter in `folder` merged into its base model.

    With ``with_adapter=False`` it plays the base model alone under the same prompt format: the
    policy before training, for a like-for-like comparison with the trained one.
    """
    from .transformers import EMBEDDED_GGUF, INSTALL_EMBEDDED, TransformersPolicy, embedded_model_dir

    card = read_adapter_card(folder)
    try:
        import torch  # noqa: PLC0415
        from peft import PeftModel  # noqa: PLC0415
        from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: PLC0415
    except ImportError as exc:
        raise UserError(f"a trained adapter needs torch, transformers and peft: pip install 'evoharness-bpe-training' ({exc})") from exc
    base = str(card.get("base") or "smollm2-135m")
    kwargs: dict[str, Any] = {}
    if base in ("smollm2-135m", "smollm2"):
        location = embedded_model_dir()
        if location is None:
            raise UserError(f"the adapter's base model, the embedded SmolLM2, is not installed: {INSTALL_EMBEDDED}")
        kwargs["gguf_file"] = EMBEDDED_GGUF
    else:
        location = base
    model = AutoModelForCausalLM.from_pretrained(location, dtype=torch.float32, **kwargs)
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is not None:  # a GGUF file is dequantized on load; PEFT refuses a model still marked quantized
        quantizer.remove_quantization_config(model)
    tokenizer = AutoTokenizer.from_pretrained(location, **kwargs)
    policy_card = card["policy"]
    if policy_card.get("chat_template"):
        tokenizer.chat_template = str(policy_card["chat_template"])
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    played = PeftModel.from_pretrained(model, str(folder)).merge_and_unload() if with_adapter else model
    policy = TransformersPolicy(played, tokenizer=tokenizer, native_tools=True, max_new_tokens=max_new_tokens,
                                chat_template_kwargs=dict(policy_card.get("chat_template_kwargs") or {}),
                                one_line_calls=bool(policy_card.get("one_line_calls", True)),
                                **({"prefill": policy_card["prefill"]} if policy_card.get("prefill") else {}))
    policy.name = f"{Path(folder).name} (LoRA over {base})" if with_adapter else f"{base} (base of {Path(folder).name})"
    return policy
