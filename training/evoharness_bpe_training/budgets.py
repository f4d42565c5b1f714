"""Whether a run's per-episode budgets can hold the episodes it asks for.

A held-out episode is cut after ``--max-steps`` model calls and each reply after
``--max-new-tokens`` tokens. At a difficulty where the scripted expert itself needs more (at
difficulty 2 of `crm-migration` a batch is 25 ids, a reply of 197 SmolLM2 tokens, and a held-out
episode takes up to 55 calls), no policy can succeed the way it was taught, and a run that trains or evaluates there
measures the budget, not the policy. `expert_needs` measures what the expert's episodes take;
`budget_problems` says, in words, which budget falls short.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

__all__ = ["ExpertNeeds", "expert_needs", "budget_problems"]


@dataclass(frozen=True)
class ExpertNeeds:
    """At one difficulty: the model calls of the expert's longest episode and the tokens of its
    longest reply (the completion a policy generates after the tool-call prefill)."""

    difficulty: int
    episodes: int
    calls: int
    reply_tokens: int


def expert_needs(traces: Iterable[Any], tokenizer: Any, prefill: str,
                 chat_template_kwargs: dict[str, Any] | None = None) -> list[ExpertNeeds]:
    """`ExpertNeeds` per difficulty of the expert's `traces` (each trace's ``difficulty`` metadata,
    1 when absent), replies counted in `tokenizer`'s tokens as `completion_text` renders them."""
    from .exploration import completion_text

    calls: dict[int, list[int]] = {}
    tokens: dict[int, int] = {}
    for trace in traces:
        level = int(trace.metadata.get("difficulty") or 1)
        calls.setdefault(level, []).append(len(trace.model_calls))
        for call in trace.model_calls:
            if not call.response.get("tool_calls"):
                continue
            text = completion_text(tokenizer, call.response, prefill, chat_template_kwargs)
            count = len(tokenizer(text, add_special_tokens=False)["input_ids"])
            tokens[level] = max(tokens.get(level, 0), count)
    return [ExpertNeeds(level, len(calls[level]), max(calls[level]), tokens.get(level, 0)) for level in sorted(calls)]


def budget_problems(needs: Iterable[ExpertNeeds], max_steps: int, max_new_tokens: int) -> list[str]:
    """One sentence per difficulty whose expert episodes do not fit ``max_steps`` model calls or
    ``max_new_tokens`` tokens a reply, naming the flag that would make them fit."""
    problems = []
    for need in needs:
        short = []
        if need.calls > max_steps:
            short.append(f"episodes of up to {need.calls} model calls (--max-steps {max_steps})")
        if need.reply_tokens > max_new_tokens:
            short.append(f"replies of up to {need.reply_tokens} tokens (--max-new-tokens {max_new_tokens})")
        if short:
            problems.append(f"difficulty {need.difficulty}: the expert's {need.episodes} held-out episodes need "
                            f"{' and '.join(short)}; a policy acting as it does is cut there, so a failure at this "
                            f"difficulty measures the budget (--max-steps {max(need.calls, max_steps)} "
                            f"--max-new-tokens {max(need.reply_tokens, max_new_tokens)} hold them)")
    return problems
