"""Consolidation data: a teacher model condenses an episode's Experience; pairs become SFT rows.

For each trace with notes, the *before* text (task, outcome, the notes the episode wrote) goes
to a strong model behind an OpenAI-compatible ``/chat/completions`` endpoint (vLLM, TGI,
llama.cpp's server, a hosted API); its answer is the *after* text. Each (before, after) pair is
one prompt-completion row, so a small policy can learn to consolidate its own Experience.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from functools import cache
from pathlib import Path
from typing import Any

from evoharness_bpe import Trace
from evoharness_bpe.exceptions import EvoHarnessError, UserError

__all__ = ["TeacherError", "TeacherClient", "consolidation_prompt", "experience_before", "consolidation_dataset"]


class TeacherError(EvoHarnessError, RuntimeError):
    """The teacher endpoint failed or answered something that is not a chat completion."""


@cache
def consolidation_prompt() -> str:
    """The teacher's instructions (``prompts/consolidate.txt``)."""
    return (Path(__file__).parent / "prompts" / "consolidate.txt").read_text("utf-8").strip()


class TeacherClient:
    """A minimal OpenAI-compatible chat client (standard library only)."""

    def __init__(self, base_url: str, *, model: str = "teacher", api_key: str | None = None, timeout: float = 120.0) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise UserError(f"teacher base URL must start with http:// or https://, got {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self.timeout = timeout

    def complete(self, messages: list[dict[str, Any]], *, temperature: float = 0.0, max_tokens: int = 512) -> str:
        """The content of the teacher's reply to `messages`."""
        body = json.dumps({"model": self.model, "messages": messages, "temperature": temperature, "max_tokens": max_tokens}).encode()
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        request = urllib.request.Request(f"{self.base_url}/chat/completions", data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                payload = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            raise TeacherError(f"teacher answered HTTP {exc.code}: {exc.read()[:300]!r}") from exc
        except (urllib.error.URLError, TimeoutError, ValueError) as exc:
            raise TeacherError(f"teacher at {self.base_url} failed: {exc}") from exc
        try:
            content = payload["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError):
            raise TeacherError(f"teacher reply is not a chat completion: {str(payload)[:300]}") from None
        if not isinstance(content, str) or not content.strip():
            raise TeacherError("teacher returned an empty reply")
        return content.strip()


def experience_before(trace: Trace) -> str | None:
    """The episode's raw Experience as text (task, outcome, its notes), or None without notes."""
    notes = []
    for event in trace.meta_actions:
        if event.name == "note" and event.ok:
            try:
                args = json.loads(event.arguments)
            except ValueError:
                continue
            if isinstance(args, dict) and args.get("text"):
                notes.append(f"- {args.get('kind', 'lesson')}: {args['text']}")
    if not notes:
        return None
    outcome = {True: "succeeded", False: "failed"}.get(trace.outcome.success, "unknown outcome")
    return f"Task: {trace.task}\nOutcome: {outcome}\nNotes written:\n" + "\n".join(notes)


def consolidation_dataset(traces, teacher: TeacherClient, *, out_dir: str | os.PathLike[str] | None = None, eval_fraction: float = 0.1, seed: int = 0):
    """Ask `teacher` to condense each trace's notes; return (and optionally write) a `DatasetDict`."""
    import random

    from datasets import Dataset, DatasetDict
    from rich.progress import track

    from .datasets import export_dataset, load_traces

    system = consolidation_prompt()
    pending = [(t, before) for t in load_traces(traces) if (before := experience_before(t)) is not None]
    if not pending:
        raise UserError("no trace wrote any note; there is no Experience to consolidate")
    rows = []
    for trace, before in track(pending, description="consolidating", transient=True):
        prompt = [{"role": "system", "content": system}, {"role": "user", "content": before}]
        after = teacher.complete(prompt)
        rows.append({"prompt": prompt, "completion": [{"role": "assistant", "content": after}], "tools": "[]", "episode_id": trace.episode_id})
    order = list(range(len(rows)))
    random.Random(seed).shuffle(order)
    n_eval = min(len(rows) - 1, round(eval_fraction * len(rows))) if len(rows) > 1 else 0
    full = Dataset.from_list(rows)
    dataset = DatasetDict({"train": full.select(sorted(order[n_eval:])), "eval": full.select(sorted(order[:n_eval]))})
    if out_dir is not None:
        export_dataset(dataset, out_dir)
    return dataset
