"""A reproduction's training stages: the SFT recipe and run, and step-level cost-aware GRPO (its
reward, validations, TRL arguments, guided exploration and the states it trains on)."""

from __future__ import annotations

import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evoharness_bpe.actions import META_ACTIONS

from .checkpoints import TRAINER_STATE, checkpoint_step, last_checkpoint
from .reproduce_config import VALIDATION, ReproduceConfig
from .reproduce_episodes import play_seeds, policy_for

if TYPE_CHECKING:
    from .continuation import ContinuationReward

__all__ = ["step_progress", "trainer_kwargs", "lora_for", "sft_recipe", "train_sft", "SFT_CHECKPOINTS", "GRPO_CHECKPOINTS",
           "SnapshotPolicy", "continuation_reward", "grpo_validation", "grpo_arguments", "train_grpo", "grpo_train_states", "skip_completions", "line_ends"]


def step_progress(stage: str, log: Any) -> Any:
    """A `transformers.TrainerCallback` printing a `Progress` line per optimizer step."""
    from transformers import TrainerCallback

    from .stages import Progress

    class StepProgress(TrainerCallback):
        progress: Progress | None = None

        def on_train_begin(self, args, state, control, **kwargs):  # noqa: ANN001, ANN201 - transformers' signature
            self.progress = Progress(stage, state.max_steps, "steps", log, start=state.global_step)  # resumed: from its step

        def on_step_end(self, args, state, control, **kwargs):  # noqa: ANN001, ANN201
            loss = next((h.get("loss") for h in reversed(state.log_history) if "loss" in h), None)
            if self.progress is not None:
                self.progress.advance(note=f"loss {loss:.3f}" if loss is not None else "")

    return StepProgress()


def trainer_kwargs(config: ReproduceConfig, precision: str) -> dict[str, Any]:
    """What both trainers take from the run's speed choices."""
    import torch

    return {"bf16": precision == "bf16", "use_cpu": not torch.cuda.is_available(), "report_to": "none",
            "save_strategy": "no", "seed": config.seed, "disable_tqdm": True,
            "activation_checkpointing": False}  # TRL's default recomputes every forward: 1.6x a LoRA step here


def lora_for(model: Any, config: ReproduceConfig) -> Any:
    from .speed import lora_config

    return lora_config(model, r=config.lora_r, alpha=config.lora_alpha, top_layers=config.lora_layers) if config.lora_r else None


SFT_CHECKPOINTS = "sft-checkpoints"
"""The run folder's folder of ``sft-train``'s saved states (``--sft-checkpoint-steps``), removed when the stage ends."""
GRPO_CHECKPOINTS = "grpo-checkpoints"
"""The same for ``grpo-train`` (``--grpo-checkpoint-steps``)."""


def _resume_from(folder: Path, stage: str, unit: str, log: Any, marker: str = TRAINER_STATE) -> str | None:
    """`last_checkpoint` of `folder`, logged when there is one to resume `stage` from."""
    checkpoint = last_checkpoint(folder, marker)
    if checkpoint:
        log(f"{stage}: resuming from its save at {unit} {checkpoint_step(Path(checkpoint))}")
    return checkpoint


def sft_recipe(config: ReproduceConfig, out: Path, precision: str, *, lora: bool) -> Any:
    """The SFT recipe (`SFTRecipeConfig`) of a reproduction's ``sft-train`` stage: with
    ``--sft-checkpoint-steps``, saving its state as it goes (`train_sft` resumes from the last save)."""
    from .sft import SFTRecipeConfig

    trainer_settings = trainer_kwargs(config, precision)
    if config.sft_checkpoint_steps:
        trainer_settings.update(save_strategy="steps", save_steps=config.sft_checkpoint_steps, save_total_limit=1,
                                checkpoint_dir=str(out / SFT_CHECKPOINTS))
    return SFTRecipeConfig(model_name_or_path=config.model, use_peft=lora, output_dir=str(out / "sft"),
                           num_train_epochs=config.sft_epochs, learning_rate=config.sft_learning_rate,
                           # a pretrained model: one row a pass (no padding to the batch's longest row), the batch by
                           # accumulation; the small student gains more from batching than it loses to padding
                           per_device_train_batch_size=1 if lora else config.sft_batch_size,
                           gradient_accumulation_steps=config.sft_batch_size if lora else 1,
                           max_length=4096, eval_fraction=0.0,
                           deduplicate=False, logging_steps=1, completion_only_loss=config.sft_loss == "completion",
                           opening_weight=config.sft_opening_weight, opening_tokens=config.sft_opening_tokens,
                           cache_frozen_layers=config.sft_cache_frozen_layers, **trainer_settings)


def train_sft(model: Any, tokenizer: Any, dataset: Any, config: ReproduceConfig, out: Path, precision: str, log: Any) -> tuple[Any, dict[str, Any]]:
    from .sft import run_sft

    peft_config = lora_for(model, config)
    recipe = sft_recipe(config, out, precision, lora=peft_config is not None)
    if config.sft_checkpoint_steps:
        recipe.resume_from_checkpoint = _resume_from(out / SFT_CHECKPOINTS, "sft-train", "step", log)
    result = run_sft(recipe, dataset=dataset, model=model, tokenizer=tokenizer, peft_config=peft_config,
                     callbacks=[step_progress("sft-train", log)], quiet=True)
    return result.model, dict(result.metrics)


class SnapshotPolicy:
    """The policy being trained, played from an inference copy (merged, in the run's precision)
    made afresh at every optimizer step: GRPO's continuations see the current policy at full speed."""

    def __init__(self, trainer: Any, tokenizer: Any, config: ReproduceConfig, precision: str) -> None:
        self.trainer, self.tokenizer, self.config, self.precision = trainer, tokenizer, config, precision
        self._step: int | None = None
        self._policy: Any = None

    def current(self) -> Any:
        from .speed import inference_copy
        from .stages import release_memory

        step = int(self.trainer.state.global_step)
        if step != self._step:
            self._policy = None
            release_memory()  # the last copy, its caches and the rollouts' scraps before the next copy
            self._policy = policy_for(inference_copy(self.trainer.model, self.precision), self.tokenizer, self.config)
            self._step = step
        return self._policy

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
        return self.current().complete(messages, tools)

    def complete_batch(self, requests: list[Any]) -> list[dict[str, Any]]:
        return self.current().complete_batch(requests)

    def count_prompt_tokens(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> int:
        return self.current().count_prompt_tokens(messages, tools)


def continuation_reward(config: ReproduceConfig) -> ContinuationReward:
    """GRPO's reward function for `config`: each sampled action's episode played on and scored
    (`ContinuationReward` with the run's prices, scorer, step budget and skip handling)."""
    from evoharness_bpe.lab.envs import make_env

    from .continuation import ContinuationReward, reference_scorer
    from .rewards import CostWeights

    return ContinuationReward(
        make_env=lambda name, level: make_env(name, level),
        config=config.episode_config(),
        weights=CostWeights(lam=config.lam, mu=config.mu, invalid_penalty=config.invalid_penalty,
                            charge_on_success_only=config.charge_on_success_only),
        lockstep=config.lockstep,
        scorer=reference_scorer() if config.reward == "reference" else None,
        continuation_calls=config.grpo_continuation_calls or None,
        skips_pull_only=config.grpo_skip_pull_only,
        skip_uniform_groups=config.grpo_skip_uniform_groups,
    )


def grpo_validation(config: ReproduceConfig, out: Path, precision: str, tokenizer: Any, reward: ContinuationReward,
                    log: Any = None) -> Any:
    """``validate(model, step)`` for `BestOnValidation`: --grpo-select-episodes validation episodes per
    GRPO difficulty played greedily (traces in ``grpo/validation/``), scored with GRPO's reward."""
    from .continuation import episode_cost
    from .speed import inference_copy
    from .stages import release_memory

    seeds = {level: [VALIDATION + s for s in range(config.grpo_select_episodes)] for level in config.grpo_levels()}

    def validate(model: Any, step: int) -> dict[str, Any]:
        started = time.perf_counter()
        release_memory()
        policy = policy_for(inference_copy(model, precision), tokenizer, config)
        traces = play_seeds(policy, config, seeds, out / "grpo" / "validation" / f"update-{step}.jsonl", log=log, stage=f"select-{step}")
        del policy
        release_memory()
        n = len(traces)
        return {"score": sum(reward.episode_score(t, step) for t in traces) / n,
                "success": sum(bool(t.outcome.success) for t in traces) / n,
                "meta_calls": sum(episode_cost(t).meta_calls for t in traces) / n,
                "episodes": n, "wall_s": round(time.perf_counter() - started, 1)}

    return validate


def grpo_arguments(config: ReproduceConfig, out: Path, precision: str, tokenizer: Any) -> Any:
    """TRL's `GRPOConfig` for the run's GRPO stage: one group of --grpo-generations per state, the
    run's sampling, advantage scaling (with --grpo-aggregation decoupled, the two reward parts
    normalized apart) and learning-rate settings, and its KL term (`grpo_beta`; 0: none)."""
    from trl import GRPOConfig

    batch = config.grpo_states_per_step * config.grpo_generations
    saving = ({"save_strategy": "steps", "save_steps": config.grpo_checkpoint_steps, "save_total_limit": 2}
              if config.grpo_checkpoint_steps else {})  # two: the last one stays whole while the next one saves its files
    return GRPOConfig(
        output_dir=str(out / (GRPO_CHECKPOINTS if config.grpo_checkpoint_steps else "grpo")),
        max_steps=config.grpo_steps,
        learning_rate=config.grpo_learning_rate,
        lr_scheduler_type=config.grpo_lr_schedule,
        per_device_train_batch_size=batch,
        num_generations=config.grpo_generations,
        max_completion_length=config.max_new_tokens,
        temperature=config.grpo_temperature,
        scale_rewards=config.grpo_scale_rewards,
        **({"multi_objective_aggregation": "normalize_then_sum", "reward_weights": [1.0, config.grpo_cost_weight]}
           if config.grpo_aggregation == "decoupled" else {}),
        beta=config.grpo_beta,
        logging_steps=1,
        use_vllm=config.use_vllm,
        dataloader_num_workers=0,
        # a sampled call ends with its line, as at inference (`one_line_calls`)
        generation_kwargs={"stop": ["\n"]} if config.use_vllm else {"eos_token_id": line_ends(tokenizer)},
        **{**trainer_kwargs(config, precision), "seed": config.grpo_trainer_seed(), **saving},
    )


def train_grpo(model: Any, tokenizer: Any, states: list[dict[str, Any]], config: ReproduceConfig, out: Path, precision: str, log: Any):
    """Step-level cost-aware GRPO on `states`; returns the trained model and the reward log."""
    from datasets import Dataset
    from trl import GRPOTrainer

    from .callbacks import CheckpointFiles, MetricsFileCallback, RecordsFileCallback
    from .continuation import DecoupledReward
    from .exploration import SkipExploration
    from .selection import BestOnValidation, selection_key
    from .sft import quiet_trainer
    from .speed import score_trained_positions_only

    reward = continuation_reward(config)
    args = grpo_arguments(config, out, precision, tokenizer)
    peft_config = None if hasattr(model, "peft_config") else lora_for(model, config)
    if hasattr(model, "peft_config"):  # the SFT adapter trains on
        for name, parameter in model.named_parameters():
            parameter.requires_grad_("lora_" in name)
    prefill = policy_for(model, tokenizer, config).prefill
    rollout_func = None
    if config.grpo_skip_samples:
        skips = skip_completions(states, out / "grpo-states.jsonl", tokenizer, prefill, config.skip_kinds())
        log(f"grpo: {config.grpo_skip_samples} of each group of {config.grpo_generations} the state's skip ({len(skips)} distinct "
            f"prompts of {len(states)} states have one)")
        rollout_func = SkipExploration(skips, config.grpo_skip_samples, tokenizer)
    score_trained_positions_only()
    grpo = out / "grpo"
    kept_files = CheckpointFiles([grpo / name for name in ("rewards.jsonl", "selection.jsonl", "selection-best.safetensors", "validation")])
    callbacks = [kept_files, MetricsFileCallback(grpo / "metrics.jsonl"), RecordsFileCallback(reward.log, grpo / "rewards.jsonl"),
                 step_progress("grpo-train", log)]
    if config.grpo_select_every:
        callbacks.append(BestOnValidation(grpo_validation(config, out, precision, tokenizer, reward, log), config.grpo_select_every,
                                          path=grpo / "selection.jsonl", weights_path=grpo / "selection-best.safetensors", log=log,
                                          key=selection_key(config.grpo_select_rule, config.grpo_select_margin)))
    with warnings.catch_warnings():  # TRL marks rollout_func experimental; its contract is tested here
        warnings.filterwarnings("ignore", message="You are using 'rollout_func'")
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=DecoupledReward(reward).functions() if config.grpo_aggregation == "decoupled" else [reward],
            args=args,
            train_dataset=Dataset.from_list(states),
            processing_class=tokenizer,
            peft_config=peft_config,
            rollout_func=rollout_func,
            callbacks=callbacks,
        )
    quiet_trainer(trainer)
    reward.policy = SnapshotPolicy(trainer, tokenizer, config, precision)
    reward.prefill = prefill
    trainer.model.train()
    checkpoint = _resume_from(out / GRPO_CHECKPOINTS, "grpo-train", "update", log, CheckpointFiles.MARKER) if config.grpo_checkpoint_steps else None
    trainer.train(resume_from_checkpoint=checkpoint)
    return trainer.model, reward.log


def grpo_train_states(states: list[dict[str, Any]], config: ReproduceConfig) -> list[dict[str, Any]]:
    """The states GRPO trains on: all of `states`, or with guided exploration narrowed by
    ``--grpo-skip-kinds`` those whose meta-action is one it skips (all of them if none is), with
    ``--grpo-lead-states`` each one's preceding state of its episode as well (in `states`' order).
    Closing states (``--grpo-closing-states``) are always kept."""
    if not config.grpo_skip_samples or set(config.skip_kinds()) == set(META_ACTIONS):
        return states
    skipped = [state for state in states if state.get("called") in config.skip_kinds() or state.get("closing")]
    if not skipped:
        return states
    if not config.grpo_lead_states:
        return skipped
    wanted = {_place(state) for state in skipped}
    wanted |= {(seed, level, position - 1) for seed, level, position in wanted if position > 0}
    return [state for state in states if _place(state) in wanted]


def _place(state: dict[str, Any]) -> tuple[int, int, int]:
    """Where a state row is: its episode's seed and difficulty, and its model call's position."""
    return int(state["seed"]), int(state.get("difficulty") or 1), int(state["position"])


def skip_completions(states: list[dict[str, Any]], traces_path: Path, tokenizer: Any, prefill: str,
                      kinds: Sequence[str] = META_ACTIONS) -> dict[str, str]:
    """Each consulting state's skip (`exploration.skip_action` in the episode it came from) as the
    completion text GRPO trains on, keyed by the state's prompt; a state where the episode acted,
    or whose meta-action is not one of `kinds`, has none. A closing state's is the closing action."""
    from evoharness_bpe import read_traces

    from .continuation import closing_reply
    from .exploration import completion_text, skip_action
    from .grpo import CHAT_TEMPLATE_KWARGS

    episodes = {(int(t.metadata.get("difficulty") or 1), int(t.metadata["seed"])): t for t in read_traces(traces_path)}
    # rendered once, and only for a run that has closing states
    closing = completion_text(tokenizer, closing_reply(), prefill, CHAT_TEMPLATE_KWARGS) if any(s.get("closing") for s in states) else ""
    skips = {}
    for state in states:
        if state.get("closing"):
            skips[state["prompt"]] = closing
            continue
        if state.get("called") not in kinds:  # kinds are meta-actions: a state where the episode acted has none
            continue
        action = skip_action(episodes[int(state["difficulty"]), int(state["seed"])], int(state["position"]), kinds)
        if action is not None:
            skips[state["prompt"]] = completion_text(tokenizer, action, prefill, CHAT_TEMPLATE_KWARGS)
    return skips


def line_ends(tokenizer: Any) -> list[int]:
    """The end-of-sequence token and every token holding a newline: a one-line call's last token."""
    ends = {int(tokenizer.eos_token_id)} if tokenizer.eos_token_id is not None else set()
    ends |= {i for i in range(len(tokenizer)) if "\n" in tokenizer.decode([i])}
    return sorted(ends)


