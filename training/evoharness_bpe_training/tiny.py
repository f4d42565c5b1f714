"""A tiny random Qwen3-style model with a real tokenizer and Qwen3's chat template, built offline.

It is for tests and smoke runs: a few hundred KB, built in seconds, with a byte-level BPE
tokenizer trained by `tokenizers` on the project's own prompt and tool texts, and TRL's Qwen3
chat template used verbatim, so tool calls render and parse exactly as with a real Qwen3.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

__all__ = ["TINY_SPECIAL_TOKENS", "qwen3_chat_template", "build_tiny_tokenizer", "build_tiny_model"]

TINY_SPECIAL_TOKENS: tuple[str, ...] = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
)


def qwen3_chat_template() -> str:
    """Qwen3's chat template as shipped by TRL (`trl/chat_templates/qwen3.jinja`)."""
    import trl

    return (Path(trl.__file__).parent / "chat_templates" / "qwen3.jinja").read_text("utf-8")


def _corpus(extra: Iterable[str]) -> list[str]:
    from evoharness_bpe import Workspace
    from evoharness_bpe.harness import prompt_text

    ws = Workspace("Migrate customer records in batches", subgoals=["batch 1", "batch 2"])
    texts = [json.dumps(t) for t in ws.openai_tools()]
    texts.append(ws.dashboard(record=False))
    texts += [prompt_text(name) for name in ("system", "bpe", "append", "nudge")]
    texts += [
        '<tool_call>\n{"name": "track", "arguments": {"key": "api.rate_limit", "value": "5/s"}}\n</tool_call>',
        '{"name": "commit", "arguments": {"subgoal": "batch 1", "status": "done"}}',
        "system user assistant tool <|im_start|> <|im_end|> # Tools You may call one or more functions",
        "0123456789 abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ {}[]():,.\"'-_/<>=\n",
    ]
    texts += list(extra)
    return texts


def build_tiny_tokenizer(vocab_size: int = 1024, extra_texts: Iterable[str] = (), *, chat_template: str | None = None):  # -> PreTrainedTokenizerFast
    """A byte-level BPE tokenizer with Qwen3's special tokens and chat template (or `chat_template`)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(TINY_SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(extra_texts), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=list(TINY_SPECIAL_TOKENS[1:]),
    )
    fast.chat_template = chat_template or qwen3_chat_template()
    return fast


def build_tiny_model(
    out_dir: str | os.PathLike[str] | None = None,
    *,
    hidden_size: int = 32,
    layers: int = 2,
    vocab_size: int = 1024,
    seed: int = 0,
    initializer_range: float = 0.02,
):
    """A random `Qwen3ForCausalLM` and its tokenizer; saved to `out_dir` when given.

    Returns ``(model, tokenizer)``. With ``out_dir`` the folder loads back with
    ``AutoModelForCausalLM.from_pretrained(out_dir)`` / ``AutoTokenizer.from_pretrained(out_dir)``.
    """
    tokenizer = build_tiny_tokenizer(vocab_size)
    model = qwen3_model_for(tokenizer, hidden_size=hidden_size, layers=layers, intermediate_size=hidden_size * 2,
                            max_positions=8192, seed=seed, initializer_range=initializer_range)
    save_model(model, tokenizer, out_dir)
    return model, tokenizer


def qwen3_model_for(tokenizer, *, hidden_size: int, layers: int, intermediate_size: int, max_positions: int,
                    seed: int = 0, initializer_range: float = 0.02):  # -> Qwen3ForCausalLM
    """A random `Qwen3ForCausalLM` sized for `tokenizer` (4 heads, 2 KV heads, tied embeddings)."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=hidden_size // 4,
        max_position_embeddings=max_positions,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
        initializer_range=initializer_range,
    )
    model = Qwen3ForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def save_model(model, tokenizer, out_dir: str | os.PathLike[str] | None) -> None:
    """Save `model` and `tokenizer` to `out_dir` (nothing when it is None)."""
    from .models import save_model_and_tokenizer

    if out_dir is not None:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        save_model_and_tokenizer(model, tokenizer, out)
