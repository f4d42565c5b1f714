"""A reproduction's episodes: the policy and the scripted expert it imitates, the seeds each stage
plays, playing them (in lockstep when the policy batches), and a stage's evaluation summary."""

from __future__ import annotations

import time
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

from evoharness_bpe.actions import META_ACTIONS

from .reproduce_config import HELD_OUT, ReproduceConfig, int_list
from .stages import write_whole

__all__ = ["policy_for", "expert_for", "held_out_seeds", "training_seeds", "lean_seeds", "expert_traces", "run_budget_problems",
           "play_seeds", "write_traces", "stage_summary", "evaluate_stage"]


def policy_for(model: Any, tokenizer: Any, config: ReproduceConfig, *, temperature: float = 0.0):
    from evoharness_bpe.lab.policies import TransformersPolicy

    from .grpo import CHAT_TEMPLATE_KWARGS

    return TransformersPolicy(model, tokenizer=tokenizer, native_tools=True, chat_template_kwargs=CHAT_TEMPLATE_KWARGS,
                              max_new_tokens=config.max_new_tokens, temperature=temperature, seed=config.seed,
                              one_line_calls=True)


def expert_for(config: ReproduceConfig, *, lean: bool = False) -> Any:
    """``expert(env)``: the scripted expert the run imitates, with the run's settings (every
    episode played lean with `lean`)."""
    from evoharness_bpe.lab.policies import ExpertPolicy

    lean_rate = 1.0 if lean else config.expert_lean_rate
    return partial(ExpertPolicy, skip_rate=config.expert_skip_rate, lean_rate=lean_rate, seed=config.seed,
                   note_before_commit=config.expert_note_before_commit, track_queue=config.expert_track_queue)


def held_out_seeds(config: ReproduceConfig, levels: Sequence[int]) -> dict[int, list[int]]:
    """Difficulty → the held-out seeds every stage is evaluated on."""
    return {level: [HELD_OUT + s for s in range(config.eval_episodes)] for level in levels}


def training_seeds(config: ReproduceConfig) -> dict[int, list[int]]:
    """Difficulty → the seeds of the expert's training episodes."""
    return {level: list(range(n)) for level, n in config.episodes_per_level().items()}


def lean_seeds(config: ReproduceConfig) -> dict[int, list[int]]:
    """Difficulty → the seeds of the expert's added lean episodes (``--expert-lean-episodes``),
    those after the level's training seeds."""
    return {level: list(range(n, n + config.expert_lean_episodes)) for level, n in config.episodes_per_level().items()}


def expert_traces(config: ReproduceConfig, seeds: dict[int, list[int]], *, lean: bool = False) -> list[Any]:
    """The scripted expert's episodes of `seeds` (each played lean with `lean`), never cut, kept
    in memory (milliseconds an episode)."""
    return [play(None) for play in _jobs(config, seeds, max_steps=400, per_env=expert_for(config, lean=lean))]


def run_budget_problems(config: ReproduceConfig, stages: Sequence[str], tokenizer: Any, prefill: str) -> list[str]:
    """`budgets.budget_problems` for the expert's episodes of the held-out seeds at every difficulty
    the run evaluates (the scripted expert, not the policy: milliseconds an episode)."""
    from .budgets import budget_problems, expert_needs
    from .grpo import CHAT_TEMPLATE_KWARGS

    levels = set(config.levels()) | (set(int_list(config.grpo_eval_difficulties)) if "grpo" in stages else set())
    needs = expert_needs(expert_traces(config, held_out_seeds(config, sorted(levels))), tokenizer, prefill, CHAT_TEMPLATE_KWARGS)
    return budget_problems(needs, config.max_steps, config.max_new_tokens)


def _jobs(config: ReproduceConfig, seeds: dict[int, list[int]], *, max_steps: int | None = None, per_env: Any = None) -> list[Any]:
    """One ``job(policy) -> Trace`` per seed: an episode of the core loop (with ``per_env(env)``
    as its policy instead, when given: a scripted expert reads its environment)."""
    from evoharness_bpe.lab.envs import make_env
    from evoharness_bpe.lab.runner.core import run_episode

    def job(level: int, seed: int) -> Any:
        episode = config.episode_config(seed)
        if max_steps is not None:
            episode = episode.model_copy(update={"max_steps": max_steps})
        def play(policy: Any) -> Any:
            env = make_env(config.env, level)
            return run_episode(env, per_env(env) if per_env is not None else policy, None, episode)
        return play

    return [job(level, seed) for level, seed in _episodes(seeds)]


def _episodes(seeds: dict[int, list[int]]) -> list[tuple[int, int]]:
    """``(difficulty, seed)`` of every episode of `seeds`, in the order they are played and written."""
    return [(level, seed) for level, level_seeds in seeds.items() for seed in level_seeds]


def _episode_file(folder: Path, level: int, seed: int) -> Path:
    return folder / f"d{level}-seed{seed}.json"


def _saved_episodes(folder: Path | None, episodes: list[tuple[int, int]]) -> dict[tuple[int, int], Any]:
    """The traces of `episodes` already saved in `folder` (by an interrupted try of the stage)."""
    from pydantic import ValidationError

    from evoharness_bpe import Trace

    saved: dict[tuple[int, int], Any] = {}
    if folder is None:
        return saved
    for level, seed in episodes:
        path = _episode_file(folder, level, seed)
        try:
            saved[(level, seed)] = Trace.model_validate_json(path.read_bytes())
        except FileNotFoundError:
            continue
        except (ValidationError, ValueError):  # not whole: played again
            path.unlink()
    return saved


def _save_episode(folder: Path, level: int, seed: int, trace: Any) -> None:
    """Write one finished episode's trace whole or not at all (a stop mid-write leaves none)."""
    folder.mkdir(parents=True, exist_ok=True)
    write_whole(_episode_file(folder, level, seed), trace.model_dump_json())


def play_seeds(policy: Any, config: ReproduceConfig, seeds: dict[int, list[int]], path: Path, *, log: Any = None,
          stage: str = "", max_steps: int | None = None, per_env: Any = None, keep: Path | None = None) -> list[Any]:
    """Play `seeds` (difficulty → seeds) with `policy` through the core loop and write the traces:
    side by side (`Lockstep`, one batched generation per round) when `config.lockstep` is on and
    the policy batches, else one episode after another.

    With `keep` (a stage's scratch folder) every episode is saved there as it ends, and the
    episodes an interrupted try saved are read back instead of played again; the traces written
    to `path` are in the same order either way."""
    from evoharness_bpe.lab.runner.lockstep import Lockstep

    from .stages import Progress

    episodes = _episodes(seeds)
    saved = _saved_episodes(keep, episodes)
    todo = [(episode, job) for episode, job in zip(episodes, _jobs(config, seeds, max_steps=max_steps, per_env=per_env), strict=True)
            if episode not in saved]
    if saved and log is not None:
        log(f"[{stage}] {len(saved)} of {len(episodes)} episodes kept from an interrupted try; playing the other {len(todo)}")
    progress = Progress(stage, len(episodes), "episodes", log, start=len(saved)) if log is not None else None

    def finished(episode: tuple[int, int], job: Any) -> Any:
        def run(player: Any) -> Any:
            trace = job(player)
            if keep is not None:
                _save_episode(keep, *episode, trace)
            if progress is not None:
                progress.advance(note=f"{len(trace.model_calls)} model calls in the last")
            return trace
        return run

    runs = [finished(episode, job) for episode, job in todo]
    if config.lockstep and hasattr(policy, "complete_batch") and len(runs) > 1:
        rounds = [0]

        def round_done(size: int, seconds: float) -> None:
            rounds[0] += 1
            if log is not None and (rounds[0] <= 2 or rounds[0] % 5 == 0):
                log(f"[{stage}] round {rounds[0]}: {size} episodes running, {seconds:.1f} s ({seconds / size:.2f} s per call)")

        played = Lockstep(policy, max_batch=config.eval_batch or None, on_round=round_done).play(runs)
    else:
        played = [run(policy) for run in runs]
    saved.update(zip((episode for episode, _ in todo), played, strict=True))
    traces = [saved[episode] for episode in episodes]
    write_traces(path, traces)
    return traces


def write_traces(path: Path, traces: list[Any]) -> None:
    from evoharness_bpe import TraceWriter

    with TraceWriter(path) as writer:
        for trace in traces:
            writer.write(trace)


def stage_summary(stage: str, traces: list[Any], wall_s: float) -> dict[str, Any]:
    from .continuation import episode_cost

    by_level: dict[int, list[Any]] = {}
    for trace in traces:
        by_level.setdefault(int(trace.metadata.get("difficulty") or 1), []).append(trace)
    levels = {}
    for level, group in sorted(by_level.items()):
        n = len(group)
        costs = [episode_cost(t) for t in group]
        steps = sum(int(t.outcome.info.get("steps", 0)) for t in group)
        meta = sum(c.meta_calls for c in costs)
        levels[str(level)] = {
            "episodes": n,
            "success": sum(c.success for c in costs) / n,
            "score": sum(float(t.outcome.score) for t in group) / n,
            "meta_calls": meta / n,
            "meta_by_action": {a: sum((c.by_action or {}).get(a, 0) for c in costs) / n for a in META_ACTIONS},
            "env_steps": steps / n,
            "meta_per_env_step": meta / max(1, steps),
            "harness_tokens": sum(c.harness_tokens for c in costs) / n,
            "invalid_actions": sum(c.invalid for c in costs) / n,
            "model_calls": sum(len(t.model_calls) for t in group) / n,
            "prompt_tokens_mean": _mean([p for t in group for p in t.metadata.get("prompt_tokens", [])]),
            "prompt_tokens_max": max((p for t in group for p in t.metadata.get("prompt_tokens", [])), default=0),
        }
    calls = sum(len(t.model_calls) for t in traces)
    return {"stage": stage, "levels": levels, "wall_s": round(wall_s, 1),
            "wall_per_model_call_s": round(wall_s / max(1, calls), 3)}


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def evaluate_stage(stage: str, model: Any, tokenizer: Any, config: ReproduceConfig, out: Path, log: Any, precision: str,
              levels: list[int] | None = None, *, keep: Path | None = None) -> dict[str, Any]:
    """Play the held-out seeds of `levels` (the run's difficulties by default) with `model`, write
    ``eval-<stage>.jsonl`` and return the stage's summary; with `keep`, as `play_seeds`."""
    from .speed import inference_copy

    started = time.perf_counter()
    seeds = held_out_seeds(config, levels or config.levels())
    policy = policy_for(inference_copy(model, precision), tokenizer, config)
    traces = play_seeds(policy, config, seeds, out / f"eval-{stage}.jsonl", log=log, stage=stage, keep=keep)
    summary = stage_summary(stage, traces, time.perf_counter() - started)
    log(f"{stage}: " + "; ".join(f"d{k} success {v['success']:.2f}, meta-calls/ep {v['meta_calls']:.1f}, "
                                  f"meta/step {v['meta_per_env_step']:.2f}" for k, v in summary["levels"].items())
        + f" ({summary['wall_per_model_call_s']:.2f} s per model call)")
    return summary


