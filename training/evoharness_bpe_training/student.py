"""A student trained from scratch: a small Qwen3-architecture model with a tokenizer learnt from
the traces it will be trained on, and a chat template that keeps the tool section short.

On two CPU cores a step of the embedded SmolLM2-135M costs about a minute at 1,024 tokens, so
the miniature reproduction trains a model of about a million parameters instead: its
byte-level BPE vocabulary is fitted to the rendered training rows (ids, tool names and JSON
keys become few tokens) and its template (`templates/student.jinja`) writes each tool as one
signature line. Tool calls and results render as Qwen3's, so parsing, TRL's SFT and GRPO and
`TransformersPolicy` treat it like any Qwen3 model.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from importlib import resources
from typing import Any

from .tiny import build_tiny_tokenizer, qwen3_model_for, save_model

__all__ = ["student_chat_template", "render_rows", "id_atoms", "build_student"]


def student_chat_template(*, tools_first: bool = False) -> str:
    """The student's chat template (`templates/student.jinja`).

    With `tools_first`, the system turn opens with the tool section and the system text (the
    instructions, then the dashboard) follows it, so every prompt shares the tool section as
    its prefix: computed once per batch of episodes instead of once per episode.
    """
    template = resources.files("evoharness_bpe_training").joinpath("templates/student.jinja").read_text("utf-8")
    return "{%- set tools_first = true %}\n" + template if tools_first else template


def render_rows(rows: Iterable[dict[str, Any]], tokenizer: Any, **template_kwargs: Any) -> list[str]:
    """The text of SFT rows (``prompt`` + ``completion`` messages, ``tools`` JSON) under `tokenizer`'s template."""
    texts = []
    for row in rows:
        tools = json.loads(row["tools"]) if isinstance(row["tools"], str) else row["tools"]
        texts.append(tokenizer.apply_chat_template(row["prompt"] + row["completion"], tools=tools, tokenize=False, **template_kwargs))
    return texts


_QUOTED_ID = re.compile(r'"[A-Z]\d{3,}"')


def id_atoms(texts: Iterable[str]) -> list[str]:
    """The quoted record ids in `texts` (``"R0042"``, as JSON writes them), sorted: the student's
    tokenizer makes each one token, so a list of ids is a list of atoms instead of letter, digit
    and quote pieces, and writing the next id of a batch is one step rather than three."""
    return sorted({m.group(0) for text in texts for m in _QUOTED_ID.finditer(text)})


def build_student(
    rows: Iterable[dict[str, Any]],
    *,
    vocab_size: int = 2048,
    hidden_size: int = 128,
    layers: int = 4,
    seed: int = 0,
    out_dir: str | os.PathLike[str] | None = None,
    template_kwargs: dict[str, Any] | None = None,
    id_rows: Iterable[dict[str, Any]] = (),
) -> tuple[Any, Any]:
    """A random `Qwen3ForCausalLM` and a tokenizer fitted to `rows` (SFT rows as built by
    `traces_to_sft_dataset`); saved to `out_dir` when given. Record ids quoted in the rendered
    `rows` or `id_rows` become single tokens (`id_atoms`). Returns ``(model, tokenizer)``."""
    template = student_chat_template()
    renderer = build_tiny_tokenizer(256, chat_template=template)
    texts = render_rows(rows, renderer, **(template_kwargs or {}))
    tokenizer = build_tiny_tokenizer(vocab_size, texts, chat_template=template)
    tokenizer.add_tokens(id_atoms([*texts, *render_rows(id_rows, renderer, **(template_kwargs or {}))]))
    model = qwen3_model_for(tokenizer, hidden_size=hidden_size, layers=layers, intermediate_size=hidden_size * 3,
                            max_positions=4096, seed=seed)
    save_model(model, tokenizer, out_dir)
    return model, tokenizer
