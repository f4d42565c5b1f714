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
from dataclasses import asdict, dataclass, field
from pathlib import Path
from collections.abc import Callable
from typing import Any

from evoharness_bpe.exceptions import UserError

from .rewards import CostWeights

CHAT_TEMPLATE_KWARGS: dict[str, Any] = {"enable_thinking": False}
"""What the chat template gets when a reply is generated: Qwen3's renders a past reply after an
empty ``<think>`` block, so generation starts after one too (templates without the flag ignore it)."""

__all__ = ["CHAT_TEMPLATE_KWARGS", "CostAwareGRPOConfig", "GRPOResult", "run_grpo", "rollout_dataset", "opening_prompt", "render_harness_tools"]


@dataclass
class CostAwareGRPOConfig:
    """Everything `run_grpo` needs; every field doubles as a command-line flag."""

    model: str = field(default="tiny", metadata={"help": "Model: `tiny`, `smollm2-135m`, or a local model folder."})
    adapter: str | None = field(default=None, metadata={"help": "LoRA adapter from `train sft` to start from (trained further)."})
    env: str | None = field(default=None, metadata={"help": "Environment: a registered name or `package.module:Factory`."})
    difficulties: str = field(default="1", metadata={"help": "Comma-separated difficulties to sample episodes from."})
    seeds: int = field(default=64, metadata={"help": "Training episodes (seeds 0..N-1) per difficulty."})
    output_dir: str = field(default="runs/grpo", metadata={"help": "Where the adapter, episode log, metrics and plots go."})
    max_steps: int = field(default=100, metadata={"help": "Optimizer steps."})
    learning_rate: float = field(default=1e-5, metadata={"help": "Peak learning rate."})
    per_device_train_batch_size: int = field(default=4, metadata={"help": "Completions per device per step."})
    gradient_accumulation_steps: int = field(default=1, metadata={"help": "Steps accumulated before an optimizer step."})
    num_generations: int = field(default=4, metadata={"help": "Rollouts per prompt (the GRPO group size)."})
    max_completion_length: int = field(default=1024, metadata={"help": "Tokens of one rollout, tool results included."})
    max_tool_calling_iterations: int = field(default=16, metadata={"help": "Tool-calling turns per rollout."})
    temperature: float = field(default=1.0, metadata={"help": "Sampling temperature of rollouts."})
    beta: float = field(default=0.0, metadata={"help": "KL coefficient against the reference model (0 skips it)."})
    lam: float = field(default=0.02, metadata={"help": "λ: price of one meta-action call, in reward units."})
    mu: float = field(default=0.0005, metadata={"help": "μ: price of one token the meta-actions and dashboards added."})
    invalid_penalty: float = field(default=0.1, metadata={"help": "Price of one invalid action (refused or malformed call)."})
    charge_on_success_only: bool = field(default=False, metadata={"help": "Charge λ and μ only on successful rollouts."})
    refresh_dashboard: bool = field(default=True, metadata={"help": "Show the updated dashboard after each environment step."})
    dashboard_tokens: int = field(default=600, metadata={"help": "Dashboard token budget."})
    use_vllm: bool = field(default=False, metadata={"help": "Generate with vLLM (needs the `vllm` extra and a GPU)."})
    vllm_mode: str = field(default="colocate", metadata={"help": "`server` (start `trl vllm-serve` first) or `colocate`."})
    vllm_server_base_url: str | None = field(default=None, metadata={"help": "URL of the vLLM server in `server` mode."})
    lora_r: int = field(default=16, metadata={"help": "LoRA rank (when no adapter is given)."})
    lora_alpha: int = field(default=32, metadata={"help": "LoRA alpha (when no adapter is given)."})
    lora_target_modules: str = field(default="all-linear", metadata={"help": "`all-linear` or comma-separated module names."})
    dtype: str = field(default="float32", metadata={"help": "Weights dtype: float32 on CPU, bfloat16 on recent GPUs."})
    bf16: bool = field(default=False, metadata={"help": "bf16 mixed precision (GPU)."})
    gradient_checkpointing: bool = field(default=False, metadata={"help": "Trade compute for memory on large models."})
    logging_steps: int = field(default=1, metadata={"help": "Log every N steps."})
    save_steps: int = field(default=500, metadata={"help": "Checkpoint every N steps."})
    seed: int = field(default=0, metadata={"help": "Random seed."})
    report_to: str = field(default="none", metadata={"help": "Experiment tracker: none, tensorboard, wandb, trackio."})

    def __post_init__(self) -> None:
        for name in ("max_steps", "per_device_train_batch_size", "gradient_accumulation_steps", "num_generations",
                     "max_completion_length", "max_tool_calling_iterations", "seeds", "lora_r", "lora_alpha", "logging_steps", "save_steps"):
            if getattr(self, name) < 1:
                raise UserError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.num_generations < 2:
            raise UserError("num_generations must be at least 2: GRPO compares rollouts within a group")
        if (self.per_device_train_batch_size * self.gradient_accumulation_steps) % self.num_generations:
            raise UserError(
                f"per_device_train_batch_size × gradient_accumulation_steps "
                f"({self.per_device_train_batch_size}×{self.gradient_accumulation_steps}) must be a multiple of "
                f"num_generations ({self.num_generations})"
            )
        if self.vllm_mode not in ("server", "colocate"):
            raise UserError(f"vllm_mode must be server or colocate, not {self.vllm_mode!r}")
        if self.use_vllm and self.vllm_mode == "server" and not self.vllm_server_base_url:
            raise UserError("vllm_mode=server needs vllm_server_base_url (e.g. http://127.0.0.1:8000) of `trl vllm-serve`")
        if self.temperature <= 0:
            raise UserError(f"temperature must be positive, got {self.temperature}")
        self.difficulty_levels()
        self.weights()

    def difficulty_levels(self) -> list[int]:
        """The difficulties as integers."""
        try:
            levels = [int(x) for x in str(self.difficulties).split(",") if x.strip()]
        except ValueError:
            raise UserError(f"difficulties must be comma-separated integers such as '1,2,3', not {self.difficulties!r}") from None
        if not levels:
            raise UserError("difficulties must name at least one level, e.g. '1'")
        return levels

    def weights(self) -> CostWeights:
        """The reward's prices."""
        return CostWeights(lam=self.lam, mu=self.mu, invalid_penalty=self.invalid_penalty, charge_on_success_only=self.charge_on_success_only)

    def lora_config(self):  # -> peft.LoraConfig
        """The PEFT `LoraConfig` used when training starts without an adapter."""
        from peft import LoraConfig

        targets: str | list[str] = self.lora_target_modules
        if targets != "all-linear":
            targets = [t.strip() for t in targets.split(",") if t.strip()]
        return LoraConfig(r=self.lora_r, lora_alpha=self.lora_alpha, lora_dropout=0.0, target_modules=targets, task_type="CAUSAL_LM")

    def grpo_config(self):  # -> trl.GRPOConfig
        """TRL's `GRPOConfig` of this recipe (built without touching a GPU)."""
        import torch
        from trl import GRPOConfig

        vllm: dict[str, Any] = {}
        if self.use_vllm:
            vllm = {"use_vllm": True, "vllm_mode": self.vllm_mode}
            if self.vllm_server_base_url:
                vllm["vllm_server_base_url"] = self.vllm_server_base_url
        return GRPOConfig(
            output_dir=self.output_dir,
            max_steps=self.max_steps,
            learning_rate=self.learning_rate,
            per_device_train_batch_size=self.per_device_train_batch_size,
            gradient_accumulation_steps=self.gradient_accumulation_steps,
            num_generations=self.num_generations,
            max_completion_length=self.max_completion_length,
            max_tool_calling_iterations=self.max_tool_calling_iterations,
            temperature=self.temperature,
            beta=self.beta,
            bf16=self.bf16,
            activation_checkpointing=self.gradient_checkpointing,
            logging_steps=self.logging_steps,
            save_steps=self.save_steps,
            seed=self.seed,
            report_to=self.report_to,
            use_cpu=not torch.cuda.is_available(),
            dataloader_num_workers=0,
            # Rollouts open with the empty think block that fine-tuning rendered before each reply.
            chat_template_kwargs=dict(CHAT_TEMPLATE_KWARGS),
            **vllm,
        )


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


def run_grpo(config: CostAwareGRPOConfig, *, env_factory=None, model: Any = None, tokenizer: Any = None, plots: bool = True) -> GRPOResult:
    """Train with cost-aware GRPO; save the adapter, the episode log, metrics and plots.

    `env_factory` (a zero-argument callable returning an `Env`) overrides ``config.env``. The
    difficulty of each episode comes from the dataset row, so one run can mix levels.
    """
    from trl import GRPOTrainer

    from .callbacks import MetricsFileCallback
    from .environment import harness_environment, rollout_tool_schemas
    from .envs import env_factory as resolve_env
    from .metrics import harness_metrics, plot_harness_metrics
    from .models import load_model_and_tokenizer
    from .rewards import make_cost_aware_reward

    if config.use_vllm and importlib.util.find_spec("vllm") is None:
        raise UserError("use_vllm needs vLLM: `pip install 'evoharness-bpe-training[vllm]'` on a GPU machine")
    if env_factory is None:
        if not config.env:
            raise UserError("no environment: set `env` (a registered name or `package.module:Factory`) or pass env_factory=")
        env_factory = resolve_env(config.env, difficulty=config.difficulty_levels()[0])
    out = Path(config.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "recipe.json").write_text(json.dumps(asdict(config), indent=2), "utf-8")
    episodes_path = out / "episodes.jsonl"
    episodes_path.unlink(missing_ok=True)
    log = _EpisodeLog(episodes_path)
    if model is None or tokenizer is None:
        model, tokenizer = load_model_and_tokenizer(config.model, dtype=config.dtype)
    peft_config = None
    if config.adapter:
        from peft import PeftModel

        if not (Path(config.adapter) / "adapter_config.json").exists():
            raise UserError(f"{config.adapter} is not a LoRA adapter folder (no adapter_config.json); pass the `adapter` folder `train sft` wrote")
        model = PeftModel.from_pretrained(model, config.adapter, is_trainable=True)
    elif not hasattr(model, "peft_config"):
        peft_config = config.lora_config()
    environment_cls = harness_environment(
        env_factory, refresh_dashboard=config.refresh_dashboard, dashboard_tokens=config.dashboard_tokens
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[make_cost_aware_reward(config.weights(), on_rollouts=log)],
        args=config.grpo_config(),
        train_dataset=rollout_dataset(config, env_factory),
        processing_class=tokenizer,
        peft_config=peft_config,
        environment_factory=environment_cls,
        callbacks=[MetricsFileCallback(out / "metrics.jsonl")],
    )
    render_harness_tools(trainer, rollout_tool_schemas(environment_cls))
    result = trainer.train()
    adapter_dir = out / "adapter"
    trainer.model.save_pretrained(adapter_dir)
    tokenizer.save_pretrained(adapter_dir)
    harness = harness_metrics(log.records)
    metrics = {"train": dict(result.metrics), "harness": harness}
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2, default=float), "utf-8")
    if plots and log.records:
        plot_harness_metrics(harness, out)
    return GRPOResult(output_dir=out, adapter_dir=adapter_dir, metrics=metrics, episodes=log.records)
