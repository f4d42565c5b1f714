"""The harness every episode loop shares: prompts, tool list, window, prompt tokens, counters.

The core runner, the LangGraph and LlamaIndex runners and the GRPO rollout environment all
build what the model sees, and count what happened, with these pieces, so their figures are
comparable. A harness is one of:

* ``none`` — the system prompt, the task and the full history;
* ``append`` — every note and observation in the system prompt, the recent window of messages
  and a ``note`` tool;
* ``bpe`` — the BPE dashboard in the system prompt, the recent window and the four meta-actions.

>>> instructions("none") == prompt_text("system")
True
>>> history = [{"role": "user", "content": "task"}] + [
...     {"role": "assistant", "content": None, "tool_calls": [{"id": str(i), "type": "function",
...      "function": {"name": "look", "arguments": "{}"}}]} if i % 2 == 0 else
...     {"role": "tool", "tool_call_id": str(i - 1), "content": "ok"} for i in range(6)]
>>> [m["role"] for m in window(history, 3)]
['user', 'assistant', 'tool', 'assistant', 'tool']
>>> counters = EpisodeCounters()
>>> counters.reply([])  # a reply without a tool call is an invalid action
False
>>> counters.invalid, counters.silent
(1, 1)
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any, Literal, Protocol, TypeVar, runtime_checkable

from .actions import META_ACTIONS, tool_specs
from .exceptions import UserError
from .text import approx_tokens

__all__ = [
    "META_ACTIONS",
    "HARNESSES",
    "MAX_SILENT_REPLIES",
    "Harness",
    "SpecStyle",
    "PromptTokens",
    "PromptTokenCounter",
    "EpisodeCounters",
    "prompt_text",
    "instructions",
    "system_prompt",
    "meta_action_tools",
    "episode_tools",
    "window",
    "history_message",
    "approx_prompt_tokens",
    "count_prompt_tokens",
    "model_call",
]

Harness = Literal["none", "append", "bpe"]
HARNESSES: tuple[str, ...] = ("none", "append", "bpe")
SpecStyle = str
"""How tool specs are written: ``"full"`` (the default, for frontier models) or a style an
environment and the meta-action specs also understand."""

MAX_SILENT_REPLIES = 3
"""Replies in a row without a tool call that end an episode: a model that stopped calling tools
will not start again."""

M = TypeVar("M")
ChatMessage = dict[str, Any]


# -- prompts --------------------------------------------------------------------------------
@cache
def prompt_text(name: str) -> str:
    """A prompt data file, ``evoharness_bpe/prompts/<name>.txt``: ``system``, ``bpe``,
    ``append`` or ``nudge``."""
    try:
        return resources.files("evoharness_bpe.prompts").joinpath(f"{name}.txt").read_text("utf-8").strip()
    except FileNotFoundError:
        raise UserError(f"no prompt named {name!r}; the prompts are system, bpe, append and nudge") from None


def _check(harness: str) -> None:
    if harness not in HARNESSES:
        raise UserError(f"harness must be one of {', '.join(HARNESSES)}, not {harness!r}")


def instructions(harness: str, base: str | None = None) -> str:
    """The fixed part of the system prompt of `harness`: `base` (default the built-in system
    prompt), then what the harness adds. The dashboard or memory follows it, after a blank line."""
    _check(harness)
    text = base if base is not None else prompt_text("system")
    return text if harness == "none" else f"{text}\n\n{prompt_text(harness)}"


def system_prompt(harness: str, base: str | None = None, *, dashboard: str = "", memory: Sequence[str] = ()) -> str:
    """The whole system prompt of one model call: `instructions` plus the dashboard (``bpe``)
    or the memory block (``append``)."""
    text = instructions(harness, base)
    if harness == "bpe" and dashboard:
        return f"{text}\n\n{dashboard}"
    if harness == "append":
        return f"{text}\n\n<memory>\n" + "\n".join(memory) + "\n</memory>"
    return text


# -- tools ----------------------------------------------------------------------------------
def meta_action_tools(style: SpecStyle = "full", names: Sequence[str] = META_ACTIONS) -> list[dict[str, Any]]:
    """The meta-actions `names` as OpenAI function specs, in the order track, commit, recall, note.

    `style` is ``full`` (the default) or ``compact`` (`evoharness_bpe.actions.SPEC_STYLES`).
    """
    return [spec.openai() for spec in tool_specs(style) if spec.name in names]


def episode_tools(env: Any, harness: str, *, style: SpecStyle = "full") -> list[dict[str, Any]]:
    """The tools of an episode, in the order every loop offers them: the environment's tools
    (``env.tools(style=...)``, or a list of specs), then the harness's meta-actions (``bpe``: all
    four; ``append``: ``note``). A name used twice is an error.

    This is the one tool list: traces record it, the SFT ``tools`` column comes from the traces,
    inference and GRPO rollouts are given it, so the model sees the same order and text in all.
    An environment's style also selects how it writes its observations (``compact``: shorter).
    """
    _check(harness)
    if isinstance(env, Sequence):
        env_specs = [dict(spec) for spec in env]
    elif style == "full":
        env_specs = list(env.tools())
    else:
        try:
            env_specs = list(env.tools(style=style))
        except TypeError:  # an environment without styles: its one set of specs
            env_specs = list(env.tools())
    meta = {"bpe": META_ACTIONS, "append": ("note",), "none": ()}[harness]
    tools = [*env_specs, *meta_action_tools(style, meta)]
    names = [_spec_name(t) for t in tools]
    clash = sorted({n for n in names if names.count(n) > 1})
    if clash:
        raise UserError(f"tool names must be unique; the environment's tools clash with the meta-actions: {', '.join(clash)}")
    return tools


def _spec_name(spec: Mapping[str, Any]) -> str:
    return str((spec.get("function") or spec).get("name"))


# -- history --------------------------------------------------------------------------------
def _role(message: Any) -> str:
    return str(message.get("role") if isinstance(message, Mapping) else getattr(message, "role", ""))


def window(history: Sequence[M], size: int | None, *, role: Callable[[M], str] = _role) -> list[M]:
    """The task message (``history[0]``) plus the last `size` messages, never starting on a tool
    result whose assistant call was cut (the window then reaches back to that call).

    `size` None keeps the whole history. `role` reads a message's role, so framework message
    objects are windowed exactly like OpenAI dicts.
    """
    items = list(history)
    if size is None:
        return items
    if size < 1:
        raise UserError("window must be a positive number of messages, or None to keep them all")
    head, rest = items[:1], items[1:]
    if len(rest) <= size:
        return head + rest
    start = len(rest) - size
    while start > 0 and role(rest[start]) == "tool":
        start -= 1  # keep the assistant message that owns these tool results
    return head + rest[start:]


_CALL_MARKUP = re.compile(r"<tool_call>.*?(?:</tool_call>|$)", re.DOTALL)


def history_message(reply: Mapping[str, Any]) -> ChatMessage:
    """A policy's reply as the history keeps it, and as training rows show it.

    With parsed tool calls, ``content`` keeps only the text outside the call markup (None when
    nothing is left), so a chat template renders each call once, from ``tool_calls``.
    """
    calls = [dict(call) for call in reply.get("tool_calls") or []]
    content = reply.get("content")
    if calls and isinstance(content, str):
        content = _CALL_MARKUP.sub("", content).strip() or None
    message: ChatMessage = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = calls
    return message


# -- prompt tokens --------------------------------------------------------------------------
@dataclass(frozen=True)
class PromptTokens:
    """The size of one prompt and where the figure comes from."""

    tokens: int
    source: Literal["exact", "approximate"]


@runtime_checkable
class PromptTokenCounter(Protocol):
    """Counts a fully rendered prompt exactly (chat template and tool section included).

    A `Policy` may implement it with its tokenizer, or report what its server's ``usage`` said;
    returning None means "no exact figure for this prompt", and the approximate counter is used.
    """

    def count_prompt_tokens(self, messages: list[ChatMessage], tools: list[dict[str, Any]]) -> int | None: ...


def approx_prompt_tokens(messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] = ()) -> int:
    """The approximate counter: every message's text and tool calls, plus the tool section."""
    total = 0
    for m in messages:
        total += 4 + approx_tokens(str(m.get("content") or ""))
        for call in m.get("tool_calls") or ():
            fn = call.get("function") or {}
            args = fn.get("arguments", "")
            total += 4 + approx_tokens(str(fn.get("name", ""))) + approx_tokens(args if isinstance(args, str) else json.dumps(args))
    if tools:
        total += approx_tokens(json.dumps(list(tools), ensure_ascii=False))
    return total


def count_prompt_tokens(
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] = (),
    counter: PromptTokenCounter | Callable[..., int | None] | None = None,
) -> PromptTokens:
    """Tokens of a prompt: exact from `counter` (an object with ``count_prompt_tokens`` such as
    a policy, or a function ``(messages, tools) -> int``) when it gives a figure, else approximate.

    >>> count_prompt_tokens([{"role": "user", "content": "hello"}], [], counter=lambda m, t: 7)
    PromptTokens(tokens=7, source='exact')
    >>> count_prompt_tokens([{"role": "user", "content": "hello"}]).source
    'approximate'
    """
    fn = getattr(counter, "count_prompt_tokens", None)
    if fn is None and callable(counter) and not hasattr(counter, "complete"):
        fn = counter  # a plain function; a policy without the method has no exact count
    if fn is not None:
        exact = fn(list(messages), list(tools))
        if exact is not None:
            return PromptTokens(int(exact), "exact")
    return PromptTokens(approx_prompt_tokens(messages, tools), "approximate")


# -- counters -------------------------------------------------------------------------------
@dataclass
class EpisodeCounters:
    """What an episode did, counted the same way by every loop.

    An invalid action is a reply without a tool call, a call of an unknown tool or with
    unparseable arguments, an environment call the environment refused, or a refused
    meta-action.
    """

    steps: int = 0
    """Environment tool calls."""
    invalid: int = 0
    """Invalid actions."""
    silent: int = 0
    """Replies without a tool call in a row (reset by a reply that calls a tool)."""
    silent_replies: int = 0
    """Replies without a tool call in all."""
    meta: dict[str, int] = field(default_factory=lambda: dict.fromkeys(META_ACTIONS, 0))
    """Meta-action calls by name, valid or not."""
    meta_per_call: list[int] = field(default_factory=list)
    """Meta-action calls of each model reply."""
    prompt_tokens: list[int] = field(default_factory=list)
    """Tokens of each model call's prompt."""
    prompt_token_source: str | None = None
    """``exact``, ``approximate``, or ``mixed`` when the counter gave figures only sometimes."""
    spec_style: SpecStyle = "full"
    """The tool-spec style the episode was offered (recorded, so training and inference match)."""

    @property
    def model_calls(self) -> int:
        return len(self.prompt_tokens)

    @property
    def over(self) -> bool:
        """True once `MAX_SILENT_REPLIES` replies in a row called no tool."""
        return self.silent >= MAX_SILENT_REPLIES

    def prompt(self, tokens: PromptTokens) -> PromptTokens:
        """Record the size of the prompt of a model call."""
        self.prompt_tokens.append(tokens.tokens)
        if self.prompt_token_source in (None, tokens.source):
            self.prompt_token_source = tokens.source
        else:
            self.prompt_token_source = "mixed"
        return tokens

    def reply(self, tool_calls: Sequence[Any]) -> bool:
        """Record a model reply; False (and an invalid action) when it called no tool."""
        self.meta_per_call.append(0)
        if tool_calls:
            self.silent = 0
            return True
        self.invalid += 1
        self.silent += 1
        self.silent_replies += 1
        return False

    def env_step(self, invalid: bool = False) -> None:
        """Record an environment tool call (refused or not)."""
        self.steps += 1
        self.invalid += bool(invalid)

    def meta_action(self, name: str, ok: bool) -> None:
        """Record a meta-action call."""
        self.meta[name] = self.meta.get(name, 0) + 1
        if self.meta_per_call:
            self.meta_per_call[-1] += 1
        self.invalid += not ok

    def bad_call(self, n: int = 1) -> None:
        """Record calls of unknown tools or with arguments that did not parse."""
        self.invalid += n

    def outcome_info(self) -> dict[str, int]:
        """The counters that go into ``Outcome.info``."""
        return {"steps": self.steps, "invalid_actions": self.invalid}

    def metadata(self) -> dict[str, Any]:
        """The counters that go into ``Trace.metadata``."""
        return {
            "prompt_tokens": list(self.prompt_tokens),
            "prompt_token_source": self.prompt_token_source,
            "meta_actions": dict(self.meta),
            "meta_actions_per_call": list(self.meta_per_call),
            "model_calls": self.model_calls,
            "silent_replies": self.silent_replies,
            "spec_style": self.spec_style,
        }


def model_call(
    policy: Any,
    system: str,
    history: list[dict[str, Any]],
    size: int | None,
    tools: list[dict[str, Any]],
    counters: EpisodeCounters,
    calls: list[Any],
) -> list[dict[str, Any]] | None:
    """One model call of an episode loop: the windowed prompt, the reply into `history`, the call
    into `calls` (a `ModelCall`), the counters updated. Returns the reply's tool calls, or None
    when the reply had none (the nudge is then in `history`; check ``counters.over``).
    """
    import copy  # noqa: PLC0415 - deferred with the trace module, off the import path of the core

    from .trace import ModelCall  # noqa: PLC0415

    prompt = [{"role": "system", "content": system}, *copy.deepcopy(window(history, size))]
    reply = history_message(policy.complete(copy.deepcopy(prompt), copy.deepcopy(tools)))
    tokens = counters.prompt(count_prompt_tokens(prompt, tools, policy))
    calls.append(ModelCall(messages=prompt, response=copy.deepcopy(reply), prompt_tokens=tokens.tokens))
    history.append(reply)
    tool_calls = reply.get("tool_calls") or []
    if not counters.reply(tool_calls):
        history.append({"role": "user", "content": prompt_text("nudge")})
        return None
    return tool_calls

