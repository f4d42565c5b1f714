"""The suite's skip policy (conftest.py): only skips on tests/skip-allowlist.txt pass."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # runs pytest in subprocesses

ROOT = Path(__file__).resolve().parents[1]

TESTS = '''
import pytest

def test_passes():
    assert True

def test_unexpected_skip():
    pytest.skip("the widget extra is not installed")

@pytest.mark.skipif(True, reason="no GPU here")
def test_marked_skip():
    pass

def test_allowed_skip():
    pytest.skip("no PostgreSQL server: set EVOHARNESS_TEST_POSTGRES_DSN")

@pytest.mark.xfail(reason="known bug", strict=True)
def test_expected_failure():
    assert False
'''


def _run(tmp_path: Path, tests: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    shutil.copy(ROOT / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "tests").mkdir(exist_ok=True)
    shutil.copy(ROOT / "tests" / "skip-allowlist.txt", tmp_path / "tests" / "skip-allowlist.txt")
    (tmp_path / "pytest.ini").write_text("[pytest]\n", "utf-8")
    (tmp_path / "test_sample.py").write_text(textwrap.dedent(tests), "utf-8")
    clean = {k: v for k, v in __import__("os").environ.items() if not k.startswith("EVOHARNESS_")}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rs"], cwd=tmp_path,
                          env={**clean, **(env or {})}, capture_output=True, text=True, timeout=120)


def test_unlisted_skips_fail_and_listed_ones_pass(tmp_path: Path) -> None:
    out = _run(tmp_path, TESTS)
    assert out.returncode == 1, out.stdout
    last = out.stdout.strip().splitlines()[-1]
    # a skip in the test body fails it; a skip mark (setup) errors it; the allowed skip stays a skip
    assert "1 failed, 1 passed, 1 skipped, 1 xfailed, 1 error" in last, out.stdout
    assert "unexpected skip (not on tests/skip-allowlist.txt): Skipped: the widget extra is not installed" in out.stdout
    assert "unexpected skip (not on tests/skip-allowlist.txt): Skipped: no GPU here" in out.stdout


def test_an_entry_can_be_voided_by_the_environment(tmp_path: Path) -> None:
    allowed_only = "import pytest\n\ndef test_allowed_skip():\n    pytest.skip('no PostgreSQL server: set it')\n"
    assert _run(tmp_path, allowed_only).returncode == 0
    required = _run(tmp_path, allowed_only, env={"EVOHARNESS_REQUIRE_POSTGRES": "1"})
    assert required.returncode == 1 and "1 failed" in required.stdout.strip().splitlines()[-1]


def test_a_module_level_skip_fails_collection(tmp_path: Path) -> None:
    out = _run(tmp_path, "import pytest\n\npytest.importorskip('no_such_module_anywhere')\n\ndef test_x():\n    pass\n")
    assert out.returncode == 2 and "1 error during collection" in out.stdout  # pytest's exit status for it
    assert "unexpected skip" in out.stdout and "no_such_module_anywhere" in out.stdout
