"""Which failures of an episode are the infrastructure's, not the policy's.

A model server that answers 5xx, 408 or 429, times out or cannot be reached says nothing about
the task: `evoharness run` retries such an episode and, when the retries run out, reports it
apart (``metrics.json`` ``infrastructure_errors``, a section of the report), never as a task
failure. Any other 4xx (a wrong key, model or URL) is a configuration error and stops the run.
"""

from __future__ import annotations

from typing import Any

__all__ = ["is_infrastructure_error", "failure_record"]

_RETRYABLE_STATUS = frozenset({408, 429})


def is_infrastructure_error(exc: BaseException) -> bool:
    """Whether `exc` is a model endpoint's server error, timeout or unreachability."""
    from ..policies.openai import PolicyError  # noqa: PLC0415 - the openai SDK itself stays unimported

    if not isinstance(exc, PolicyError):
        return False
    status = getattr(exc.__cause__, "status_code", None)
    return status is None or status >= 500 or status in _RETRYABLE_STATUS


def failure_record(combo: tuple[str, str, str, str], seed: int, attempts: int, exc: BaseException) -> dict[str, Any]:
    """What the run reports about an episode that failed for infrastructure reasons."""
    env, policy, harness, framework = combo
    return {"env": env, "policy": policy, "harness": harness, "framework": framework, "seed": seed,
            "attempts": attempts, "error": f"{type(exc).__name__}: {exc}"[:300]}
