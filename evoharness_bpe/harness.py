"""The harness every episode loop shares: prompts, tool list, window, prompt tokens, counters.

The core runner, the LangGraph and LlamaIndex runners and the GRPO rollout environment all
build what the model sees, and count what happened, with these pieces, so their figures are
comparable. A harness is one of:

* ``none`` — the system prompt, the task and the full history;
* ``append`` — every note and observation in the system prompt, the recent window of messages
  and a ``note`` tool;
* ``panels`` — the BPE dashboard in the system prompt and the recent window, brought up to date
  from the environment's results alone: no meta-actions (the reference's ``always_on``);
* ``bpe`` — the BPE dashboard in the system prompt, the recent window and the four meta-actions.

``panels`` and ``bpe`` take part switches (`PARTS`): a part switched off is left out of the
prompt, the dashboard and the tools. `StepBudget` is the step budget every loop spends.

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
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any, Literal, Protocol, TypeVar, runtime_checkable

from .actions import META_ACTIONS, PART_OF, PARTS, check_parts, tool_specs
from .exceptions import UserError
from .text import approx_tokens

__all__ = [
    "META_ACTIONS",
    "PARTS",
    "HARNESSES",
    "PART_HARNESSES",
    "StepBudget",
    "parts_label",
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

Harness = Literal["none", "append", "panels", "bpe"]
HARNESSES: tuple[str, ...] = ("none", "append", "panels", "bpe")
PART_HARNESSES: tuple[str, ...] = ("panels", "bpe")
"""The harnesses that show the workspace's parts, and so take part switches."""
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
    ``append`` or ``nudge`` (``panels`` and part-ablated texts come from ``parts.json``)."""
    try:
        return resources.files("evoharness_bpe.prompts").joinpath(f"{name}.txt").read_text("utf-8").strip()
    except FileNotFoundError:
        raise UserError(f"no prompt named {name!r}; the prompts are system, bpe, append and nudge") from None


def _check(harness: str, parts: Sequence[str] = PARTS) -> tuple[str, ...]:
    if harness not in HARNESSES:
        raise UserError(f"harness must be one of {', '.join(HARNESSES)}, not {harness!r}")
    checked = check_parts(parts)
    if checked != PARTS and harness not in PART_HARNESSES:
        raise UserError(f"part switches apply to the {' and '.join(PART_HARNESSES)} harnesses, not {harness!r}")
    return checked


@cache
def _part_texts() -> dict[str, Any]:
    return json.loads(resources.files("evoharness_bpe.prompts").joinpath("parts.json").read_text("utf-8"))


def _harness_text(harness: str, parts: tuple[str, ...]) -> str:
    """What `harness` adds to the system prompt, naming only the parts switched on."""
    if harness == "bpe" and parts == PARTS:
        return prompt_text("bpe")  # the published text, byte for byte (training data holds it)
    spec = _part_texts()[harness]
    if not parts:
        return str(spec["empty"])
    names = [spec["parts"][p] for p in parts]
    listed = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
    uses = [spec["uses"][p] for p in parts if p in spec["uses"]]
    tail = f"{spec['tail']} {', '.join(uses)}." if uses else spec["tail"]
    return f"{spec['lead']} {listed}. {tail}"


def parts_label(parts: Sequence[str]) -> str:
    """How an ablation is named in reports: ``full``, or the parts switched off (``-belief``).

    >>> parts_label(PARTS), parts_label(["belief", "experience"])
    ('full', '-progress')
    """
    off = [p for p in PARTS if p not in check_parts(parts)]
    return "full" if not off else "".join(f"-{p}" for p in off)


def instructions(harness: str, base: str | None = None, *, parts: Sequence[str] = PARTS) -> str:
    """The fixed part of the system prompt of `harness`: `base` (default the built-in system
    prompt), then what the harness adds. The dashboard or memory follows it, after a blank line.

    `parts` (``panels`` and ``bpe`` only) names the parts switched on; the text names no other.
    """
    checked = _check(harness, parts)
    text = base if base is not None else prompt_text("system")
    if harness == "none":
        return text
    added = prompt_text(harness) if harness == "append" else _harness_text(harness, checked)
    return f"{text}\n\n{added}"


def system_prompt(
    harness: str,
    base: str | None = None,
    *,
    dashboard: str = "",
    memory: Sequence[str] = (),
    parts: Sequence[str] = PARTS,
) -> str:
    """The whole system prompt of one model call: `instructions` plus the dashboard (``bpe``,
    ``panels``) or the memory block (``append``)."""
    text = instructions(harness, base, parts=parts)
    if harness in PART_HARNESSES and dashboard:
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


def episode_tools(
    env: Any, harness: str, *, style: SpecStyle = "full", parts: Sequence[str] = PARTS
) -> list[dict[str, Any]]:
    """The tools of an episode, in the order every loop offers them: the environment's tools
    (``env.tools(style=...)``, or a list of specs), then the harness's meta-actions (``bpe``: the
    four, less those of parts switched off; ``append``: ``note``; ``panels`` and ``none``: none).
    A name used twice is an error.

    This is the one tool list: traces record it, the SFT ``tools`` column comes from the traces,
    inference and GRPO rollouts are given it, so the model sees the same order and text in all.
    An environment's style also selects how it writes its observations (``compact``: shorter).
    """
    checked = _check(harness, parts)
    if isinstance(env, Sequence):
        env_specs = [dict(spec) for spec in env]
    elif style == "full":
        env_specs = list(env.tools())
    else:
        try:
            env_specs = list(env.tools(style=style))
        except TypeError:  # an environment without styles: its one set of specs
            env_specs = list(env.tools())
    bpe = tuple(name for name in META_ACTIONS if PART_OF[name] in checked)
    meta = {"bpe": bpe, "append": ("note",), "panels": (), "none": ()}[harness]
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


# -- step budget ----------------------------------------------------------------------------
@dataclass
class StepBudget:
    """The step budget of an episode, spent the same way by every loop.

    Charged (the default, as in the reference): every model call spends one of `max_steps`,
    whatever it called — a meta-action costs what an environment action costs. Free
    (``charge=False``): a call whose tool calls are all meta-actions spends nothing, but the
    episode still stops after ``max_steps + extra`` calls in all, `extra` being
    `max_meta_actions` or, without a cap, `max_steps` (a model that never acts must stop).

    >>> budget = StepBudget(2, charge=False, max_meta_actions=1)
    >>> budget.spend(["recall"], {"recall"})  # a meta-action only: no step spent
    False
    >>> budget.open, budget.charged, budget.calls
    (True, 0, 1)
    >>> budget.spend(["look"], {"recall"}), budget.spend(["look"], {"recall"}), budget.open
    (True, True, False)
    """

    max_steps: int
    charge: bool = True
    max_meta_actions: int | None = None
    charged: int = 0
    """Model calls that spent a step."""
    calls: int = 0
    """Model calls in all."""

    @property
    def limit(self) -> int:
        """Model calls the episode may make in all."""
        if self.charge:
            return self.max_steps
        extra = self.max_meta_actions if self.max_meta_actions is not None else self.max_steps
        return self.max_steps + extra

    @property
    def open(self) -> bool:
        """True while another model call may be made."""
        return self.charged < self.max_steps and self.calls < self.limit

    def spend(self, names: Sequence[Any], meta: Collection[str]) -> bool:
        """Record one model call that called the tools `names` (meta-actions: those in `meta`);
        returns whether it spent a step. A reply without a tool call spends one."""
        self.calls += 1
        free = not self.charge and bool(names) and all(n in meta for n in names)
        self.charged += not free
        return not free

    def metadata(self) -> dict[str, Any]:
        """The budget options, as traces record them."""
        return {"charge_meta_actions": self.charge, "max_meta_actions": self.max_meta_actions,
                "charged_model_calls": self.charged}


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
    invalid_run: int = 0
    """Invalid actions in a row (reset by a valid one); `EpisodeConfig.max_invalid_run` cuts an episode on it."""
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
        self._count(True)
        self.silent += 1
        self.silent_replies += 1
        return False

    def _count(self, invalid: bool, n: int = 1) -> None:
        self.invalid += n if invalid else 0
        self.invalid_run = self.invalid_run + n if invalid else 0

    def env_step(self, invalid: bool = False) -> None:
        """Record an environment tool call (refused or not)."""
        self.steps += 1
        self._count(bool(invalid))

    def meta_action(self, name: str, ok: bool) -> None:
        """Record a meta-action call."""
        self.meta[name] = self.meta.get(name, 0) + 1
        if self.meta_per_call:
            self.meta_per_call[-1] += 1
        self._count(not ok)

    def bad_call(self, n: int = 1) -> None:
        """Record calls of unknown tools or with arguments that did not parse."""
        self._count(True, n)

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

