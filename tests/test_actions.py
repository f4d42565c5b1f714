"""The meta-action tool specs: OpenAI function format, texts from the prompt file, inline schemas."""

from __future__ import annotations

import json
from pathlib import Path

from evoharness_bpe import Workspace
from evoharness_bpe.actions import ARGUMENT_MODELS

HELP = json.loads((Path(__file__).resolve().parents[1] / "evoharness_bpe" / "prompts" / "meta_actions.json").read_text("utf-8"))


def test_specs_are_openai_functions_with_the_prompt_files_texts() -> None:
    specs = Workspace("g").openai_tools()
    assert [s["function"]["name"] for s in specs] == ["track", "commit", "recall", "note"]
    for spec in specs:
        assert set(spec) == {"type", "function"} and spec["type"] == "function"
        fn = spec["function"]
        assert set(fn) == {"name", "description", "parameters"}
        assert fn["description"] == HELP[fn["name"]]["description"]
        params = fn["parameters"]
        assert params["type"] == "object" and params["additionalProperties"] is False
        assert set(params["properties"]) == set(ARGUMENT_MODELS[fn["name"]].model_fields)
        for name, prop in params["properties"].items():
            assert prop["description"] == HELP[fn["name"]]["fields"][name]
            assert "title" not in prop and "$ref" not in prop  # inline, as models read them best
        want = [n for n, f in ARGUMENT_MODELS[fn["name"]].model_fields.items() if f.is_required()]
        assert sorted(params["required"]) == sorted(want)


def test_enums_are_inlined_with_their_values() -> None:
    commit = next(s["function"]["parameters"] for s in Workspace("g").openai_tools() if s["function"]["name"] == "commit")
    status = commit["properties"]["status"]
    assert status["enum"] == ["todo", "doing", "done", "failed", "blocked"] and status["type"] == "string"
    assert commit["required"] == ["subgoal", "status"]
    assert "$defs" not in json.dumps(commit)


TRACK = "track(key: string, value: string or null, source: string (optional), confidence: number (optional))"


def _refusal(name: object, arguments: object):
    import pytest

    from evoharness_bpe.actions import parse_arguments
    from evoharness_bpe.exceptions import MetaActionError

    with pytest.raises(MetaActionError) as info:
        parse_arguments(name, arguments)  # type: ignore[arg-type]
    return info.value


def test_refusals_name_the_action_the_field_and_the_signature() -> None:
    unknown = _refusal("bogus", {})
    assert str(unknown) == "unknown meta-action 'bogus'; available: track, commit, recall, note" and unknown.action == "bogus"
    status = _refusal("commit", {"subgoal": "a", "status": "x"})
    assert status.action == "commit" and status.field == "status"
    assert str(status) == ("invalid arguments for commit: field 'status': Input should be 'todo', 'doing', 'done', 'failed' "
                           "or 'blocked'. Expected commit(subgoal: string, status: todo|doing|done|failed|blocked, "
                           "note: string or null (optional))")
    missing = _refusal("track", None)  # no arguments at all: the missing fields, not a type error
    assert str(missing) == f"invalid arguments for track: missing required field 'key'; missing required field 'value'. Expected {TRACK}"
    assert missing.field == "key"
    extra = _refusal("track", {"key": "k", "value": "v", "zz": 1})
    assert str(extra) == f"invalid arguments for track: unexpected field 'zz'. Expected {TRACK}" and extra.field == "zz"
    listed = _refusal("track", "[1]")
    assert str(listed) == f"arguments must be a JSON object, got list; expected {TRACK}" and listed.action == "track"
    assert _refusal("track", "").field == "key"
    assert "pydantic" not in str(_refusal("recall", {"query": "x", "k": "three"}))  # no documentation URLs


def test_argument_text_is_limited_and_must_be_json_values() -> None:
    from evoharness_bpe.actions import MAX_ARGUMENT_CHARS, parse_arguments

    head = '{"key": "k", "value": "v"'
    at_limit = head + " " * (MAX_ARGUMENT_CHARS - len(head) - 1) + "}"  # JSON whitespace pads it
    assert len(at_limit) == MAX_ARGUMENT_CHARS and parse_arguments("track", at_limit).value == "v"
    too_long = _refusal("track", at_limit[:-1] + " }")
    assert str(too_long) == f"arguments are {MAX_ARGUMENT_CHARS + 1} characters long; the limit is {MAX_ARGUMENT_CHARS}"
    assert too_long.action == "track"
    broken = _refusal("note", {"text": "\ud800"})
    assert str(broken).startswith("arguments must be JSON values in valid UTF-8; expected note(") and broken.action == "note"
    torn = _refusal("track", '{"key": ')
    assert str(torn).startswith("arguments are not valid JSON (") and str(torn).endswith(f"expected a JSON object for {TRACK}")
