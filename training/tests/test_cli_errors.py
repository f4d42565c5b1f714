"""Bad input to ``export`` and ``train`` through the real command line: one line that names the flag, no traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from evoharness_bpe import TraceWriter


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "evoharness_bpe_training.cli", *args], capture_output=True, text=True, timeout=300)


def _one_line(out: subprocess.CompletedProcess, *words: str) -> str:
    assert out.returncode == 1, out.stderr
    assert "Traceback" not in out.stderr and "Traceback" not in out.stdout
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("evoharness: error: "), out.stderr
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def places(tmp_path_factory, sft_traces) -> dict[str, Path]:
    from evoharness_bpe.lab.envs import make_env
    from evoharness_bpe.lab.frameworks import EpisodeConfig
    from evoharness_bpe.lab.registry import load_framework
    from evoharness_bpe.testing.scripted import ScriptedPolicy, tool_call

    root = tmp_path_factory.mktemp("cli-errors")
    traces = root / "traces.jsonl"
    with TraceWriter(traces) as writer:
        for trace in sft_traces:
            writer.write(trace)
    failed = root / "failed.jsonl"
    with TraceWriter(failed) as writer:
        policy = ScriptedPolicy([tool_call("track", {"key": "plan", "value": "later"})], final="Done.")  # gives up
        writer.write(load_framework("core")(make_env("crm-migration", 1), policy, None, EpisodeConfig(seed=0)))
    a_file = root / "a-file.txt"
    a_file.write_text("not a folder")
    (root / "empty-model").mkdir()
    (root / "bad-model").mkdir()
    (root / "bad-model" / "config.json").write_text('{"model_type": "no-such-architecture"}')
    return {"traces": traces, "failed": failed, "file": a_file, "root": root}


UNUSABLE_OUT = {
    "an existing file": (lambda p: p["file"], "is a file"),
    "a path under a file": (lambda p: p["file"] / "out", "which is a file"),
    "an unwritable place": (lambda p: Path("/proc/evoharness-out"), "cannot be written"),
}


@pytest.mark.parametrize("case", sorted(UNUSABLE_OUT))
def test_export_refuses_an_unusable_out(places, case: str) -> None:
    where, words = UNUSABLE_OUT[case]
    out = _cli("export", str(places["traces"]), "--out", str(where(places)))
    _one_line(out, "--out", words)


@pytest.mark.parametrize("case", sorted(UNUSABLE_OUT))
def test_train_sft_refuses_an_unusable_output_dir(places, case: str) -> None:
    where, words = UNUSABLE_OUT[case]
    out = _cli("train", "sft", "--traces", str(places["traces"]), "--output-dir", str(where(places)))
    _one_line(out, "--output-dir", words)


@pytest.mark.parametrize("folder,words", [("empty-model", "holds no model"), ("bad-model", "not a model config"),
                                          ("missing-model", "no such folder"), ("a-file.txt", "not a folder")])
def test_train_refuses_a_model_folder_that_holds_no_model(places, folder: str, words: str) -> None:
    out = _cli("train", "sft", "--traces", str(places["traces"]), "--model", str(places["root"] / folder),
               "--output-dir", str(places["root"] / "runs"))
    _one_line(out, "--model", words)


def test_errors_speak_the_flags(places) -> None:
    _one_line(_cli("export", str(places["failed"]), "--out", str(places["root"] / "export")), "--all")
    _one_line(_cli("train", "sft", "--traces", str(places["failed"]), "--output-dir", str(places["root"] / "runs")),
              "--no-successful-only")
    _one_line(_cli("train", "sft", "--output-dir", str(places["root"] / "runs")), "--traces")
    _one_line(_cli("train", "sft", "--traces", str(places["root"] / "nope.jsonl")), "--traces", "does not exist")
    _one_line(_cli("train", "sft", "--preset", "gpt-9"), "unknown preset")


RECIPES = {
    "missing": (None, "does not exist"),
    "broken YAML": ("learning_rate: [1\n  bad: : :\n", "is not valid YAML"),
    "a list": ("- a\n- b\n", "YAML mapping"),
    "an unknown field": ("no_such_field: 3\n", "no_such_field"),
}


@pytest.mark.parametrize("case", sorted(RECIPES))
def test_train_refuses_an_unusable_config_file(places, case: str) -> None:
    text, words = RECIPES[case]
    recipe = places["root"] / f"recipe-{case.replace(' ', '-')}.yaml"
    if text is not None:
        recipe.write_text(text)
    out = _cli("train", "sft", "--traces", str(places["traces"]), "--config", str(recipe), "--dry-run",
               "--output-dir", str(places["root"] / "runs"))
    _one_line(out, "--config", words)


def test_train_reads_its_flags_from_a_yaml_file_and_the_command_line_wins(places) -> None:
    import json

    recipe = places["root"] / "recipe.yaml"
    recipe.write_text("learning_rate: 1.0e-4\nnum_train_epochs: 2\n")
    out = _cli("train", "sft", "--traces", str(places["traces"]), "--config", str(recipe), "--dry-run",
               "--learning-rate", "3e-4", "--output-dir", str(places["root"] / "runs"))
    assert out.returncode == 0, out.stderr
    resolved = json.loads(out.stdout)["recipe"]
    assert resolved["num_train_epochs"] == 2 and resolved["learning_rate"] == 3e-4


def test_a_bad_flag_is_one_line_without_the_usage(places) -> None:
    _one_line(_cli("train", "sft", "--traces", str(places["traces"]), "--no-such-flag", "3"), "unknown flag", "--no-such-flag")
    bad_float = _cli("train", "sft", "--traces", str(places["traces"]), "--learning-rate", "abc")
    assert bad_float.returncode == 2 and "Traceback" not in bad_float.stderr
    lines = [line for line in bad_float.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "--learning-rate" in lines[0] and "--help" in lines[0], bad_float.stderr
    share = _cli("export", str(places["traces"]), "--out", str(places["root"] / "e"), "--eval-fraction", "2")
    lines = [line for line in share.stderr.splitlines() if line.strip()]
    assert share.returncode == 2 and len(lines) == 1 and "--eval-fraction" in lines[0], share.stderr


def test_train_grpo_names_the_env_flag_of_an_unknown_environment(places) -> None:
    _one_line(_cli("train", "grpo", "--env", "no-such-env", "--output-dir", str(places["root"] / "grpo")), "--env", "no-such-env")


def test_train_names_the_model_flag_when_a_folder_has_a_config_but_no_weights(places) -> None:
    folder = places["root"] / "no-weights"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text('{"model_type": "llama", "hidden_size": 64, "num_attention_heads": 2, '
                                        '"num_hidden_layers": 1, "intermediate_size": 64, "vocab_size": 100}')
    out = _cli("train", "sft", "--traces", str(places["traces"]), "--model", str(folder), "--output-dir", str(places["root"] / "nw"))
    _one_line(out, f"--model {folder} could not be loaded", "pass a saved Hugging Face model folder")
