"""Help and output that read well: every `evoharness ... --help` shows a default only where there
is one, once; `evoharness demo` says where it wrote and its token totals agree with its dashboards."""

from __future__ import annotations

import argparse
import contextlib
import io
import re
from pathlib import Path

import pytest

from evoharness_bpe.lab.cli import DefaultsHelpFormatter, build_parser
from evoharness_bpe.lab.demo import run_demo


def _help(*command: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        if command[:1] == ("train",):
            from evoharness_bpe_training.cli import parse_train_args

            parse_train_args(command[1], ["--help"])
        else:
            build_parser().parse_args([*command, "--help"])
    return " ".join(out.getvalue().split())


# reproduce's parser is registered by the training package; its help is checked there
COMMANDS = [("demo",), ("run",), ("report",), ("view",), ("consolidate",), ("export",), ("mcp",),
            ("train", "sft"), ("train", "grpo")]


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_help_shows_a_default_only_where_there_is_one_and_once(command: tuple[str, ...]) -> None:
    text = _help(*command)
    assert "(default: None)" not in text and "(default: False)" not in text and "(default: [])" not in text
    doubled = re.findall(r"default[^()]{0,80}\)[ .]*\(default: [^)]*\)", text, flags=re.IGNORECASE)
    assert not doubled, doubled
    assert not re.search(r"defaults to [^.]*\. \(default:", text, flags=re.IGNORECASE)


def test_run_help_keeps_the_defaults_worth_showing() -> None:
    text = _help("run")
    assert "(default: http://127.0.0.1:8000/v1)" in text and "(default: evoharness-run)" in text
    assert "default: $OPENAI_API_KEY)" in text and "$OPENAI_API_KEY) (default" not in text


def test_the_formatter_leaves_switches_and_unset_options_alone() -> None:
    parser = argparse.ArgumentParser(prog="x", formatter_class=DefaultsHelpFormatter)
    parser.add_argument("--flag", action="store_true", help="a switch")
    parser.add_argument("--name", help="a name")
    parser.add_argument("--key", help="a key (default: $KEY)")
    parser.add_argument("--steps", type=int, default=3, help="steps")
    text = " ".join(parser.format_help().split())
    assert "a switch --name" in text and "a name --key" in text and "a key (default: $KEY) --steps" in text
    assert "steps (default: 3)" in text


def test_demo_says_where_it_wrote_and_its_totals_agree_with_its_dashboards(tmp_path: Path) -> None:
    lines: list[str] = []
    path = run_demo(tmp_path / "demo", echo=lines.append)
    text = "\n".join(lines)
    last_cost = re.findall(r"COST: \d+ meta-actions \(\d+ invalid\), (\d+) harness tokens, (\d+) dashboards", text)[-1]
    total = re.search(r"(\d+) harness tokens in all: (\d+) as the last dashboard counts them .* plus its own (\d+)\.", text)
    assert total is not None, text[-400:]
    assert int(total.group(2)) == int(last_cost[0])                        # the figure the last dashboard shows
    assert int(total.group(1)) == int(total.group(2)) + int(total.group(3))
    wrote = lines[-1]
    assert wrote.startswith(f"wrote {path} ") and str(tmp_path / "demo" / "experience.db") in wrote
    assert path.exists() and (tmp_path / "demo" / "experience.db").exists()
