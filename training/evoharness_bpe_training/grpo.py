"""Phase 2, cost-aware RL: GRPO with multi-turn rollouts in an environment under the harness.

    evoharness train grpo --preset tiny --env my_pkg.envs:MyEnv --adapter runs/sft/adapter

Rollouts run through TRL's `GRPOTrainer` with `environment_factory`: the policy calls the four
meta-actions and the environment's tools; the reward (`cost_aware_reward`) is task success
minus the price of each meta-action call and of the tokens the harness added. The policy learns
when consulting its Belief/Progress/Experience is worth its cost. Generation uses vLLM
(``server`` after ``trl vllm-serve``, or ``colocate``) when installed, transformers otherwise.
"""

from __future__ import annotations

import importlib.util
import json
import threading
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Callable
from typing import Any

from evoharness_bpe.exceptions import UserError

from .config import CHAT_TEMPLATE_KWARGS, CostAwareGRPOConfig, as_recipe, recipe_dict

__all__ = ["CHAT_TEMPLATE_KWARGS", "CostAwareGRPOConfig", "GRPOResult", "run_grpo", "rollout_dataset", "opening_prompt", "render_harness_tools"]


@dataclass
class GRPOResult:
    """Where `run_grpo` put its outputs, and what it measured."""

    output_dir: Path
    adapter_dir: Path
    metrics: dict[str, Any]
    episodes: list[dict[str, Any]]


def opening_prompt(env: Any, seed: int, *, dashboard_tokens: int = 600) -> list[dict[str, str]]:
    """The first prompt of an episode exactly as the core runner (``bpe`` harness) shows it.

    The system prompt with the empty workspace's dashboard, then the task and the first
    observation: rollouts start from the prompts fine-tuning saw in expert traces.
    """
    from evoharness_bpe import Workspace
    from evoharness_bpe.harness import system_prompt

    task, observation = env.reset(seed)
    dashboard = Workspace(task, dashboard_tokens=dashboard_tokens).dashboard(record=False)
    return [
        {"role": "system", "content": system_prompt("bpe", dashboard=dashboard)},
        {"role": "user", "content": f"{task}\n\n{observation}"},
    ]


def rollout_dataset(config: CostAwareGRPOConfig, env_factory: Callable[..., Any]):  # -> datasets.Dataset
    """One row per (difficulty, seed): that episode's opening prompt; `reset` replays the seed."""
    from datasets import Dataset

    rows = []
    for level in config.difficulty_levels():
        env = _at_difficulty(env_factory, level)
        for seed in range(config.seeds):
            prompt = opening_prompt(env, seed, dashboard_tokens=config.dashboard_tokens)
            rows.append({"prompt": prompt, "seed": seed, "difficulty": level, "opened": True})
    return Dataset.from_list(rows)


def _at_difficulty(env_factory: Callable[..., Any], level: int) -> Any:
    try:
        return env_factory(difficulty=level)
    except TypeError:  # a factory without the keyword: the level set on the instance
        env = env_factory()
        env.difficulty = level
        return env


def render_harness_tools(trainer: Any, specs: list[dict[str, Any]]) -> None:
    """Have `trainer` render `specs` as every environment's tool section.

    TRL generates an environment's tool schemas from its public methods (in alphabetical order,
    text from docstrings); SFT rows, traces and inference use the harness's specs
    (`evoharness_bpe.harness.episode_tools`). The methods still execute the calls by name.
    """
    import warnings

    env_tools = getattr(trainer, "_env_tools", None)
    if not isinstance(env_tools, dict):
        warnings.warn(
            "this TRL version keeps no per-environment tool list; rollouts show TRL's generated tool schemas",
            RuntimeWarning,
            stacklevel=2,
        )
        return
    for name in env_tools:
        env_tools[name] = [dict(spec) for spec in specs]


class _EpisodeLog:
    """Appends one record per finished rollout to ``episodes.jsonl``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.records: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def __call__(self, environments: list[Any], trainer_state: Any) -> None:
        step = int(getattr(trainer_state, "global_step", 0)) + 1
        batch = [{"step": step, **env.episode_record} for env in environments]
        with self._lock:
            self.records.extend(batch)
            with self.path.open("a", encoding="utf-8") as fh:
                for record in batch:
                    fh.write(json.dumps(record) + "\n")


_FROM_CONFIG: Any = object()


def run_grpo(
    config: CostAwareGRPOConfig,
    model_config: Any = None,
    *,
    peft_config: Any = _FROM_CONFIG,
    env_factory=None,
    model: Any = None,
    tokenizer: Any = None,
    plots: bool = True,
) -> GRPOResult:
    """Train with cost-aware GRPO; save the adapter (or model), the episode log, metrics and plots.

    `config` is a `CostAwareGRPOConfig` or any TRL `GRPOConfig` (the harness fields then take
    their defaults, `as_recipe`). `env_factory` (a zero-argument callable returning an `Env`)
    overrides ``config.environment``.
    The difficulty of each episode comes from the dataset row, so one run can mix levels. The
    model comes from `model_config` (a TRL `ModelConfig`) when given, else from `config`;
    `peft_config` (any PEFT config, or None for full fine-tuning) replaces its LoRA settings
    when training starts without ``config.adapter``.
    """
    from trl import GRPOTrainer, get_peft_config

    from .callbacks import MetricsFileCallback
    from .environment import harness_environment, rollout_tool_schemas
    from .envs import env_factory as resolve_env
    from .metrics import harness_metrics, plot_harness_metrics
    from .models import load_model_and_tokenizer
    from .rewards import make_cost_aware_reward

    config = as_recipe(config, CostAwareGRPOConfig)
    if config.use_vllm and importlib.util.find_spec("vllm") is None:
        raise UserError("use_vllm needs vLLM: `pip install 'evoharness-bpe-training[vllm]'` on a GPU machine")
    if env_factory is None:
        if not config.environment:
            raise UserError("no environment: set `environment` (a registered name or `package.module:Factory`) or pass env_factory=")
        env_factory = resolve_env(config.environment, difficulty=config.difficulty_levels()[0])
    out = Path(config.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "recipe.json").write_text(json.dumps(recipe_dict(config, model_config), indent=2, default=str), "utf-8")
    episodes_path = out / "episodes.jsonl"
    episodes_path.unlink(missing_ok=True)
    log = _EpisodeLog(episodes_path)
    model_args = model_config if model_config is not None else config
    if model is None or tokenizer is None:
        model, tokenizer = load_model_and_tokenizer(model_args.model_name_or_path, dtype=model_args.dtype or "float32")
    if peft_config is _FROM_CONFIG:
        peft_config = get_peft_config(model_args)
    if config.adapter:
        from peft import PeftModel

        if not (Path(config.adapter) / "adapter_config.json").exists():
            raise UserError(f"{config.adapter} is not a LoRA adapter folder (no adapter_config.json); pass the `adapter` folder `train sft` wrote")
        model = PeftModel.from_pretrained(model, config.adapter, is_trainable=True)
        peft_config = None
    elif hasattr(model, "peft_config"):
        peft_config = None
    environment_cls = harness_environment(
        env_factory, refresh_dashboard=config.refresh_dashboard, dashboard_tokens=config.dashboard_tokens
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[make_cost_aware_reward(config.weights(), on_rollouts=log)],
        args=config,
        train_dataset=rollout_dataset(config, env_factory),
        processing_class=tokenizer,
        peft_config=peft_config,
        environment_factory=environment_cls,
        callbacks=[MetricsFileCallback(out / "metrics.jsonl")],
    )
    render_harness_tools(trainer, rollout_tool_schemas(environment_cls))
    result = trainer.train()
    adapter_dir = out / ("adapter" if hasattr(trainer.model, "peft_config") else "model")
    trainer.model.save_pretrained(adapter_dir)
    tokenizer.save_pretrained(adapter_dir)
    harness = harness_metrics(log.records)
    metrics = {"train": dict(result.metrics), "harness": harness}
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2, default=float), "utf-8")
    if plots and log.records:
        plot_harness_metrics(harness, out)
    return GRPOResult(output_dir=out, adapter_dir=adapter_dir, metrics=metrics, episodes=log.records)
