"""Guided exploration for step-level GRPO: groups that always hold the choice not to consult.

A policy fine-tuned on traces that consult at every decision rarely samples a skip (measured on
the CPU reproduction: P(skip) median 0.003 at its consulting states), so a group's samples all
consult, their continuations all cost the same, and GRPO has nothing to prefer. Here the last
`samples` of each group are the state's *skip*: the next environment action its episode took
(or, with the skipped meta-actions narrowed, its next action of another kind), in place of the
meta-action. The group then compares consulting with acting at every state; where
the skip still succeeds for less, its advantage is positive and GRPO raises its probability,
where it fails, consulting is reinforced.

`skip_action` finds a state's skip in its recorded episode, `completion_text` renders it as the
policy writes it after the prefill, and `SkipExploration` (TRL's ``rollout_func``) puts it in
the groups.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Sequence
from typing import Any

from evoharness_bpe import META_ACTIONS, Trace
from evoharness_bpe.exceptions import UserError

from .continuation import _called

__all__ = ["skip_action", "completion_text", "SkipExploration"]

ChatMessage = dict[str, Any]


def skip_action(trace: Trace, position: int, skipped: Collection[str] = META_ACTIONS) -> ChatMessage | None:
    """The first action `trace` took after model call `position` that is not one of the `skipped`
    meta-actions (by default any meta-action: the first environment action; replies that call no
    tool passed over): what the policy does once it has consulted, taken instead. None if the
    episode took none.

    With `skipped` narrowed to ``recall, note, track``, skipping the opening recall lands on the
    plan's first ``commit``, not on the environment action after the whole plan."""
    for call in trace.model_calls[position + 1:]:
        name = _called(call.response)
        if name and name not in skipped:
            return call.response
    return None


def completion_text(tokenizer: Any, reply: ChatMessage, prefill: str, chat_template_kwargs: dict[str, Any] | None = None) -> str:
    """`reply` as a GRPO completion: the chat template's rendering of the call after `prefill`, up
    to and including the end of its first line (where a sampled one-line call stops)."""
    messages = [{"role": "user", "content": "."}, {**reply, "content": reply.get("content") or ""}]
    rendered = tokenizer.apply_chat_template(messages, tokenize=False, **(chat_template_kwargs or {}))
    start = rendered.rfind(prefill)
    if not prefill or start < 0:
        raise UserError(f"the chat template does not render a call after the prefill {prefill!r}; no skip sample can be made")
    start += len(prefill)
    end = rendered.find("\n", start)
    return rendered[start:] if end < 0 else rendered[start:end + 1]


class SkipExploration:
    """TRL ``rollout_func``: each group sampled from the policy, its last `samples` the state's skip.

    `skips` maps a prompt to its skip's completion text (`completion_text`); prompts without one
    are sampled whole. Only the sampled completions are generated. The extra field ``forced``
    (reaching the reward functions) tells the injected samples apart. Under vLLM an injected
    completion's sampling logprobs are NaN: TRL then leaves its importance ratio at 1.
    """

    def __init__(self, skips: dict[str, str], samples: int, tokenizer: Any) -> None:
        if samples < 1:
            raise UserError(f"SkipExploration needs at least one skip sample per group, got {samples}")
        self.skips = dict(skips)
        self.samples = samples
        self.tokenizer = tokenizer
        self.__name__ = "skip_exploration"

    def forced(self, prompts: Sequence[Any], group: int) -> list[bool]:
        """Which of `prompts` (each repeated `group` times, as GRPO's sampler draws them) get the skip."""
        if self.samples >= group:
            raise UserError(f"{self.samples} skip samples leave no sampled action in groups of {group}")
        seen: Counter[str] = Counter()
        forced = []
        for prompt in prompts:
            key = str(prompt)
            seen[key] += 1
            forced.append(key in self.skips and (seen[key] - 1) % group >= group - self.samples)
        return forced

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, Any]:
        prompt_ids, images, fields = trainer._tokenize_prompts(prompts)
        if images is not None or fields:
            raise UserError("skip exploration takes text prompts (step-level GRPO's rendered states), not images")
        forced = self.forced(prompts, int(trainer.num_generations))
        sampled = [n for n, is_forced in enumerate(forced) if not is_forced]
        generated, logprobs = trainer._generate_single_turn([prompt_ids[n] for n in sampled], None, {}, num_generations=1)
        completion_ids = [self.tokenizer(self.skips[str(prompt)], add_special_tokens=False)["input_ids"] if is_forced else []
                          for prompt, is_forced in zip(prompts, forced, strict=True)]
        for n, ids in zip(sampled, generated, strict=True):
            completion_ids[n] = [int(t) for t in ids]
        all_logprobs = None
        if logprobs is not None:
            all_logprobs = [[float("nan")] * len(ids) for ids in completion_ids]  # forced: no sampling logprob
            for n, lps in zip(sampled, logprobs, strict=True):
                all_logprobs[n] = list(lps)
        return {"prompt_ids": [list(ids) for ids in prompt_ids], "completion_ids": completion_ids, "logprobs": all_logprobs,
                "forced": forced}
