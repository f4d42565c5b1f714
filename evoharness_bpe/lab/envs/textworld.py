"""`textworld`: any TextWorld game file, with the admissible commands as the action space.

Pass game files made offline with ``tw-make`` (``tw-make custom --world-size 3 --nb-objects 4
--quest-length 2 --seed 1 --output g.z8``); the seed picks one of them. Without game files the
environment makes its own with ``tw-make`` (seeded; the difficulty lengthens the quest) in a
cache folder. Each observation lists the admissible commands; the walkthrough is exposed for the
expert policy. Needs the extra ``[textworld]``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ...exceptions import UserError
from ._calls import ToolCallEnv, function_spec, invalid
from .base import EnvOutcome, StepResult

__all__ = ["TextWorldEnv", "make_game"]

_INSTALL = "the textworld environment needs its extra: pip install 'evoharness-bpe[textworld]'"


def make_game(path: str | os.PathLike[str], *, seed: int, quest_length: int = 2, world_size: int = 3, objects: int = 4) -> Path:
    """Make a TextWorld game offline with ``tw-make custom``; returns the game file's path."""
    tw_make = shutil.which("tw-make") or os.path.join(os.path.dirname(sys.executable), "tw-make")
    if not os.path.exists(tw_make):
        raise UserError(_INSTALL)
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([tw_make, "custom", "--world-size", str(world_size), "--nb-objects", str(objects),
                    "--quest-length", str(quest_length), "--seed", str(seed), "--output", str(out), "-f", "--silent"],
                   check=True, capture_output=True)
    return out


class TextWorldEnv(ToolCallEnv):
    """TextWorld games through `textworld.gym`; ``act(command)`` with an admissible command."""

    name = "textworld"

    def __init__(self, difficulty: int = 1, *, games: Sequence[str | os.PathLike[str]] | None = None, cache_dir: str | os.PathLike[str] | None = None) -> None:
        try:
            import textworld  # noqa: F401, PLC0415
        except ImportError as exc:
            raise UserError(_INSTALL) from exc
        if difficulty not in (1, 2, 3):
            raise ValueError(f"difficulty must be 1, 2 or 3, not {difficulty!r}")
        self.difficulty = difficulty
        self.games = [Path(g) for g in games or ()]
        missing = [str(g) for g in self.games if not g.exists()]
        if missing:
            raise UserError(f"game file(s) not found: {', '.join(missing)}")
        self.cache_dir = Path(cache_dir or os.path.join(tempfile.gettempdir(), "evoharness-textworld"))
        self.step_budget = 20 + 10 * difficulty
        self._env: Any = None
        self._tools = [function_spec("act", "Send one of the admissible commands listed in the last observation.",
                                     {"command": {"type": "string"}}, ["command"])]

    def _game(self, seed: int) -> Path:
        if self.games:
            return self.games[seed % len(self.games)]
        path = self.cache_dir / f"d{self.difficulty}-s{seed}.z8"
        if not path.exists():
            make_game(path, seed=seed, quest_length=self.difficulty + 1, world_size=2 + self.difficulty)
        return path

    def reset(self, seed: int) -> tuple[str, str]:
        import textworld  # noqa: PLC0415
        import textworld.gym  # noqa: PLC0415
        from textworld.gym.utils import registry  # noqa: PLC0415

        self.close()
        self.seed = seed
        infos = textworld.EnvInfos(admissible_commands=True, won=True, lost=True, objective=True, extras=["walkthrough"])
        env_id = textworld.gym.register_game(str(self._game(seed)), infos, max_episode_steps=10_000)
        self._env = textworld.gym.make(env_id)
        registry.pop(env_id, None)
        obs, info = self._env.reset()
        self.walkthrough: list[str] = list(info.get("extra.walkthrough") or [])
        self.admissible: list[str] = sorted(info["admissible_commands"])
        self.won = self.lost = False
        self.steps = self.invalid_actions = 0
        return str(info["objective"]).strip(), self._render(obs)

    def _render(self, obs: str) -> str:
        return f"{obs.strip()}\nAdmissible commands: {', '.join(self.admissible)}"

    def step(self, tool_call: dict[str, Any]) -> StepResult:
        if self._env is None:
            raise UserError("call reset(seed) before step()")
        parsed = self._accept(tool_call)
        if isinstance(parsed, StepResult):
            return parsed
        command = " ".join(parsed[1]["command"].strip().split())
        if self.won or self.lost:
            self.invalid_actions += 1
            return StepResult(observation="The game is over.", done=True, info={"invalid": True})
        if command not in self.admissible:
            self.invalid_actions += 1
            return invalid(f"{command!r} is not an admissible command; choose one of: {', '.join(self.admissible)}.")
        obs, _score, done, info = self._env.step(command)
        self.admissible = sorted(info["admissible_commands"])
        self.won, self.lost = bool(info["won"]), bool(info["lost"])
        return StepResult(observation=self._render(obs), done=bool(done or self.won or self.lost), info={"won": self.won})

    def outcome(self) -> EnvOutcome:
        won = bool(getattr(self, "won", False))
        return EnvOutcome(success=won, score=1.0 if won else 0.0, info={
            "steps": getattr(self, "steps", 0), "invalid_actions": getattr(self, "invalid_actions", 0)})

    def close(self) -> None:
        """Free the game engine."""
        if self._env is not None:
            self._env.close()
            self._env = None
