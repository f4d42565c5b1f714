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
