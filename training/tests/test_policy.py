"""TransformersPolicy plays an episode through the core contracts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from evoharness_bpe.policy import Policy


def test_a_local_model_plays_an_episode(tiny_dir, locker_env_cls) -> None:
    from evoharness_bpe_training.episodes import run_bpe_episode
    from evoharness_bpe_training.models import load_model_and_tokenizer
    from evoharness_bpe_training.policy import TransformersPolicy

    model, tokenizer = load_model_and_tokenizer("tiny", cache_dir=tiny_dir)
    policy = TransformersPolicy(model, tokenizer, max_new_tokens=6)
    assert isinstance(policy, Policy)
    trace = run_bpe_episode(locker_env_cls(1), policy, seed=3, max_steps=2)
    assert trace.model_calls and trace.model_calls[0].response["role"] == "assistant"
    assert trace.outcome.success is False and trace.metadata == {"seed": 3, "difficulty": 1}
    assert trace.model_calls[0].messages[0]["role"] == "system"


def test_miniature_script_documents_itself() -> None:
    script = Path(__file__).parents[2] / "examples" / "reproduce_miniature.py"
    out = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, check=True)
    assert "--expert-traces" in out.stdout
