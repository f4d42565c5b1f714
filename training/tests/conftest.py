"""Shared fixtures: a small `Env`, expert traces from the real framework runners, the tiny model and a LoRA adapter over it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from evoharness_bpe import Trace
from evoharness_bpe.lab.envs import make_env
from evoharness_bpe.lab.envs.base import EnvOutcome, StepResult
from evoharness_bpe.lab.frameworks import EpisodeConfig
from evoharness_bpe.lab.registry import load_framework
from evoharness_bpe.lab.policies import ExpertPolicy
from evoharness_bpe.testing.scripted import ScriptedPolicy, tool_call


class LockerEnv:
    """Open lockers 1..difficulty in order with `open_locker(number)`; the last one ends the episode."""

    name = "lockers"

    def __init__(self, difficulty: int = 1) -> None:
        self.difficulty = difficulty
        self.opened = 0
        self.done = False

    def reset(self, seed: int) -> tuple[str, str]:
        self.opened = 0
        self.done = False
        return (f"Open lockers 1 to {self.difficulty} in order.", f"Locker room {seed}: all {self.difficulty} lockers closed.")

    def tools(self) -> list[dict[str, Any]]:
        return [
            {
                "type": "function",
                "function": {
                    "name": "open_locker",
                    "description": "Open one locker by its number.",
                    "parameters": {
                        "type": "object",
                        "properties": {"number": {"type": "integer", "description": "Locker number."}},
                        "required": ["number"],
                    },
                },
            }
        ]

    def step(self, tool_call: dict[str, Any]) -> StepResult:
        args = tool_call.get("arguments")
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except ValueError:
                args = None
        if tool_call.get("name") != "open_locker" or not isinstance(args, dict) or not isinstance(args.get("number"), int):
            return StepResult(observation="Invalid call: use open_locker(number: integer).", info={"invalid": True, "error": "bad call"})
        if self.done:
            return StepResult(observation="All lockers are open.", done=True)
        if args["number"] != self.opened + 1:
            return StepResult(observation=f"Locker {args['number']} is stuck; open {self.opened + 1} first.")
        self.opened += 1
        self.done = self.opened == self.difficulty
        return StepResult(observation=f"Locker {self.opened} opened.", done=self.done)

    def outcome(self) -> EnvOutcome:
        return EnvOutcome(success=self.opened == self.difficulty, score=self.opened / self.difficulty)


def expert_script(difficulty: int) -> list[Any]:
    """An expert episode: track the plan, open each locker, commit nothing else."""
    script: list[Any] = [tool_call("track", {"key": "plan", "value": f"open 1..{difficulty}"})]
    script += [tool_call("open_locker", {"number": n}) for n in range(1, difficulty + 1)]
    return script


def run_core(env: Any, policy: Any, seed: int = 0, max_steps: int = 30) -> Trace:
    """One episode through the core runner with the BPE harness."""
    return load_framework("core")(env, policy, None, EpisodeConfig(seed=seed, max_steps=max_steps))


def expert_run(framework: str, seed: int, *, max_steps: int = 200) -> Trace:
    """The scripted expert on crm-migration (difficulty 1) through `framework`'s runner."""
    env = make_env("crm-migration", 1)
    return load_framework(framework)(env, ExpertPolicy(env), None, EpisodeConfig(seed=seed, max_steps=max_steps))


@pytest.fixture(scope="session")
def framework_traces() -> list[Trace]:
    """Real expert episodes: two through LangGraph, two through LlamaIndex, and one cut short (failed)."""
    traces = [expert_run("langgraph", 0), expert_run("langgraph", 1), expert_run("llamaindex", 2), expert_run("llamaindex", 3)]
    traces.append(expert_run("langgraph", 4, max_steps=3))
    assert all(t.outcome.success for t in traces[:-1]) and not traces[-1].outcome.success
    return traces


@pytest.fixture
def run_expert():
    """`expert_run(framework, seed, max_steps=200)`: the expert on crm-migration through a runner."""
    return expert_run


@pytest.fixture
def workspace_trace() -> Trace:
    """A core-runner episode of the locker environment with a scripted expert."""
    return run_core(LockerEnv(2), ScriptedPolicy(expert_script(2), final="All open."), seed=7)


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory):
    """The tiny random Qwen3-style model, saved once per session."""
    from evoharness_bpe_training.tiny import build_tiny_model

    path = tmp_path_factory.mktemp("tiny-model")
    build_tiny_model(path)
    return path


@pytest.fixture(scope="session")
def save_tiny_adapter(tiny_dir):
    """``save(folder, config, stage)``: a LoRA adapter (r 4, top layer) over the tiny model whose
    replies differ from the base's, saved in `folder` with the card `config`'s `stage` writes."""
    import torch
    from peft import get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from evoharness_bpe_training.reproduce import write_adapter_card
    from evoharness_bpe_training.speed import lora_config
    from evoharness_bpe_training.student import student_chat_template

    def save(folder: Path, config, stage: str) -> Path:
        base = AutoModelForCausalLM.from_pretrained(tiny_dir)
        tokenizer = AutoTokenizer.from_pretrained(tiny_dir)
        tokenizer.chat_template = student_chat_template()
        model = get_peft_model(base, lora_config(base, r=4, alpha=8, top_layers=1))
        for name, p in model.named_parameters():
            if "lora_B" in name:
                torch.nn.init.normal_(p, std=0.3)  # an adapter that changes the replies
        model.save_pretrained(folder)
        write_adapter_card(folder, config, tokenizer, stage)
        return folder

    return save


@pytest.fixture
def locker_env_cls():
    return LockerEnv


@pytest.fixture
def tiny_lora_model():
    """``make(layers, top_layers) -> (model, tokenizer)``: a fresh tiny model with LoRA on its top layers."""
    def make(layers: int = 4, top_layers: int = 1):
        from peft import get_peft_model

        from evoharness_bpe_training.speed import lora_config
        from evoharness_bpe_training.tiny import build_tiny_model

        base, tokenizer = build_tiny_model(layers=layers, seed=3)
        return get_peft_model(base, lora_config(base, r=4, alpha=8, top_layers=top_layers)), tokenizer

    return make


@pytest.fixture(scope="session")
def sft_traces() -> list[Trace]:
    """Expert traces of the locker environment for training, recorded by the core runner."""
    return [run_core(LockerEnv(n), ScriptedPolicy(expert_script(n)), seed=s) for s, n in ((0, 1), (1, 1), (2, 2), (3, 2))]


@pytest.fixture(scope="session")
def expert_trace() -> Trace:
    """One difficulty-1 CRM episode of the expert in the compact layout (window 4): the states
    GRPO's tests train on."""
    from evoharness_bpe.lab.runner.core import run_episode

    env = make_env("crm-migration", 1)
    return run_episode(env, ExpertPolicy(env), None, EpisodeConfig(seed=3, spec_style="compact", window=4, dashboard_tokens=120))
