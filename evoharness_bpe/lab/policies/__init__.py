"""Policies: scripted experts, a local Hugging Face model, any OpenAI-compatible endpoint.

`TextActionPolicy` wraps a policy that answers text so that it acts with
``<action>verb [argument]</action>`` instead of tool calls.

The model-backed policies import their dependencies lazily (``transformers``/``torch`` only when a
`TransformersPolicy` is built).
"""

from .expert import ExpertPolicy
from .noisy import NoisyExpertPolicy
from .openai import OpenAICompatiblePolicy
from .textactions import ActionSyntaxError, TextActionPolicy, actions_prompt, parse_actions, render_action
from .toolcalls import parse_tool_calls, tools_system_prompt
from .transformers import TransformersPolicy, embedded_model_dir

__all__ = [
    "ExpertPolicy",
    "NoisyExpertPolicy",
    "TransformersPolicy",
    "OpenAICompatiblePolicy",
    "TextActionPolicy",
    "ActionSyntaxError",
    "actions_prompt",
    "parse_actions",
    "render_action",
    "embedded_model_dir",
    "parse_tool_calls",
    "tools_system_prompt",
]
