"""`TransformersPolicy`: a local Hugging Face model as an evoharness `Policy`."""

from __future__ import annotations

import json
import uuid
from typing import Any

from evoharness_bpe.policy import ChatMessage

__all__ = ["TransformersPolicy"]


class TransformersPolicy:
    """Answers with a causal LM through its chat template; tool calls parsed by the tokenizer.

    Replies it cannot parse come back as plain content (the runner counts them as invalid),
    never as an exception, as the `Policy` contract asks.
    """

    def __init__(self, model: Any, tokenizer: Any, *, max_new_tokens: int = 256, temperature: float = 0.0) -> None:
        from trl.chat_template_utils import add_response_schema

        self.model = model
        self.tokenizer = add_response_schema(tokenizer) if getattr(tokenizer, "response_template", None) is None and getattr(tokenizer, "response_schema", None) is None else tokenizer
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature

    def complete(self, messages: list[ChatMessage], tools: list[dict[str, Any]]) -> ChatMessage:
        import torch

        inputs = self.tokenizer.apply_chat_template(messages, tools=tools or None, add_generation_prompt=True, return_tensors="pt", return_dict=True)
        inputs = {k: v.to(self.model.device) for k, v in inputs.items()}
        sampling = {"do_sample": True, "temperature": self.temperature} if self.temperature > 0 else {"do_sample": False}
        with torch.no_grad():
            output = self.model.generate(**inputs, max_new_tokens=self.max_new_tokens, pad_token_id=self.tokenizer.pad_token_id, **sampling)
        new = output[0][inputs["input_ids"].shape[1]:]
        text = self.tokenizer.decode(new, skip_special_tokens=False)
        try:
            parsed = self.tokenizer.parse_response(text, prefix="")
        except Exception:  # noqa: BLE001 - an unparsable reply is the model's, not ours: return it as text
            parsed = None
        if not isinstance(parsed, dict) or not parsed.get("tool_calls"):
            clean = self.tokenizer.decode(new, skip_special_tokens=True).strip()
            return {"role": "assistant", "content": clean}
        calls = []
        for call in parsed["tool_calls"]:
            fn = call.get("function", call)
            args = fn.get("arguments", {})
            calls.append({
                "id": f"call_{uuid.uuid4().hex[:8]}",
                "type": "function",
                "function": {"name": str(fn.get("name")), "arguments": args if isinstance(args, str) else json.dumps(args)},
            })
        return {"role": "assistant", "content": parsed.get("content") or None, "tool_calls": calls}
