"""`alfworld`: ALFWorld's six household task types, played by ALFWorld's own text engine.

Problems come from `alfworld_problems.generate_problem` (seeded layouts; the difficulty adds
receptacles and distractors and hides the target further), with the PDDL domain and grammar the
``alfworld`` package ships. The one tool, ``act(command)``, sends a text command ("go to fridge 1",
"take apple 1 from countertop 2", "heat apple 1 with microwave 1", …). Needs the extra
``[alfworld]``; the episode ends when the goal is reached.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

from ...exceptions import UserError
from ._calls import ToolCallEnv, function_spec, invalid
from .alfworld_problems import TASK_TYPES, generate_problem, make_env, write_game
from .base import EnvOutcome, StepResult

__all__ = ["ALFWorldEnv", "TASK_TYPES"]

_INSTALL = "the alfworld environment needs its extra: pip install 'evoharness-bpe[alfworld]'"


class ALFWorldEnv(ToolCallEnv):
    """One seeded ALFWorld problem per episode; the task type cycles with the seed unless fixed."""

    name = "alfworld"

    def __init__(self, difficulty: int = 1, *, task_type: str | None = None, show_admissible: bool = False) -> None:
        if difficulty not in (1, 2, 3):
            raise ValueError(f"difficulty must be 1, 2 or 3, not {difficulty!r}")
        if task_type is not None and task_type not in TASK_TYPES:
            raise ValueError(f"task_type must be one of {', '.join(TASK_TYPES)}, not {task_type!r}")
        try:
            import alfworld  # noqa: F401, PLC0415
            import textworld  # noqa: F401, PLC0415
        except ImportError as exc:
            raise UserError(_INSTALL) from exc
        self.difficulty = difficulty
        self.task_type = task_type
        self.show_admissible = show_admissible
        self._tools = [function_spec(
            "act",
            "Send one text command to the household, e.g. 'go to countertop 1', 'open fridge 1', "
            "'take apple 1 from countertop 1', 'heat apple 1 with microwave 1', 'cool mug 1 with fridge 1', "
            "'clean spoon 1 with sinkbasin 1', 'use desklamp 1', 'move apple 1 to diningtable 1', 'look', 'inventory'.",
            {"command": {"type": "string"}}, ["command"])]
        self._env: Any = None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self.step_budget = 30 + 15 * difficulty
        self.plan: list[str] = []

    def reset(self, seed: int) -> tuple[str, str]:
        self.close()
        self.seed = seed
        task_type = self.task_type or TASK_TYPES[seed % len(TASK_TYPES)]
        problem, task, plan = generate_problem(task_type, seed, self.difficulty)
        self._tmp = tempfile.TemporaryDirectory(prefix="evoharness-alfworld-")
        path = write_game(problem, os.path.join(self._tmp.name, "game.tw-pddl"), task)
        self._env = make_env(path, max_episode_steps=10_000)
        obs, infos = self._env.reset()
        self.task_type_now, self.task, self.plan = task_type, task, list(plan)
        self.admissible: list[str] = list(infos["admissible_commands"])
        self.won = False
        self.steps = 0
        self.invalid_actions = 0
        return f"Your task is to: {task}", self._with_commands(obs)

    def _with_commands(self, obs: str) -> str:
        if not self.show_admissible:
            return obs.strip()
        return f"{obs.strip()}\nAdmissible commands: {', '.join(self.admissible)}"

    def step(self, tool_call: dict[str, Any]) -> StepResult:
        if self._env is None:
            raise UserError("call reset(seed) before step()")
        parsed = self._accept(tool_call)
        if isinstance(parsed, StepResult):
            return parsed
        command = " ".join(parsed[1]["command"].strip().lower().split())
        if self.won:
            self.invalid_actions += 1
            return StepResult(observation="The task is already done.", done=True, info={"invalid": True})
        if command not in self.admissible:
            self.invalid_actions += 1
            near = [c for c in self.admissible if c.split()[0] == (command.split() or [""])[0]][:8]
            hint = f" Possible commands of that kind here: {', '.join(near)}." if near else ""
            return StepResult(observation=f"Nothing happens: {command!r} is not possible here.{hint}",
                              info={"invalid": True, "error": "inadmissible command"})
        obs, _score, _done, infos = self._env.step(command)
        self.admissible = list(infos["admissible_commands"])
        self.won = bool(infos["won"])
        return StepResult(observation=self._with_commands(obs), done=self.won, info={"won": self.won})

    def outcome(self) -> EnvOutcome:
        return EnvOutcome(success=self.won, score=1.0 if self.won else 0.0, info={
            "task_type": getattr(self, "task_type_now", None), "steps": getattr(self, "steps", 0),
            "invalid_actions": getattr(self, "invalid_actions", 0), "expert_plan_length": len(self.plan)})

    def close(self) -> None:
        """Free the game engine and its temporary files."""
        if self._env is not None:
            self._env.close()
            self._env = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
