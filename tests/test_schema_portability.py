"""Every tool schema the project sends, held against the rules of common constrained decoders.

The rule sets are written down here from the decoders' documentation and sources:

- OpenAI strict mode (Structured Outputs): the keyword subset it accepts; every object closes
  with ``additionalProperties: false``; the root is an object, not an ``anyOf``.
- llama.cpp's JSON-schema grammar (``json_schema_to_grammar``, llama-cpp-python's port):
  repetition bounds (``minLength``/``maxLength``/``minItems``/``maxItems``) expand into one rule
  per repetition, and large ones overflow the grammar ("number of rules ... exceeds sane
  defaults"; llama-cpp-python then segfaults); ``pattern`` is partial; numeric ranges are not
  supported by the Python port.
- xgrammar (vLLM's default guided decoding): vLLM falls back or refuses on ``multipleOf``,
  ``uniqueItems``, ``contains``, ``minContains``/``maxContains``, ``minProperties``/
  ``maxProperties``, ``propertyNames``, ``patternProperties`` and string ``format``; older vLLM
  releases also refused string ``pattern``/``minLength``/``maxLength`` and numeric ranges.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from evoharness_bpe import Workspace
from evoharness_bpe.actions import PORTABLE_KEYWORDS, portable_schema, tool_specs
from evoharness_bpe.lab.envs import make_env

OPENAI_STRICT = frozenset({"type", "properties", "required", "additionalProperties", "items", "enum", "const",
                           "anyOf", "description", "$ref", "$defs"})
LLAMA_CPP_REJECTS = frozenset({"minLength", "maxLength", "minItems", "maxItems", "pattern", "minimum", "maximum",
                               "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "format", "not", "if", "then",
                               "else", "dependentSchemas", "patternProperties", "unevaluatedProperties"})
XGRAMMAR_REJECTS = frozenset({"multipleOf", "uniqueItems", "contains", "minContains", "maxContains", "minProperties",
                              "maxProperties", "propertyNames", "patternProperties", "format", "pattern", "minLength",
                              "maxLength", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})
DECODERS = {"openai-strict": ("allowed", OPENAI_STRICT), "llama.cpp": ("rejected", LLAMA_CPP_REJECTS),
            "xgrammar": ("rejected", XGRAMMAR_REJECTS)}


def _schemas() -> Iterator[tuple[str, dict[str, Any]]]:
    for spec in tool_specs():
        yield f"meta.{spec.name}", spec.parameters
    for spec in Workspace("x").openai_tools():
        yield f"openai.{spec['function']['name']}", spec["function"]["parameters"]
    for env in ("crm-migration", "compliance-review"):
        for tool in make_env(env, 1).tools():
            yield f"{env}.{tool['function']['name']}", tool["function"]["parameters"]


def _nodes(schema: Any, path: str = "$") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every schema node (not the property-name maps) with its path."""
    if not isinstance(schema, dict):
        return
    yield path, schema
    for name, prop in (schema.get("properties") or {}).items():
        yield from _nodes(prop, f"{path}.{name}")
    if isinstance(schema.get("items"), dict):
        yield from _nodes(schema["items"], f"{path}[]")
    for n, branch in enumerate(schema.get("anyOf") or []):
        yield from _nodes(branch, f"{path}|{n}")


def violations(schema: dict[str, Any], decoder: str) -> list[str]:
    kind, words = DECODERS[decoder]
    found = []
    for path, node in _nodes(schema):
        keys = set(node)
        bad = keys - words if kind == "allowed" else keys & words
        found += [f"{path}: {k}" for k in sorted(bad)]
        if decoder == "openai-strict" and (node.get("type") == "object" or "properties" in node):
            if node.get("additionalProperties") is not False:
                found.append(f"{path}: an object without additionalProperties: false")
    if decoder == "openai-strict" and schema.get("type") != "object":
        found.append("$: the root must be an object")
    return found


SCHEMAS = list(_schemas())


@pytest.mark.parametrize("decoder", sorted(DECODERS))
@pytest.mark.parametrize(("name", "schema"), SCHEMAS, ids=[n for n, _ in SCHEMAS])
def test_every_sent_schema_is_accepted(name: str, schema: dict[str, Any], decoder: str) -> None:
    assert violations(schema, decoder) == []


def test_the_rules_catch_what_broke_llama_cpp() -> None:
    # the schema of track before: a maxLength of 4000 inside an anyOf
    old = {"type": "object", "additionalProperties": False, "required": ["value"],
           "properties": {"value": {"anyOf": [{"type": "string", "maxLength": 4000}, {"type": "null"}], "default": None}}}
    assert violations(old, "llama.cpp") == ["$.value|0: maxLength"]
    assert "$.value: default" in violations(old, "openai-strict")
    assert violations(portable_schema(old), "llama.cpp") == violations(portable_schema(old), "openai-strict") == []


def test_portable_keywords_pass_every_decoder() -> None:
    assert PORTABLE_KEYWORDS <= OPENAI_STRICT
    assert not PORTABLE_KEYWORDS & (LLAMA_CPP_REJECTS | XGRAMMAR_REJECTS)


@pytest.mark.parametrize(("action", "args", "field"), [
    ("track", {"key": "k", "value": "v" * 4001}, "value"),
    ("note", {"text": "t" * 2001}, "text"),
    ("note", {"text": "t", "tags": ["x" * 41]}, "tags"),
    ("recall", {"query": "q", "k": 11}, "k"),
    ("track", {"key": "k", "value": "v", "confidence": 1.5}, "confidence"),
])
def test_limits_left_out_of_the_schema_are_still_enforced(action: str, args: dict[str, Any], field: str) -> None:
    ws = Workspace("limits")
    before = ws.state.model_dump_json()
    result = ws.act(action, args)
    assert not result.ok and field in result.content and "Expected" in result.content
    assert ws.state.model_dump_json() == before  # nothing changed
