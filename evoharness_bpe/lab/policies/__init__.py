"""Policies: scripted experts, a local Hugging Face model, any OpenAI-compatible endpoint.

The model-backed policies import their dependencies lazily (``transformers``/``torch`` only when a
`TransformersPolicy` is built).
"""

from .expert import ExpertPolicy
from .noisy import NoisyExpertPolicy
from .openai import OpenAICompatiblePolicy
from .toolcalls import parse_tool_calls, tools_system_prompt
from .transformers import TransformersPolicy, embedded_model_dir

__all__ = [
    "ExpertPolicy",
    "NoisyExpertPolicy",
    "TransformersPolicy",
    "OpenAICompatiblePolicy",
    "embedded_model_dir",
    "parse_tool_calls",
    "tools_system_prompt",
]
