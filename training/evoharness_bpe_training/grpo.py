"""Phase 2, cost-aware RL: GRPO with multi-turn rollouts in an environment under the harness.

    evoharness train grpo --preset tiny --env my_pkg.envs:MyEnv --adapter runs/sft/adapter

Rollouts run through TRL's `GRPOTrainer` with `environment_factory`: the policy calls the four
meta-actions and the environment's tools; the reward (`cost_aware_reward`) is task success
minus the price of each meta-action call and of the tokens the harness added. The policy learns
when consulting its Belief/Progress/Experience is worth its cost. Generation uses vLLM
(``server`` after ``trl vllm-serve``, or ``colocate``) when installed, transformers otherwise.

By default (``rollouts="windowed"``) each rollout is played by `WindowedRollouts`, TRL's
``rollout_func``: every model call sees the prompt every other loop shows (the current dashboard
in the system prompt, the task and the recent window of messages, `evoharness_bpe.harness`).
TRL's loss scores one prompt and one completion per rollout, and a windowed episode has a new
prompt at every call, so the trained pair is the opening call, whose prompt the group shares,
scored by the whole episode; later calls are trained by the step-level path
(`evoharness_bpe_training.continuation`). ``rollouts="trl"`` keeps TRL's own multi-turn loop
(one growing conversation, every call trained, prompts that inference never shows).
"""

from __future__ import annotations

import importlib.util
import json
import threading
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Callable, Sequence
from typing import Any

from evoharness_bpe.exceptions import UserError

from .config import CHAT_TEMPLATE_KWARGS, CostAwareGRPOConfig, as_recipe, recipe_dict

__all__ = [
    "CHAT_TEMPLATE_KWARGS",
    "CostAwareGRPOConfig",
    "GRPOResult",
    "WindowedRollouts",
    "run_grpo",
    "rollout_dataset",
    "opening_prompt",
    "render_harness_tools",
]


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


class _TrainerPolicy:
    """A `Policy` that generates with the trainer's model through TRL's generation backend.

    Each prompt is rendered by the chat template with the tools (as the SFT rows and
    `TransformersPolicy(native_tools=True)` render it); replies are parsed as that policy parses
    them. ``turns`` keeps each call's prompt ids, completion ids and sampling logprobs.
    """

    def __init__(self, trainer: Any, chat_template_kwargs: dict[str, Any]) -> None:
        self.trainer = trainer
        self.tokenizer = getattr(trainer.processing_class, "tokenizer", trainer.processing_class)
        self.chat_template_kwargs = dict(chat_template_kwargs)
        self.turns: list[tuple[list[int], list[int], list[float] | None]] = []

    def prompt_ids(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> list[int]:
        chat = [{**m, "content": m.get("content") or ""} for m in messages]
        ids = self.tokenizer.apply_chat_template(chat, tools=tools or None, add_generation_prompt=True, tokenize=True,
                                                 return_dict=True, **self.chat_template_kwargs)["input_ids"]
        return list(ids)

    def count_prompt_tokens(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> int:
        return len(self.prompt_ids(messages, tools))

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
        from evoharness_bpe.harness import history_message
        from evoharness_bpe.lab.policies.toolcalls import parse_tool_calls

        ids = self.prompt_ids(messages, tools)
        # TRL's backend (transformers or vLLM, weights synced): the private hook its own tool loop uses.
        completion_ids, logprobs = self.trainer._generate_single_turn([ids], None, {}, num_generations=1)
        completion = [int(t) for t in completion_ids[0]]
        self.turns.append((ids, completion, list(logprobs[0]) if logprobs is not None else None))
        text = self.tokenizer.decode(completion, skip_special_tokens=True).strip()
        calls = parse_tool_calls(text, {t["function"]["name"] for t in tools})
        if not calls:
            return {"role": "assistant", "content": text}
        content = history_message({"content": text, "tool_calls": calls})["content"] if "<tool_call>" in text else None
        return {"role": "assistant", "content": content, "tool_calls": [
            {"id": f"call_{len(self.turns)}_{n}", "type": "function", "function": c} for n, c in enumerate(calls)]}


class WindowedRollouts:
    """TRL ``rollout_func``: each rollout's episode played through the harness loop, windowed.

    TRL has reset one environment per rollout (``trainer.environments``, seed and difficulty from
    the row); `rollout_episode` plays it to the end with the trainer's model, showing at every call
    the system prompt with the current dashboard and the task plus the last `window` messages,
    exactly as the core runner, both integrations and inference do. Returned for training: the
    opening call's prompt (the row's, shared by the group) and completion; the reward reads the
    finished episode from the environment. `max_calls` caps the model calls of an episode.
    """

    def __init__(self, *, window: int = 12, max_calls: int = 200, chat_template_kwargs: dict[str, Any] | None = None,
                 base_prompt: str | None = None) -> None:
        self.window = window
        self.max_calls = max_calls
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.base_prompt = base_prompt
        self.__name__ = "windowed_rollouts"

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, Any]:
        from .environment import rollout_episode

        environments = getattr(trainer, "environments", None)
        if not environments or len(environments) != len(prompts):
            raise UserError("WindowedRollouts needs one environment per prompt: pass environment_factory= to the GRPOTrainer")
        prompt_ids, completion_ids, logprobs = [], [], []
        for environment in environments:
            policy = _TrainerPolicy(trainer, self.chat_template_kwargs)
            rollout_episode(environment, policy, seed=environment.seed, difficulty=getattr(environment.env, "difficulty", None),
                            max_steps=self.max_calls, window_size=self.window, base_prompt=self.base_prompt)
            ids, completion, lps = policy.turns[0]
            prompt_ids.append(ids)
            completion_ids.append(completion)
            logprobs.append(lps)
        return {"prompt_ids": prompt_ids, "completion_ids": completion_ids,
                "logprobs": None if any(lp is None for lp in logprobs) else logprobs}


class _EpisodeLog:
    """Appends one record per finished rollout to ``episodes.jsonl``.

    A training resumed from a checkpoint of step N keeps the records of steps 1..N and drops those
    the stopped training wrote after its save (their steps are trained again)."""

    def __init__(self, path: Path, *, resumed_at: int = 0) -> None:
        from .metrics import read_jsonl

        self.path = path
        self.records: list[dict[str, Any]] = []
        if resumed_at and path.exists():
            self.records = [r for r in read_jsonl(path) if int(r.get("step", 0)) <= resumed_at]
        path.write_text("".join(json.dumps(r) + "\n" for r in self.records), "utf-8")
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
    callbacks: Sequence[Any] = (),
) -> GRPOResult:
    """Train with cost-aware GRPO; save the adapter (or model), the episode log, metrics and plots.

    `config` is a `CostAwareGRPOConfig` or any TRL `GRPOConfig` (the harness fields then take
    their defaults, `as_recipe`). `env_factory` (a zero-argument callable returning an `Env`)
    overrides ``config.environment``.
    The difficulty of each episode comes from the dataset row, so one run can mix levels. The
    model comes from `model_config` (a TRL `ModelConfig`) when given, else from `config`;
    `peft_config` (any PEFT config, or None for full fine-tuning) replaces its LoRA settings
    when training starts without ``config.adapter``. Checkpoints (``save_strategy``) go to
    ``output_dir``; ``resume_from_checkpoint`` (a ``checkpoint-<step>`` folder, or True for the
    newest) continues a stopped training there, its episode log and metrics kept through the
    save. `callbacks` are extra `transformers.TrainerCallback` objects.
    """
    from trl import GRPOTrainer, get_peft_config

    from .callbacks import MetricsFileCallback
    from .checkpoints import checkpoint_to_resume, saved_step
    from .environment import harness_environment, rollout_tool_schemas
    from .envs import env_factory as resolve_env
    from .metrics import harness_metrics, plot_harness_metrics
    from .models import load_model_and_tokenizer, save_model_and_tokenizer
    from .rewards import make_cost_aware_reward
    from .speed import score_trained_positions_only

    config = as_recipe(config, CostAwareGRPOConfig)
    if config.use_vllm and importlib.util.find_spec("vllm") is None:
        raise UserError("use_vllm needs vLLM: `pip install 'evoharness-bpe-training[vllm]'` on a GPU machine")
    if env_factory is None:
        if not config.environment:
            raise UserError("no environment: set `environment` (a registered name or `package.module:Factory`) or pass env_factory=")
        env_factory = resolve_env(config.environment, difficulty=config.difficulty_levels()[0])
    out = Path(config.output_dir)
    checkpoint = checkpoint_to_resume(config.resume_from_checkpoint, out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "recipe.json").write_text(json.dumps(recipe_dict(config, model_config), indent=2, default=str), "utf-8")
    log = _EpisodeLog(out / "episodes.jsonl", resumed_at=saved_step(checkpoint) if checkpoint else 0)
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
    windowed = config.rollouts == "windowed"
    environment_cls = harness_environment(
        env_factory, refresh_dashboard=config.refresh_dashboard, dashboard_tokens=config.dashboard_tokens,
        tool_methods=not windowed,  # windowed: the rollout plays the tools; TRL runs no tool loop of its own
    )
    rollout_func = None
    if windowed:
        iterations = config.max_tool_calling_iterations
        rollout_func = WindowedRollouts(window=config.window, max_calls=200 if iterations is None else iterations + 1,
                                        chat_template_kwargs=config.chat_template_kwargs)
    score_trained_positions_only()
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[make_cost_aware_reward(config.weights(), on_rollouts=log)],
        args=config,
        train_dataset=rollout_dataset(config, env_factory),
        processing_class=tokenizer,
        peft_config=peft_config,
        environment_factory=environment_cls,
        rollout_func=rollout_func,
        callbacks=[MetricsFileCallback(out / "metrics.jsonl"), *callbacks],
    )
    if not windowed:
        render_harness_tools(trainer, rollout_tool_schemas(environment_cls))
    result = trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
    adapter_dir = out / ("adapter" if hasattr(trainer.model, "peft_config") else "model")
    save_model_and_tokenizer(trainer.model, tokenizer, adapter_dir)
    harness = harness_metrics(log.records)
    metrics = {"train": dict(result.metrics), "harness": harness}
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2, default=float), "utf-8")
    if plots and log.records:
        plot_harness_metrics(harness, out)
    return GRPOResult(output_dir=out, adapter_dir=adapter_dir, metrics=metrics, episodes=log.records)
