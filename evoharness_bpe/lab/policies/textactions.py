"""The text action syntax: ``<action>verb [argument]</action>`` in place of tool calls.

The published EvoHarness-RL has its policy write each action as text; this module lets a model
or a server without tool calling play the project's episodes the same way.
`actions_prompt` writes the tools offered (the environment's and the meta-actions, OpenAI
function specs) as an instruction block; `parse_actions` reads a reply's actions back into the
tool calls every episode loop expects; `render_action` writes a tool call as an action.
`TextActionPolicy` wraps any policy that answers text and does all three around it.

An argument is either bare or a JSON object of the tool's parameters:

* a tool with one required parameter (or a single optional one) takes its value bare, with or
  without square brackets: ``recall crm rate limit``, ``fetch_page 2``, ``report_invalid [R1, R2]``
  (an array's items separated by commas);
* ``track <key> = <value>`` and ``commit <subgoal> = <status>`` are the two-field shorthands
  (``commit <subgoal>`` alone means status ``doing``, the reference's "the subgoal I pursue");
* anything else, optional parameters included, is a JSON object: ``note {"text": "...",
  "kind": "pitfall"}``, ``submit_batch {"batch_id": 1, "record_ids": ["R1"]}``;
* a tool without parameters takes nothing: ``finish``.

A malformed action (no verb, an unknown one, a missing argument, JSON that does not parse, a value
of the wrong type) raises `ActionSyntaxError`, whose message names what was wrong and the form
expected; nothing is called.

>>> from evoharness_bpe.harness import meta_action_tools
>>> tools = meta_action_tools()
>>> call = parse_actions("<think>check first</think><action>recall crm rate limit</action>", tools)[0]
>>> call["function"]["name"], call["function"]["arguments"]
('recall', '{"query": "crm rate limit"}')
>>> render_action(parse_actions("<action>commit batch 1 = done</action>", tools)[0], tools)
'<action>commit batch 1 = done</action>'
>>> parse_actions("<action>fly away</action>", tools)
Traceback (most recent call last):
...
evoharness_bpe.lab.policies.textactions.ActionSyntaxError: unknown verb 'fly'; the verbs are track, commit, recall, note; expected <action>verb [argument]</action>
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

from ...actions import MAX_ARGUMENT_CHARS, MAX_ARGUMENT_DEPTH, META_ACTIONS
from ...exceptions import MetaActionError
from ...harness import prompt_text
from ..policy import ChatMessage, Policy

__all__ = [
    "ACTION_SYNTAXES",
    "ActionSyntaxError",
    "TextActionPolicy",
    "actions_prompt",
    "parse_actions",
    "render_action",
    "text_actions_data",
]

ACTION_SYNTAXES: tuple[str, ...] = ("tools", "text")
"""How a policy writes its actions: tool calls (the default) or ``<action>`` text."""

_ACTION_RE = re.compile(r"<action>(.*?)</action>", re.S | re.I)
_OPEN_RE = re.compile(r"<action>", re.I)
_ERROR_RE = re.compile(r"\s*<action_error>(.*?)</action_error>\s*\Z", re.S)
_VERB_RE = re.compile(r"([^\s\[\{]+)\s*(.*)\Z", re.S)
_INTEGER_RE = re.compile(r"[+-]?\d{1,18}")
_QUOTES = ("'", '"', "`")


class ActionSyntaxError(MetaActionError):
    """An ``<action>`` a model wrote that cannot be read; the message is written for the model
    (what was wrong, the form expected) and nothing was called."""


@cache
def text_actions_data() -> dict[str, Any]:
    """The texts of the syntax (instruction lines, nudge, error and result templates), from
    ``text_actions.json`` beside this module."""
    return json.loads(Path(__file__).with_name("text_actions.json").read_text("utf-8"))


# -- specs ----------------------------------------------------------------------------------
def _functions(tools: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each tool's function spec by name, in the order offered."""
    out: dict[str, dict[str, Any]] = {}
    for tool in tools:
        fn = tool.get("function") if isinstance(tool.get("function"), Mapping) else tool
        out[str(fn.get("name"))] = dict(fn)  # type: ignore[union-attr]
    return out


def _params(fn: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    schema = fn.get("parameters") or {}
    props = dict(schema.get("properties") or {})
    return props, [r for r in schema.get("required") or [] if r in props]


def _type(prop: Mapping[str, Any]) -> str:
    """A property's JSON type; for ``X or null`` the X."""
    if "type" in prop and isinstance(prop["type"], str):
        return prop["type"]
    for option in prop.get("anyOf") or ():
        if isinstance(option, Mapping) and option.get("type") not in (None, "null"):
            return str(option["type"])
    return "string"


def _pair(name: str, props: Mapping[str, Any]) -> dict[str, Any] | None:
    """The two-field shorthand of `name` (track, commit) when the tool has both fields."""
    pair = text_actions_data()["pairs"].get(name)
    return pair if pair and all(f in props for f in pair["fields"]) else None


def _target(props: Mapping[str, Any], required: Sequence[str]) -> str | None:
    """The parameter a bare argument fills: the one required, or the only one there is."""
    if len(required) == 1:
        return required[0]
    if not required and len(props) == 1:
        return next(iter(props))
    return None


def _example_value(prop: Mapping[str, Any]) -> Any:
    if prop.get("enum"):
        return prop["enum"][0]
    kind = _type(prop)
    if kind == "array":
        return [_example_value(prop.get("items") or {})]
    return {"integer": 1, "number": 1, "boolean": True, "object": {}}.get(kind, "...")


def _bare_example(prop: Mapping[str, Any]) -> str:
    value = _example_value(prop)
    if isinstance(value, list):
        return ", ".join(json.dumps(v) if not isinstance(v, str) else v for v in value)
    return json.dumps(value) if not isinstance(value, str) else value


def _form(name: str, fn: Mapping[str, Any]) -> str:
    """How an action of tool `name` is written, with placeholders: ``fetch_page <page>``."""
    props, required = _params(fn)
    if not props:
        return name
    pair = _pair(name, props)
    if pair is not None:
        return f"{name} {pair['form']}"
    target = _target(props, required)
    if target is not None:
        return f"{name} <{target}>"
    fields = ", ".join(f'"{f}": {json.dumps(_example_value(props[f]))}' for f in (required or list(props)))
    return f"{name} {{{fields}}}"


def _example(name: str, fn: Mapping[str, Any]) -> str:
    """A concrete action of tool `name`: ``fetch_page 1``."""
    props, required = _params(fn)
    pair = _pair(name, props)
    target = _target(props, required)
    if not props or pair is not None or target is None:
        return _form(name, fn)
    return f"{name} {_bare_example(props[target])}"


def _json_example(name: str, fn: Mapping[str, Any]) -> str:
    """An action of tool `name` in the JSON form, its required parameters (or all) filled."""
    props, required = _params(fn)
    fields = {f: _example_value(props[f]) for f in (required or list(props))}
    return f"<action>{name} {json.dumps(fields)}</action>"


def _optional(name: str, fn: Mapping[str, Any]) -> list[str]:
    """The parameters the bare form of `name` cannot give (they need the JSON form)."""
    props, required = _params(fn)
    pair = _pair(name, props)
    covered = set(pair["fields"]) if pair is not None else {_target(props, required)} if _target(props, required) else set(props)
    return [p for p in props if p not in covered]


def _expected(name: str, fn: Mapping[str, Any]) -> str:
    return f"<action>{_form(name, fn)}</action>"


def actions_prompt(tools: Sequence[Mapping[str, Any]], *, default_tool: str | None = None) -> str:
    """The instruction block of the text syntax for `tools` (OpenAI function specs): the form of
    the actions, one line per verb (how it is written, then the tool's description) and how
    arguments are given. It goes into the system prompt in place of the tools.

    With `default_tool` (a tool of one parameter), an action that starts with no verb is that
    tool's argument: the reference's ``<action>go to countertop 1</action>``.
    """
    data = text_actions_data()
    functions = _functions(tools)
    default_tool = default_tool if default_tool in functions else None
    lines = [data["header"]]
    for name, fn in functions.items():
        line = f"- <action>{_form(name, fn)}</action>"
        if name == default_tool:
            line = f"- <action><{_target(*_params(fn))}></action> or {line[2:]}"
        description = str(fn.get("description") or "").strip()
        if description:
            line += f": {description}"
        extras = [data["default_tool"].format(name=name)] if name == default_tool else []
        pair = _pair(name, _params(fn)[0])
        if pair is not None and pair.get("default"):
            extras.append(data["pair_default"].format(verb=name, first=pair["fields"][0], default=pair["default"]))
        optional = _optional(name, fn)
        if optional:
            extras.append(data["optional"].format(fields=", ".join(optional)))
        lines.append(f"{line} ({'; '.join(extras)})" if extras else line)
    bare = next((f"<action>{_example(n, fn)}</action>" for n, fn in functions.items()
                 if _params(fn)[0] and _target(*_params(fn)) is not None and _pair(n, _params(fn)[0]) is None), None)
    several = next((n for n, fn in functions.items() if len(_params(fn)[0]) > 1), None)
    if several is not None:
        props = _params(functions[several])[0]
        json_example = f"<action>{several} {json.dumps({k: _example_value(v) for k, v in props.items()})}</action>"
        lines.append(data["arguments"].format(bare=f"e.g. {bare}" if bare else "a bare value", json=f"e.g. {json_example}"))
    return "\n".join(lines)


# -- parsing --------------------------------------------------------------------------------
def _short(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _unquote(text: str) -> str:
    if len(text) >= 2 and text[0] == text[-1] and text[0] in _QUOTES:
        return text[1:-1].strip()
    return text


def _scalar(name: str, field: str, prop: Mapping[str, Any], text: str, fn: Mapping[str, Any]) -> Any:
    """`text` as a value of `prop`'s type; an `ActionSyntaxError` naming the field if it is not one."""
    kind = _type(prop)
    raw, text = text.strip(), _unquote(text.strip())

    def wrong(what: str) -> ActionSyntaxError:
        return ActionSyntaxError(f"{name}'s {field} must be {what}, not {_short(text)!r}; expected {_expected(name, fn)}, "
                                 f"e.g. <action>{_example(name, fn)}</action>", action=name, field=field)

    if kind == "integer":
        if not _INTEGER_RE.fullmatch(text):
            raise wrong("a whole number")
        return int(text)
    if kind == "number":
        try:
            value = float(text)
        except ValueError:
            raise wrong("a number") from None
        if not math.isfinite(value):
            raise wrong("a finite number")
        return int(value) if _INTEGER_RE.fullmatch(text) else value
    if kind == "boolean":
        if text.lower() not in ("true", "false"):
            raise wrong("true or false")
        return text.lower() == "true"
    if kind == "object":
        raise ActionSyntaxError(f"{name}'s {field} is an object: write the parameters as a JSON object; expected "
                                f"{name} {{\"{field}\": {{...}}}}", action=name, field=field)
    if kind == "array":
        items = prop.get("items") or {}
        try:
            value = json.loads(raw if raw.startswith("[") else f"[{raw}]")
        except (ValueError, RecursionError):
            value = None
        if isinstance(value, list) and all(not isinstance(v, (list, dict)) for v in value):
            if _type(items) == "string" and not all(isinstance(v, str) for v in value):
                value = None  # ``R1, 2`` as strings, from the commas below
        else:
            value = None
        if value is None:
            value = [_scalar(name, field, items, part, fn) for part in raw.split(",") if part.strip()]
        return value
    return text


def _arguments(name: str, fn: Mapping[str, Any], rest: str) -> dict[str, Any]:
    """The arguments of an action of tool `name` whose text after the verb is `rest`."""
    props, required = _params(fn)
    if rest.startswith("[") and rest.endswith("]"):
        rest = rest[1:-1].strip()  # the reference's ``verb [argument]``
    if not rest:
        if required:
            raise ActionSyntaxError(f"{name} needs an argument ({', '.join(required)}); expected {_expected(name, fn)}, "
                                    f"e.g. <action>{_example(name, fn)}</action>", action=name, field=required[0])
        return {}
    if rest.startswith("{"):
        try:
            value, end = json.JSONDecoder().raw_decode(rest)
        except (ValueError, RecursionError) as exc:
            raise ActionSyntaxError(f"the JSON object of {name} does not parse ({exc}); expected a JSON object of its "
                                    f"parameters, e.g. {_json_example(name, fn)}", action=name) from None
        if rest[end:].strip():
            raise ActionSyntaxError(f"text after the JSON object of {name}: {_short(rest[end:].strip())!r}; expected the "
                                    f"object alone, e.g. {_json_example(name, fn)}", action=name)
        return value
    if not props:
        raise ActionSyntaxError(f"{name} takes no argument, got {_short(rest)!r}; expected <action>{name}</action>", action=name)
    pair = _pair(name, props)
    if pair is not None:
        first, second = pair["fields"]
        left, eq, right = rest.partition("=") if pair.get("split", "first") == "first" else rest.rpartition("=")
        if not eq:
            if pair.get("default") is None:
                raise ActionSyntaxError(f"{name} needs {pair['form']}, got {_short(rest)!r}; expected "
                                        f"{_expected(name, fn)} or a JSON object", action=name, field=second)
            return {first: _scalar(name, first, props[first], rest, fn), second: pair["default"]}
        if not left.strip() or not right.strip():
            missing = first if not left.strip() else second
            raise ActionSyntaxError(f"{name} needs a {missing} {'before' if missing == first else 'after'} '='; expected "
                                    f"{_expected(name, fn)}", action=name, field=missing)
        return {first: _scalar(name, first, props[first], left, fn), second: _scalar(name, second, props[second], right, fn)}
    target = _target(props, required)
    if target is None:
        fields = required or list(props)
        raise ActionSyntaxError(f"{name} takes several values ({', '.join(fields)}): write them as a JSON object; expected "
                                f"{_expected(name, fn)}", action=name)
    return {target: _scalar(name, target, props[target], rest, fn)}


def _parse_one(body: str, functions: Mapping[str, Mapping[str, Any]], default: str | None = None) -> tuple[str, dict[str, Any]]:
    verbs = ", ".join(functions)
    body = _unquote(body.strip())
    if not body:
        raise ActionSyntaxError(f"the action is empty; the verbs are {verbs}; expected <action>verb [argument]</action>")
    if len(body) > MAX_ARGUMENT_CHARS:
        raise ActionSyntaxError(f"the action is {len(body)} characters long; the limit is {MAX_ARGUMENT_CHARS}")
    match = _VERB_RE.match(body)
    word, rest = (match.group(1), match.group(2).strip()) if match else (body, "")
    name = {n.lower(): n for n in functions}.get(word.lower())
    if name is None and default is not None:
        return default, _arguments(default, functions[default], body)
    if name is None:
        raise ActionSyntaxError(f"unknown verb {_short(word)!r}; the verbs are {verbs}; expected <action>verb [argument]</action>",
                                action=_short(word))
    if rest.count("{") + rest.count("[") > 4 * MAX_ARGUMENT_DEPTH:
        raise ActionSyntaxError(f"the argument of {name} is nested too deeply; expected {_expected(name, functions[name])}",
                                action=name)
    return name, _arguments(name, functions[name], rest)


def parse_actions(text: str | None, tools: Sequence[Mapping[str, Any]], *, id_prefix: str = "action",
                  default_tool: str | None = None) -> list[dict[str, Any]]:
    """The tool calls of the ``<action>…</action>`` tags in `text`, in order, as
    ``{"id", "type": "function", "function": {"name", "arguments": <JSON string>}}``.

    Empty when `text` holds no action. One malformed action raises `ActionSyntaxError` for the
    whole reply (none of its actions is called); so does an ``<action>`` left open. An action
    that starts with no verb is the argument of `default_tool`, when that tool is offered.
    """
    text = text or ""
    bodies = _ACTION_RE.findall(text)
    if len(_OPEN_RE.findall(text)) > len(bodies):
        raise ActionSyntaxError("an <action> tag is not closed; expected <action>verb [argument]</action>")
    functions = _functions(tools)
    default = default_tool if default_tool in functions else None
    calls = []
    for n, body in enumerate(bodies):
        name, args = _parse_one(body, functions, default)
        calls.append({"id": f"{id_prefix}_{n}", "type": "function",
                      "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)}})
    return calls


def _outside(text: str) -> str | None:
    """`text` without its action tags (the reasoning around them), None when nothing is left."""
    return _ACTION_RE.sub("", text).strip() or None


# -- rendering ------------------------------------------------------------------------------
def _bare(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return json.dumps(value)
    if isinstance(value, list) and value and all(isinstance(v, (str, int, float)) and not isinstance(v, bool) for v in value):
        return ", ".join(str(v) for v in value)
    return None


def render_action(call: Mapping[str, Any], tools: Sequence[Mapping[str, Any]], *, default_tool: str | None = None) -> str:
    """A tool call written as ``<action>…</action>``: the shortest form that `parse_actions`
    (with the same `default_tool`) reads back into the same name and arguments (bare,
    shorthand, else a JSON object)."""
    fn = call.get("function") if isinstance(call.get("function"), Mapping) else call
    name = str(fn.get("name"))  # type: ignore[union-attr]
    raw = fn.get("arguments")  # type: ignore[union-attr]
    try:
        args = json.loads(raw) if isinstance(raw, str) else (raw if raw is not None else {})
    except ValueError:
        return f"<action>{name} {raw}</action>"  # a call that never parsed: as the model wrote it
    if not isinstance(args, dict):
        return f"<action>{name} {raw}</action>"
    spec = _functions(tools).get(name)
    candidates: list[str] = []
    if spec is not None:
        props = _params(spec)[0]
        pair = _pair(name, props)
        if not args:
            candidates.append(name)
        if pair is not None and set(args) == set(pair["fields"]):
            left, right = (_bare(args[f]) for f in pair["fields"])
            if left is not None and right is not None:
                candidates.append(f"{name} {left} = {right}")
        if len(args) == 1:
            bare = _bare(next(iter(args.values())))
            if bare is not None:
                candidates.extend([bare, f"{name} {bare}"] if name == default_tool else [f"{name} {bare}"])
    for candidate in candidates:
        text = f"<action>{candidate}</action>"
        try:
            back = parse_actions(text, tools, default_tool=default_tool)
        except ActionSyntaxError:
            continue
        if len(back) == 1 and back[0]["function"]["name"] == name and json.loads(back[0]["function"]["arguments"]) == args:
            return text
    return f"<action>{name} {json.dumps(args, ensure_ascii=False).replace('</', '<' + chr(92) + '/')}</action>"


# -- the policy -----------------------------------------------------------------------------
class TextActionPolicy:
    """A `Policy` that speaks ``<action>`` text to `inner` and tool calls to the episode loop.

    Around each call of `inner` (any policy that answers text: `OpenAICompatiblePolicy` against
    a server without tool calling, `TransformersPolicy`): the system prompt gets
    `actions_prompt` of the tools offered, and `inner` is offered no tools; earlier tool calls
    are written back as ``<action>`` text, tool results as user text (``Result of NAME:``).
    The reply's actions become its tool calls and the text around them its content.

    A reply whose actions cannot be read comes back without tool calls (the loop counts an
    invalid action, nothing is called) and with the readable error appended to its content in
    ``<action_error>`` tags; on the next call the error is what `inner` reads in place of the
    loop's nudge (whose example is a tool call), so the model learns what to fix.

    `default_tool` names the tool an action without a verb goes to (`parse_actions`);
    ``"auto"``: the environment's tool when it offers just one, of one text parameter (ALFWorld's
    and TextWorld's ``act``), so ``<action>go to countertop 1</action>`` is read as the reference
    writes it.
    """

    def __init__(self, inner: Policy, *, default_tool: str | None = None) -> None:
        self.inner = inner
        self.default_tool = default_tool
        self._replies = 0

    def resolve_default_tool(self, tools: Sequence[Mapping[str, Any]]) -> str | None:
        """The tool an action without a verb goes to, among `tools` (None: such an action is refused)."""
        functions = _functions(tools)
        if self.default_tool != "auto":
            return self.default_tool if self.default_tool in functions else None
        env = [name for name in functions if name not in META_ACTIONS]
        if len(env) != 1:
            return None
        props, required = _params(functions[env[0]])
        target = _target(props, required)
        return env[0] if target is not None and _type(props[target]) == "string" else None

    def render_messages(self, messages: Sequence[ChatMessage], tools: Sequence[Mapping[str, Any]]) -> list[ChatMessage]:
        """The conversation as `inner` sees it: text only, the instruction block in the system prompt."""
        data = text_actions_data()
        default = self.resolve_default_tool(tools)
        block = actions_prompt(tools, default_tool=default)
        nudge = prompt_text("nudge")
        functions = _functions(tools)
        first = next(iter(functions.items()), None)
        example = _example(*first) if first else "verb argument"
        out: list[ChatMessage] = []
        names: dict[str, str] = {}
        pending: str | None = None
        system_done = False

        def user(text: str) -> None:
            if out and out[-1]["role"] == "user":
                out[-1]["content"] += "\n\n" + text
            else:
                out.append({"role": "user", "content": text})

        for message in messages:
            role = message.get("role")
            content = message.get("content")
            text = content if isinstance(content, str) else "" if content is None else str(content)
            if role == "system":
                if not system_done:
                    out.append({"role": "system", "content": f"{text}\n\n{block}" if text else block})
                    system_done = True
                else:
                    out.append({"role": "system", "content": text})
            elif role == "assistant":
                match = _ERROR_RE.search(text)
                if match:
                    text, pending = text[: match.start()], match.group(1)
                parts = [text.strip()] if text.strip() else []
                for call in message.get("tool_calls") or ():
                    names[str(call.get("id"))] = str((call.get("function") or {}).get("name"))
                    parts.append(render_action(call, tools, default_tool=default))
                out.append({"role": "assistant", "content": "\n".join(parts)})
            elif role == "tool":
                name = message.get("name") or names.get(str(message.get("tool_call_id")), "tool")
                user(data["result"].format(name=name, content=text))
            else:
                if text.strip() == nudge:
                    text = pending or data["nudge"].format(example=example)
                elif pending:
                    text = f"{pending}\n\n{text}"
                pending = None
                user(text)
        if pending:
            user(pending)
        if not system_done:
            out.insert(0, {"role": "system", "content": block})
        return out

    def read_reply(self, reply: Mapping[str, Any], tools: Sequence[Mapping[str, Any]]) -> ChatMessage:
        """`inner`'s reply as the loop reads it: the actions as tool calls, or the error."""
        self._replies += 1
        default = self.resolve_default_tool(tools)
        content = reply.get("content")
        text = content if isinstance(content, str) else ""
        if not _OPEN_RE.search(text) and reply.get("tool_calls"):
            # a server that called tools though none was offered: read them as the actions they are
            text = "\n".join([text, *(render_action(c, tools, default_tool=default) for c in reply["tool_calls"])]).strip()
        try:
            calls = parse_actions(text, tools, id_prefix=f"action_{self._replies}", default_tool=default)
            if not calls:
                first = next(iter(_functions(tools).items()), None)
                example = f"<action>{_example(*first)}</action>" if first else "<action>verb [argument]</action>"
                raise ActionSyntaxError(f"no <action>…</action> in the reply; expected one action, e.g. {example}")
        except ActionSyntaxError as exc:
            error = text_actions_data()["error"].format(problem=exc)
            return {"role": "assistant", "content": f"{text}\n\n<action_error>{error}</action_error>".lstrip()}
        return {"role": "assistant", "content": _outside(text), "tool_calls": calls}

    def complete(self, messages: list[ChatMessage], tools: list[dict[str, Any]]) -> ChatMessage:
        return self.read_reply(self.inner.complete(self.render_messages(messages, tools), []), tools)

    def complete_batch(self, requests: list[tuple[list[ChatMessage], list[dict[str, Any]]]]) -> list[ChatMessage]:
        """One reply per ``(messages, tools)`` request, through `inner`'s ``complete_batch`` when it has one."""
        rendered = [(self.render_messages(m, t), []) for m, t in requests]
        batch = getattr(self.inner, "complete_batch", None)
        replies = batch(rendered) if batch is not None else [self.inner.complete(m, t) for m, t in rendered]
        return [self.read_reply(r, t) for r, (_, t) in zip(replies, requests)]

    def count_prompt_tokens(self, messages: list[ChatMessage], tools: list[dict[str, Any]]) -> int | None:
        """`inner`'s exact count of the prompt it is sent (None when it has none)."""
        count = getattr(self.inner, "count_prompt_tokens", None)
        return count(self.render_messages(messages, tools), []) if count is not None else None
