"""Episode fingerprints: a hash of everything that changes what the policy sees.

Every finished episode of `evoharness run` carries one (``Trace.metadata["fingerprint"]``);
``--resume`` skips an episode only when a finished one has the same fingerprint, and reruns it
otherwise. What goes in: the episode's whole `EpisodeConfig` (harness, its part switches and
step budget, seed, step limit, window, namespace, dashboard budget, system prompt, spec style),
the prompt data files, the package version, the framework, the environment (name, class,
difficulty, TextWorld game files), the policy (kind and what shapes its replies: the noisy
expert's mistake rate, the local model's files and reply length, the endpoint's model and
sampling settings — never an API key — and, with ``<action>`` text, the syntax and its texts),
the bank mode, and, when the bank is frozen, the hash of what the Experience namespace holds.
What does not change the policy's inputs (the output folder, progress, retries) stays out.
"""

from __future__ import annotations

import hashlib
import json
import os
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from ... import __version__
from ..frameworks import EpisodeConfig

__all__ = ["episode_fingerprint", "policy_identity", "prompts_hash", "file_hash"]


@cache
def prompts_hash() -> str:
    """A SHA-256 over the prompt data files (names and bytes) of `evoharness_bpe.prompts`."""
    digest = hashlib.sha256()
    folder = resources.files("evoharness_bpe.prompts")
    for item in sorted(folder.iterdir(), key=lambda p: p.name):
        if item.is_file() and not item.name.endswith((".py", ".pyc")):
            digest.update(item.name.encode() + b"\0" + item.read_bytes() + b"\0")
    return digest.hexdigest()


def file_hash(path: str | os.PathLike[str]) -> str:
    """A SHA-256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def policy_identity(kind: str, config: Any) -> dict[str, Any]:
    """What about the policy of `kind` changes its replies, from a `RunConfig`-like `config`.

    A local model folder is named by its resolved path and each file's name, size and
    modification time (hashing gigabytes of weights per run would cost more than the check is
    worth); an endpoint by its model, URL and the sampling settings its calls use.
    """
    if kind == "expert":
        return {"kind": kind}
    if kind == "noisy":
        return {"kind": kind, "epsilon": config.epsilon}
    identity = _policy_identity(kind, config)
    if getattr(config, "action_syntax", "tools") == "text":  # tool-call runs keep the fingerprints they had
        from ..policies.textactions import text_actions_data  # noqa: PLC0415

        identity["action_syntax"] = {"syntax": "text", "texts": text_actions_data()}
    return identity


def _policy_identity(kind: str, config: Any) -> dict[str, Any]:
    if kind in ("trained", "base"):
        from .suite import trained_adapter  # noqa: PLC0415

        folder = Path(trained_adapter(config)).resolve()
        files = sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in folder.iterdir() if p.is_file())
        return {"kind": kind, "adapter": str(folder), "files": files}
    if kind == "local":
        folder = Path(str(config.model)).resolve()
        files = sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in folder.iterdir() if p.is_file()) \
            if folder.is_dir() else []
        return {"kind": kind, "model": str(folder), "files": files, "max_new_tokens": config.max_new_tokens}
    from ...endpoint import EndpointSettings  # noqa: PLC0415

    settings = EndpointSettings.from_env(model=config.model, base_url=config.base_url)
    return {"kind": kind, "model": settings.model, "base_url": settings.base_url, "max_tokens": settings.max_tokens,
            "temperature": settings.temperature, "tool_choice": settings.tool_choice,
            "null_content": settings.null_content, "max_tokens_field": settings.max_tokens_field}


def episode_fingerprint(
    *,
    env: Any,
    env_name: str,
    difficulty: int,
    framework: str,
    policy: dict[str, Any],
    episode: EpisodeConfig,
    bank: str = "live",
    bank_hash: str | None = None,
    games: list[str] | None = None,
) -> str:
    """The fingerprint of one planned episode (24 hex digits of a SHA-256)."""
    payload = {
        "version": __version__,
        "prompts": prompts_hash(),
        "framework": framework,
        "env": {"name": env_name, "class": f"{type(env).__module__}.{type(env).__qualname__}", "difficulty": difficulty,
                "games": [file_hash(g) for g in games or ()]},
        "policy": policy,
        "episode": episode.model_dump(mode="json"),
        "bank": bank,
        "bank_hash": bank_hash,
    }
    text = json.dumps(payload, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:24]
