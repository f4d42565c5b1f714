"""The miniature reproduction: a policy raw, after harness fine-tuning, after cost-aware GRPO.

    evoharness reproduce --out runs/miniature                # the CPU preset (about an hour, 2 cores)
    evoharness reproduce --preset tiny --out runs/smoke      # a smoke run (about a minute)
    evoharness reproduce --preset smollm2-gpu --out runs/gpu # SmolLM2-135M full fine-tune on one GPU

Every stage plays the same held-out seeds of `crm-migration` under the ``bpe`` harness through
the core loop, with the prompts inference always sees (the dashboard, a recent window, the
compact tool specs); training never sees those seeds. The stages:

1. **raw** — the policy before training;
2. **sft** — after supervised harness fine-tuning (`run_sft`) on the scripted expert's episodes
   of the training seeds, at every difficulty of the preset;
3. **grpo** — after step-level cost-aware GRPO (`evoharness_bpe_training.continuation`) from
   the SFT policy, on states of its own training-seed episodes.

The report (``report.md``, ``results.json``, plots) checks the effects the method predicts:
success after SFT at least 50 points above raw; after GRPO at most 0.7× the SFT policy's
meta-action calls per episode at success within 5 points (annealing); more meta-action calls per
environment step at difficulty 2 than at 1 (evolution). The default vehicle is a student of about
a million parameters trained from scratch (`evoharness_bpe_training.student`): on two CPU cores a
SmolLM2-135M step costs about a minute at 1,024 tokens, too slow for an hour's run.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, dataclass, field, fields
from importlib import resources
from pathlib import Path
from typing import Any

from evoharness_bpe.exceptions import UserError

__all__ = ["ReproduceConfig", "load_reproduce_preset", "reproduce", "register", "PRESETS"]

PRESETS: tuple[str, ...] = ("cpu", "tiny", "smollm2-gpu")
HELD_OUT = 10_000
"""Held-out seeds start here; training seeds start at 0."""
_CHOICES: dict[str, tuple[str, ...]] = {"chat_template": ("compact", "qwen3"), "sft_loss": ("completion", "full"),
                                        "grpo_states": ("all", "consulting")}


@dataclass
class ReproduceConfig:
    """One reproduction run; every field doubles as a flag of `evoharness reproduce`."""

    out: str = field(default="runs/miniature", metadata={"help": "Folder for traces, models, report and plots."})
    env: str = field(default="crm-migration", metadata={"help": "Built-in environment."})
    difficulties: str = field(default="1,2", metadata={"help": "Comma-separated difficulties trained and evaluated."})
    train_episodes: str = field(default="40,8", metadata={"help": "Expert episodes recorded per difficulty (same order)."})
    eval_episodes: int = field(default=10, metadata={"help": "Held-out episodes per stage and difficulty."})
    stages: str = field(default="raw,sft,grpo", metadata={"help": "Stages to evaluate."})
    window: int = field(default=4, metadata={"help": "Recent messages in each prompt."})
    dashboard_tokens: int = field(default=160, metadata={"help": "Dashboard token budget."})
    spec_style: str = field(default="compact", metadata={"help": "Tool-spec and observation style."})
    system_prompt: str = field(default="Call exactly one tool per reply.", metadata={"help": "Base system prompt."})
    max_steps: int = field(default=60, metadata={"help": "Model calls per episode before it is cut."})
    max_new_tokens: int = field(default=160, metadata={"help": "Tokens per reply."})
    model: str = field(default="student", metadata={"help": "`student` (trained from scratch) or a local model folder."})
    chat_template: str = field(default="compact", metadata={"help": "`compact` (a signature line per tool, as the student's) or `qwen3` "
                                                                        "(JSON tool specs) for a local model; the student always uses `compact`."})
    student_hidden: int = field(default=128, metadata={"help": "Student hidden size."})
    student_layers: int = field(default=4, metadata={"help": "Student layers."})
    student_vocab: int = field(default=2048, metadata={"help": "Student BPE vocabulary size."})
    sft_epochs: float = field(default=3.0, metadata={"help": "SFT epochs."})
    sft_learning_rate: float = field(default=3e-3, metadata={"help": "SFT peak learning rate."})
    sft_batch_size: int = field(default=8, metadata={"help": "SFT rows per step."})
    sft_loss: str = field(default="completion", metadata={"help": "`completion` (the reply's tokens only) or `full` (every token of the row: "
                                                                  "a student trained from scratch also learns the observations it must copy from)."})
    grpo_steps: int = field(default=20, metadata={"help": "GRPO optimizer steps."})
    grpo_learning_rate: float = field(default=1e-4, metadata={"help": "GRPO learning rate."})
    grpo_states_per_step: int = field(default=2, metadata={"help": "States (prompts) per GRPO step."})
    grpo_generations: int = field(default=4, metadata={"help": "Sampled actions per state (the group)."})
    grpo_state_episodes: int = field(default=8, metadata={"help": "SFT-policy episodes per GRPO difficulty whose states GRPO trains on."})
    grpo_difficulties: str = field(default="1", metadata={"help": "Difficulties whose states GRPO trains on (continuations of longer episodes cost more)."})
    grpo_temperature: float = field(default=1.0, metadata={"help": "Sampling temperature of GRPO actions."})
    grpo_states: str = field(default="all", metadata={"help": "`all` states of the SFT policy's episodes, or `consulting`: those where it "
                                                               "called a meta-action (where annealing decides)."})
    lam: float = field(default=0.03, metadata={"help": "λ: price of one meta-action call."})
    mu: float = field(default=0.0, metadata={"help": "μ: price of one harness token."})
    invalid_penalty: float = field(default=0.05, metadata={"help": "Price of one invalid action."})
    use_vllm: bool = field(default=False, metadata={"help": "Generate GRPO samples with vLLM (GPU presets)."})
    bf16: bool = field(default=False, metadata={"help": "bf16 mixed precision (GPU presets)."})
    seed: int = field(default=0, metadata={"help": "Random seed."})

    def __post_init__(self) -> None:
        levels = self.levels()
        counts = [int(x) for x in str(self.train_episodes).split(",") if x.strip()]
        if len(counts) != len(levels):
            raise UserError(f"--train-episodes needs one count per difficulty ({len(levels)}), got {self.train_episodes!r}")
        unknown = set(self.stage_list()) - {"raw", "sft", "grpo"}
        if unknown:
            raise UserError(f"--stages takes raw, sft and grpo, not {', '.join(sorted(unknown))}")
        for name in ("eval_episodes", "grpo_steps", "grpo_states_per_step", "grpo_state_episodes", "max_steps", "max_new_tokens"):
            if getattr(self, name) < 1:
                raise UserError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        for name, choices in _CHOICES.items():
            if getattr(self, name) not in choices:
                raise UserError(f"--{name.replace('_', '-')} takes {' or '.join(choices)}, not {getattr(self, name)!r}")
        if self.grpo_generations < 2:
            raise UserError("--grpo-generations must be at least 2: GRPO compares actions within a group")

    def levels(self) -> list[int]:
        try:
            levels = [int(x) for x in str(self.difficulties).split(",") if x.strip()]
        except ValueError:
            raise UserError(f"--difficulties takes comma-separated integers such as 1,2, not {self.difficulties!r}") from None
        if not levels:
            raise UserError("--difficulties must name at least one level")
        return levels

    def episodes_per_level(self) -> dict[int, int]:
        return dict(zip(self.levels(), (int(x) for x in str(self.train_episodes).split(",") if x.strip()), strict=True))

    def stage_list(self) -> list[str]:
        return [s.strip() for s in str(self.stages).split(",") if s.strip()]

    def episode_config(self, seed: int = 0):  # -> EpisodeConfig
        from evoharness_bpe.lab.frameworks import EpisodeConfig

        return EpisodeConfig(harness="bpe", seed=seed, max_steps=self.max_steps, window=self.window,
                             dashboard_tokens=self.dashboard_tokens, spec_style=self.spec_style, system_prompt=self.system_prompt)


def load_reproduce_preset(name: str, **overrides: Any) -> ReproduceConfig:
    """A preset (``configs/reproduce/<name>.yaml``) with `overrides` applied."""
    import yaml

    if name not in PRESETS:
        raise UserError(f"--preset must be one of {', '.join(PRESETS)}, not {name!r}")
    text = resources.files("evoharness_bpe_training").joinpath(f"configs/reproduce/{name}.yaml").read_text("utf-8")
    values = yaml.safe_load(text) or {}
    known = {f.name for f in fields(ReproduceConfig)}
    unknown = set(values) - known
    if unknown:
        raise UserError(f"preset {name} has unknown fields: {', '.join(sorted(unknown))}")
    values.update({k: v for k, v in overrides.items() if v is not None})
    return ReproduceConfig(**values)


# -- stages ---------------------------------------------------------------------------------
def _policy(model: Any, tokenizer: Any, config: ReproduceConfig, *, temperature: float = 0.0):
    from evoharness_bpe.lab.policies import TransformersPolicy

    from .grpo import CHAT_TEMPLATE_KWARGS

    return TransformersPolicy(model, tokenizer=tokenizer, native_tools=True, chat_template_kwargs=CHAT_TEMPLATE_KWARGS,
                              max_new_tokens=config.max_new_tokens, temperature=temperature, seed=config.seed)


def _play(policy_for: Any, config: ReproduceConfig, seeds: dict[int, list[int]], path: Path, *, max_steps: int | None = None) -> list[Any]:
    """Play `seeds` (difficulty → seeds) with ``policy_for(env)`` through the core loop; write the traces."""
    from evoharness_bpe import TraceWriter
    from evoharness_bpe.lab.envs import make_env
    from evoharness_bpe.lab.runner.core import run_episode

    traces = []
    with TraceWriter(path) as writer:
        for level, level_seeds in seeds.items():
            for seed in level_seeds:
                env = make_env(config.env, level)
                episode = config.episode_config(seed)
                if max_steps is not None:
                    episode = episode.model_copy(update={"max_steps": max_steps})
                trace = run_episode(env, policy_for(env), None, episode)
                writer.write(trace)
                traces.append(trace)
    return traces


def _summary(stage: str, traces: list[Any], wall_s: float) -> dict[str, Any]:
    from evoharness_bpe import META_ACTIONS

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
    return {"stage": stage, "levels": levels, "wall_s": round(wall_s, 1)}


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _evaluate(stage: str, model: Any, tokenizer: Any, config: ReproduceConfig, out: Path, log: Any) -> dict[str, Any]:
    started = time.perf_counter()
    seeds = {level: [HELD_OUT + s for s in range(config.eval_episodes)] for level in config.levels()}
    policy = _policy(model, tokenizer, config)
    traces = _play(lambda env: policy, config, seeds, out / f"eval-{stage}.jsonl")
    summary = _summary(stage, traces, time.perf_counter() - started)
    log(f"{stage}: " + "; ".join(f"d{k} success {v['success']:.2f}, meta-calls/ep {v['meta_calls']:.1f}, "
                                  f"meta/step {v['meta_per_env_step']:.2f}" for k, v in summary["levels"].items()))
    return summary


def _sft(model: Any, tokenizer: Any, dataset: Any, config: ReproduceConfig, out: Path) -> dict[str, Any]:
    from .sft import SFTRecipeConfig, run_sft

    recipe = SFTRecipeConfig(model_name_or_path=config.model, use_peft=False, output_dir=str(out / "sft"),
                             num_train_epochs=config.sft_epochs, learning_rate=config.sft_learning_rate,
                             per_device_train_batch_size=config.sft_batch_size, max_length=4096, eval_fraction=0.0,
                             deduplicate=False, logging_steps=5, save_strategy="no", seed=config.seed, bf16=config.bf16,
                             report_to="none", completion_only_loss=config.sft_loss == "completion")
    result = run_sft(recipe, dataset=dataset, model=model, tokenizer=tokenizer, peft_config=None)
    return dict(result.metrics)


def _grpo(model: Any, tokenizer: Any, states: list[dict[str, Any]], config: ReproduceConfig, out: Path):
    """Step-level cost-aware GRPO on `states`; returns the reward log."""
    import torch
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from evoharness_bpe.lab.envs import make_env

    from .callbacks import MetricsFileCallback
    from .continuation import ContinuationReward
    from .rewards import CostWeights

    reward = ContinuationReward(
        make_env=lambda name, level: make_env(name, level),
        config=config.episode_config(),
        weights=CostWeights(lam=config.lam, mu=config.mu, invalid_penalty=config.invalid_penalty),
    )
    batch = config.grpo_states_per_step * config.grpo_generations
    args = GRPOConfig(
        output_dir=str(out / "grpo"),
        max_steps=config.grpo_steps,
        learning_rate=config.grpo_learning_rate,
        per_device_train_batch_size=batch,
        num_generations=config.grpo_generations,
        max_completion_length=config.max_new_tokens,
        temperature=config.grpo_temperature,
        beta=0.0,
        logging_steps=1,
        save_strategy="no",
        seed=config.seed,
        report_to="none",
        use_cpu=not torch.cuda.is_available(),
        bf16=config.bf16,
        use_vllm=config.use_vllm,
        dataloader_num_workers=0,
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[reward],
        args=args,
        train_dataset=Dataset.from_list(states),
        processing_class=tokenizer,
        callbacks=[MetricsFileCallback(out / "grpo" / "metrics.jsonl")],
    )
    player = _policy(trainer.model, tokenizer, config)
    reward.policy, reward.prefill = player, player.prefill
    trainer.model.train()
    trainer.train()
    (out / "grpo" / "rewards.jsonl").write_text("".join(json.dumps(r) + "\n" for r in reward.log), "utf-8")
    return trainer.model, reward.log


def reproduce(config: ReproduceConfig, *, log: Any = print) -> dict[str, Any]:
    """Run the reproduction end to end; write ``results.json``, ``report.md`` and plots in ``config.out``."""
    import torch

    from evoharness_bpe.lab.policies import ExpertPolicy

    from .continuation import consulting_states, state_rows
    from .datasets import traces_to_sft_dataset
    from .grpo import CHAT_TEMPLATE_KWARGS
    from .models import load_model_and_tokenizer
    from .reproduce_report import targets, write_report
    from .student import build_student, student_chat_template

    started = time.perf_counter()
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(asdict(config), indent=2), "utf-8")
    torch.manual_seed(config.seed)
    stages = config.stage_list()
    results: list[dict[str, Any]] = []

    train_seeds = {level: list(range(n)) for level, n in config.episodes_per_level().items()}
    expert = _play(ExpertPolicy, config, train_seeds, out / "expert.jsonl", max_steps=400)  # the expert is never cut
    log(f"expert: {len(expert)} episodes, {sum(len(t.model_calls) for t in expert)} model calls, "
        f"{sum(t.outcome.success for t in expert)} successes")
    # Identical rows (random ids masked) collapse, then every call position gets one row per episode
    # that reaches it, so late calls weigh as much as the opening.
    dataset = traces_to_sft_dataset(expert, deduplicate=True, balance_positions=True, eval_fraction=0.0, seed=config.seed)
    if config.model == "student":
        train = dataset["train"]
        sample = train.select(range(0, len(train), max(1, len(train) // 300)))
        model, tokenizer = build_student(sample, vocab_size=config.student_vocab, hidden_size=config.student_hidden,
                                         layers=config.student_layers, seed=config.seed, out_dir=out / "raw",
                                         template_kwargs=CHAT_TEMPLATE_KWARGS, id_rows=train)
    else:
        model, tokenizer = load_model_and_tokenizer(config.model, dtype="bfloat16" if config.bf16 else "float32")
        if config.chat_template == "compact":  # every difficulty-1 prompt within 1,024 SmolLM2 tokens (docs/benchmarks.md)
            tokenizer.chat_template = student_chat_template()
    log(f"policy: {config.model}, {sum(p.numel() for p in model.parameters()):,} parameters, vocabulary {len(tokenizer)}")

    if "raw" in stages:
        results.append(_evaluate("raw", model, tokenizer, config, out, log))
    sft_started = time.perf_counter()
    sft_metrics = _sft(model, tokenizer, dataset, config, out)
    log(f"sft: {len(dataset['train'])} rows, loss {sft_metrics.get('train_loss', float('nan')):.3f}, "
        f"{time.perf_counter() - sft_started:.0f} s")
    if "sft" in stages:
        results.append(_evaluate("sft", model, tokenizer, config, out, log))

    reward_log: list[dict[str, Any]] = []
    if "grpo" in stages:
        grpo_started = time.perf_counter()
        grpo_levels = [int(x) for x in str(config.grpo_difficulties).split(",") if x.strip()]
        state_seeds = {level: list(range(config.grpo_state_episodes)) for level in grpo_levels}
        sft_policy = _policy(model, tokenizer, config)
        own = _play(lambda env: sft_policy, config, state_seeds, out / "grpo-states.jsonl")
        states = state_rows(own, sft_policy.render_prompt)
        if config.grpo_states == "consulting":
            consulting = consulting_states(states)
            if not consulting:
                log("grpo: the SFT policy never called a meta-action; training on all its states")
            states = consulting or states
        log(f"grpo: {len(states)} states ({config.grpo_states}) from {len(own)} SFT-policy episodes "
            f"({sum(t.outcome.success for t in own)} successes)")
        model, reward_log = _grpo(model, tokenizer, states, config, out)
        log(f"grpo: {config.grpo_steps} steps, {time.perf_counter() - grpo_started:.0f} s")
        results.append(_evaluate("grpo", model, tokenizer, config, out, log))

    summary = {
        "config": asdict(config),
        "results": results,
        "sft": sft_metrics,
        "grpo_curve": reward_log,
        "wall_s": round(time.perf_counter() - started, 1),
    }
    summary["targets"] = targets(results)
    (out / "results.json").write_text(json.dumps(summary, indent=2, default=float), "utf-8")
    write_report(summary, out)
    log(f"report: {out / 'report.md'} ({summary['wall_s']:.0f} s)")
    return summary


# -- command line ---------------------------------------------------------------------------
def register(commands: Any) -> None:
    """Add ``evoharness reproduce`` to the CLI's sub-parsers."""
    parser = commands.add_parser("reproduce", help="the miniature reproduction: raw → SFT → cost-aware GRPO, with a report",
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--preset", default="cpu", choices=PRESETS, help="settings to start from")
    for f in fields(ReproduceConfig):
        flag = "--" + f.name.replace("_", "-")
        kind = type(f.default) if f.default is not None else str
        if kind is bool:
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=None, help=f.metadata["help"])
        else:
            parser.add_argument(flag, type=kind, default=None, help=f.metadata["help"] + " (default: from the preset)")
    parser.set_defaults(handler=_main)


def _main(args: argparse.Namespace) -> int:
    overrides = {f.name: getattr(args, f.name) for f in fields(ReproduceConfig)}
    config = load_reproduce_preset(args.preset, **overrides)
    reproduce(config, log=lambda line: print(line, flush=True))
    return 0
