"""Settings for the whole test suite, whichever part of it runs: Hypothesis profiles, skip policy.

A skip not on ``tests/skip-allowlist.txt`` fails. Every extra the tests use is installed by
``requirements-dev.txt``, so a skip usually means a broken install or a missing server. Such a
skip is turned into a failure (with its reason), so it counts in pytest's closing summary and
exit status instead of hiding among expected skips.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# Tests that do not fix their own example count use the active profile: "suite" by default;
# `pytest --hypothesis-profile=fuzz tests/test_fuzz.py` runs the long fuzzing campaign.
settings.register_profile("suite", max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("fuzz", max_examples=10_000, deadline=None, suppress_health_check=list(HealthCheck))
settings.load_profile("suite")

ALLOWLIST = Path(__file__).parent / "tests" / "skip-allowlist.txt"


def _allowed_reasons(path: Path = ALLOWLIST) -> list[str]:
    entries = []
    for raw in path.read_text("utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("unless "):
            condition, _, line = line[len("unless ") :].partition(":")
            var, _, value = condition.strip().partition("=")
            if os.environ.get(var) == value:
                continue
            line = line.strip()
        entries.append(line)
    return entries


def _enforce(report: pytest.CollectReport | pytest.TestReport) -> None:
    if not report.skipped or hasattr(report, "wasxfail"):
        return
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    if any(entry in reason for entry in _allowed_reasons()):
        return
    report.outcome = "failed"
    report.longrepr = f"unexpected skip (not on {ALLOWLIST.relative_to(Path(__file__).parent)}): {reason}"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # noqa: ANN201
    report = yield
    _enforce(report)
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector):  # noqa: ANN201
    report = yield
    _enforce(report)
    return report
