"""The miniature reproduction: a policy raw, after harness fine-tuning, after cost-aware GRPO.

    evoharness reproduce --out runs/miniature                # the CPU preset: SmolLM2-135M, LoRA, bf16 (2 cores)
    evoharness reproduce --resume runs/miniature             # continue it at its first unfinished stage
    evoharness reproduce --fork runs/miniature --lam 0.1 --out runs/lam01  # a GRPO ablation on the same SFT
    evoharness reproduce --preset tiny --out runs/smoke      # a smoke test of the pipeline (about a minute)
    evoharness reproduce --preset smollm2-gpu --out runs/gpu # SmolLM2-135M full fine-tune on one GPU
    evoharness reproduce --model student --lora-r 0 ...      # the from-scratch student of earlier rounds

Every stage plays the same held-out seeds of `crm-migration` under the ``bpe`` harness through
the core loop, with the prompts inference always sees (the dashboard, a recent window, the
compact tool specs); training never sees those seeds. The stages (`STAGES`), each leaving its
outputs and a marker in the run folder so that ``--resume`` continues where a run stopped:

1. ``expert`` — the scripted expert's episodes of the training seeds, at every difficulty;
2. ``raw`` — the policy before training;
3. ``sft-train`` / ``sft`` — supervised harness fine-tuning (`run_sft`) on those episodes, then
   its evaluation;
4. ``grpo-states`` / ``grpo-train`` / ``grpo`` — the SFT policy's own training-seed episodes,
   step-level cost-aware GRPO (`evoharness_bpe_training.continuation`) on their states, then
   its evaluation.

The episodes of a stage, and the continuations of a GRPO step, advance in lockstep: each round
of their model calls is one batched generation (`evoharness_bpe.lab.runner.lockstep`). On a CPU
with native bf16 the model trains under bf16 autocast and generates from a bf16 copy of its
weights; LoRA on the top layers only keeps the backward pass short (`speed`).

The report (``report.md``, ``results.json``, plots) checks the effects the method predicts:
success after SFT at least 50 points above raw; after GRPO at most 0.7× the SFT policy's
meta-action calls per episode at success within 5 points (annealing); more meta-action calls per
environment step at difficulty 2 than at 1 (evolution).
"""

from __future__ import annotations

import argparse
import json
import shlex
import time
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from functools import partial
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evoharness_bpe.actions import META_ACTIONS
from evoharness_bpe.exceptions import UserError

if TYPE_CHECKING:
    from .continuation import ContinuationReward

__all__ = ["ReproduceConfig", "load_reproduce_preset", "reproduce", "reproduce_command", "resume_config", "fork_config",
           "shared_stages", "STAGE_OUTPUTS", "grpo_arguments", "grpo_validation", "write_adapter_card", "continuation_reward", "register", "PRESETS", "STAGES"]

PRESETS: tuple[str, ...] = ("cpu", "tiny", "smollm2-gpu")
HELD_OUT = 10_000
"""Held-out seeds start here; training seeds start at 0."""
VALIDATION = 20_000
"""Validation seeds (`--grpo-select-every`) start here: apart from the training and held-out ones."""
_CHOICES: dict[str, tuple[str, ...]] = {"chat_template": ("compact", "compact-tools-first", "qwen3"), "sft_loss": ("completion", "full"),
                                        "grpo_states": ("all", "consulting"), "grpo_lr_schedule": ("linear", "constant"),
                                        "reward": ("cost", "reference"), "grpo_scale_rewards": ("group", "batch", "none"),
                                        "grpo_aggregation": ("sum", "decoupled")}


def _ints(text: object) -> list[int]:
    """The integers of a comma-separated setting (``"1,2"``); empty items are skipped."""
    return [int(x) for x in str(text).split(",") if x.strip()]


@dataclass
class ReproduceConfig:
    """One reproduction run; every field doubles as a flag of `evoharness reproduce`."""

    out: str = field(default="runs/miniature", metadata={"help": "Folder for traces, models, report and plots."})
    env: str = field(default="crm-migration", metadata={"help": "Built-in environment."})
    difficulties: str = field(default="1,2", metadata={"help": "Comma-separated difficulties trained and evaluated."})
    train_episodes: str = field(default="40,8", metadata={"help": "Expert episodes recorded per difficulty (same order)."})
    expert_skip_rate: float = field(default=0.0, metadata={"help": "The expert leaves out each meta-action an episode can do without (a "
                                                                    "recall, a note, a track; never a commit, which the dashboard "
                                                                    "reads) with this probability: SFT data that holds the cheaper "
                                                                    "path beside the consulting one, so GRPO's own samples can find "
                                                                    "where consulting does not pay."})
    expert_lean_rate: float = field(default=0.0, metadata={"help": "The share of expert episodes played lean, each whole episode without "
                                                                    "the meta-actions it can do without (the rest in full): every "
                                                                    "trace consistent with itself, the consulting and the lean way of "
                                                                    "the same task side by side, in their proportion."})
    expert_lean_episodes: int = field(default=0, metadata={"help": "More expert episodes per difficulty, on the seeds after "
                                                                     "--train-episodes' own, each played lean (without the "
                                                                     "meta-actions it can do without): the cheap way added beside "
                                                                     "every full episode instead of replacing some of them "
                                                                     "(--expert-lean-rate)."})
    expert_note_before_commit: bool = field(default=False, metadata={
        "help": "The CRM expert notes a lesson before committing the batch that taught it (by default after): its last "
                "meta-action is then a commit, every finish follows the commit that leaves nothing to do, and "
                "leaving out a note never lands on finish."})
    expert_track_queue: bool = field(default=False, metadata={
        "help": "The CRM expert tracks the ids a batch leaves unsent (records.next, a range) while the page it read "
                "is still in the window, so the next batch's ids are on the dashboard once the page has left it "
                "(they show with --dashboard-tokens 280, not at 160)."})
    eval_episodes: int = field(default=10, metadata={"help": "Held-out episodes per stage and difficulty."})
    stages: str = field(default="raw,sft,grpo", metadata={"help": "Stages to evaluate."})
    window: int = field(default=4, metadata={"help": "Recent messages in each prompt."})
    dashboard_tokens: int = field(default=160, metadata={"help": "Dashboard token budget."})
    spec_style: str = field(default="compact", metadata={"help": "Tool-spec and observation style."})
    system_prompt: str = field(default="Call exactly one tool per reply.", metadata={"help": "Base system prompt."})
    max_steps: int = field(default=60, metadata={"help": "Model calls per episode before it is cut."})
    max_invalid_run: int = field(default=0, metadata={"help": "End an episode after this many invalid actions in a row (0: never; "
                                                                "a policy that lost the format rarely finds it again)."})
    max_new_tokens: int = field(default=160, metadata={"help": "Tokens per reply."})
    model: str = field(default="student", metadata={"help": "`student` (trained from scratch) or a local model folder."})
    chat_template: str = field(default="compact", metadata={"help": "`compact` (a signature line per tool, as the student's), "
                                                                        "`compact-tools-first` (the same, the tool section ahead of the system "
                                                                        "text and dashboard: episodes share it as their prompt's prefix) or "
                                                                        "`qwen3` (JSON tool specs) for a local model; the student always uses `compact`."})
    student_hidden: int = field(default=128, metadata={"help": "Student hidden size."})
    student_layers: int = field(default=4, metadata={"help": "Student layers."})
    student_vocab: int = field(default=2048, metadata={"help": "Student BPE vocabulary size."})
    sft_epochs: float = field(default=3.0, metadata={"help": "SFT epochs."})
    sft_learning_rate: float = field(default=3e-3, metadata={"help": "SFT peak learning rate."})
    sft_batch_size: int = field(default=8, metadata={"help": "SFT rows per step."})
    sft_loss: str = field(default="completion", metadata={"help": "`completion` (the reply's tokens only) or `full` (every token of the row: "
                                                                  "a student trained from scratch also learns the observations it must copy from)."})
    sft_opening_weight: float = field(default=1.0, metadata={"help": "Loss weight of each reply's first tokens, where it names its "
                                                                       "tool (with --sft-loss completion; 1: every token alike)."})
    sft_opening_tokens: int = field(default=24, metadata={"help": "How many of each reply's first tokens --sft-opening-weight weighs "
                                                                    "(12 ends at the tool name's first token in SmolLM2's "
                                                                    "tokenization: the choice alone, no argument)."})
    grpo_steps: int = field(default=20, metadata={"help": "GRPO optimizer steps."})
    grpo_learning_rate: float = field(default=1e-4, metadata={"help": "GRPO learning rate."})
    grpo_lr_schedule: str = field(default="linear", metadata={"help": "`linear` (decays to 0 over --grpo-steps: over a few updates the "
                                                                       "mean step is half the rate) or `constant`."})
    grpo_states_per_step: int = field(default=2, metadata={"help": "States (prompts) per GRPO step."})
    grpo_generations: int = field(default=4, metadata={"help": "Sampled actions per state (the group)."})
    grpo_state_episodes: int = field(default=8, metadata={"help": "SFT-policy episodes per GRPO difficulty whose states GRPO trains on."})
    grpo_difficulties: str = field(default="1", metadata={"help": "Difficulties whose states GRPO trains on (continuations of longer episodes cost more)."})
    grpo_eval_difficulties: str = field(default="", metadata={"help": "Difficulties the GRPO policy is evaluated at (empty: all of "
                                                                           "--difficulties); target (c) then uses the last stage that has both."})
    grpo_from_successes: bool = field(default=False, metadata={"help": "GRPO trains on states of the SFT policy's successful episodes "
                                                                        "only: states it can finish from, where a group's continuations "
                                                                        "differ in cost and not only fail alike."})
    grpo_continuation_calls: int = field(default=0, metadata={"help": "Model calls a GRPO continuation may make after its sampled action; "
                                                                     "one still running is cut and scores as unfinished (the reference's "
                                                                     "step budget). 0: up to --max-steps."})
    grpo_skip_samples: int = field(default=0, metadata={"help": "Of each GRPO group, this many samples are the state's skip: the next "
                                                                 "environment action its episode took, in place of the meta-action "
                                                                 "(guided exploration: every group compares consulting with acting). "
                                                                 "0: every sample drawn from the policy."})
    grpo_skip_kinds: str = field(default="track,commit,recall,note", metadata={
        "help": "The meta-actions whose states get --grpo-skip-samples (comma-separated); a skip passes over these "
                "kinds to the episode's next action of another kind. Leaving out `commit` keeps "
                "Progress whole: a skipped commit that still succeeds teaches the policy to finish while the "
                "dashboard's NEXT lists work, and NEXT is the cue it finishes by. With --grpo-skip-samples, GRPO "
                "trains on these meta-actions' states only (where every sample consults alike, a group has no "
                "advantage to learn from)."})
    grpo_temperature: float = field(default=1.0, metadata={"help": "Sampling temperature of GRPO actions."})
    grpo_beta: float = field(default=0.0, metadata={
        "help": "β of GRPO's KL term, which holds the policy near the one GRPO started from: with LoRA, TRL trains the "
                "SFT adapter against a frozen copy of itself. 0: no KL term (and no reference pass). Needs --lora-r > 0."})
    grpo_select_every: int = field(default=0, metadata={
        "help": "Keep the best of periodic validations: before the first GRPO update, every N updates and after the last, "
                "play --grpo-select-episodes validation episodes (seeds apart from the training and held-out ones) greedily "
                "and score them with GRPO's reward; the stage ends with the best-scoring weights, the SFT policy's among "
                "them (ties keep the earlier). 0: the last update's weights."})
    grpo_select_episodes: int = field(default=10, metadata={"help": "Validation episodes per GRPO difficulty (--grpo-select-every)."})
    grpo_scale_rewards: str = field(default="group", metadata={
        "help": "What divides a sample's advantage (its reward minus its group's mean): `group`, the group's standard "
                "deviation (GRPO's; a group that all succeeds teaches a saving of λ as hard as a failure); `batch`, the "
                "step's (a saving counts as its size against a failure's); `none`."})
    grpo_aggregation: str = field(default="sum", metadata={
        "help": "`sum`: one reward (success minus the prices), its advantage scaled per --grpo-scale-rewards; `decoupled`: "
                "the task part (success minus invalid actions) and the cost part (λ per meta-call and μ per token of a "
                "rollout that succeeded; a failed one scores its group's successes' mean) each normalized within its "
                "group, then summed with --grpo-cost-weight and scaled by the step's spread, whatever --grpo-scale-rewards "
                "says (GDPO, TRL's normalize_then_sum): a success with one meta-call fewer than its group's others gains a unit of "
                "advantage, not λ against the spread of successes and failures. Needs --reward cost."})
    grpo_cost_weight: float = field(default=1.0, metadata={"help": "Weight of the cost part against the task part's 1 "
                                                                     "(--grpo-aggregation decoupled)."})
    grpo_states: str = field(default="all", metadata={"help": "`all` states of the SFT policy's episodes, or `consulting`: those where it "
                                                               "called a meta-action (where annealing decides)."})
    grpo_lead_states: bool = field(default=False, metadata={
        "help": "With --grpo-skip-kinds narrowing the states (and --grpo-states all), also train the state just before each "
                "one, where the policy acted: its own rare shortcut there (the consulting state's skip taken one call "
                "early) fails and is pushed down beside the skip it should learn."})
    reward: str = field(default="cost", metadata={"help": "GRPO's reward: `cost` (success − λ·meta-calls − μ·harness tokens − ν·invalid) "
                                                           "or `reference` (EvoHarness-RL's composite: task + efficiency + annealed "
                                                           "diversity − spam − invalid, its defaults)."})
    lam: float = field(default=0.03, metadata={"help": "λ: price of one meta-action call."})
    mu: float = field(default=0.0, metadata={"help": "μ: price of one harness token."})
    invalid_penalty: float = field(default=0.05, metadata={"help": "Price of one invalid action."})
    charge_on_success_only: bool = field(default=False, metadata={
        "help": "Charge λ and μ on successful rollouts only: failures then differ by their invalid actions alone, so a "
                "group that all fails does not teach the policy to fail with fewer meta-actions."})
    grpo_skip_pull_only: bool = field(default=False, metadata={
        "help": "A skip put in a group (--grpo-skip-samples) that scores below the rest of its group gets the rest's mean "
                "reward: advantage 0, so a failed skip never pushes its tokens (often the policy's own next action) down."})
    grpo_skip_uniform_groups: bool = field(default=False, metadata={
        "help": "A GRPO group whose samples all succeeded or all failed scores its mean (advantage 0): only groups where "
                "the action decided the outcome teach, and a price alone never does (EvoHarness-RL's skip_uniform_groups)."})
    use_vllm: bool = field(default=False, metadata={"help": "Generate GRPO samples with vLLM (GPU presets)."})
    precision: str = field(default="auto", metadata={"help": "`auto` (bf16 where the machine computes it natively: a CPU with "
                                                              "avx512_bf16 or AMX, a CUDA device with bf16; fp32 elsewhere), `bf16` or `fp32`. "
                                                              "Training runs under bf16 autocast, inference on a bf16 copy of the weights."})
    lora_r: int = field(default=0, metadata={"help": "LoRA rank of fine-tuning; 0 trains every weight (the student)."})
    lora_alpha: int = field(default=32, metadata={"help": "LoRA alpha."})
    lora_layers: int = field(default=0, metadata={"help": "LoRA on the top N decoder layers only (the backward pass stops there); 0: every layer."})
    lockstep: bool = field(default=True, metadata={"help": "Advance a stage's episodes (and GRPO's continuations) together, one "
                                                             "batched generation per round of model calls."})
    eval_batch: int = field(default=0, metadata={"help": "Most prompts in one batched generation; 0: every episode still running."})
    threads: int = field(default=0, metadata={"help": "torch CPU threads; 0 keeps torch's default."})
    seed: int = field(default=0, metadata={"help": "Random seed."})

    def __post_init__(self) -> None:
        levels = self.levels()
        counts = _ints(self.train_episodes)
        if len(counts) != len(levels):
            raise UserError(f"--train-episodes needs one count per difficulty ({len(levels)}), got {self.train_episodes!r}")
        unknown = set(self.stage_list()) - {"raw", "sft", "grpo"}
        if unknown:
            raise UserError(f"--stages takes raw, sft and grpo, not {', '.join(sorted(unknown))}")
        for name in ("eval_episodes", "grpo_steps", "grpo_states_per_step", "grpo_state_episodes", "max_steps", "max_new_tokens",
                     "grpo_select_episodes"):
            if getattr(self, name) < 1:
                raise UserError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        for name, choices in _CHOICES.items():
            if getattr(self, name) not in choices:
                raise UserError(f"--{name.replace('_', '-')} takes {' or '.join(choices)}, not {getattr(self, name)!r}")
        if self.precision not in ("auto", "bf16", "fp32"):
            raise UserError(f"--precision takes auto, bf16 or fp32, not {self.precision!r}")
        for name in ("lora_r", "lora_layers", "eval_batch", "threads", "max_invalid_run", "grpo_continuation_calls", "grpo_skip_samples",
                     "grpo_beta", "grpo_select_every"):
            if getattr(self, name) < 0:
                raise UserError(f"--{name.replace('_', '-')} must be 0 or more, got {getattr(self, name)}")
        if self.grpo_beta and not self.lora_r:
            raise UserError("--grpo-beta anchors GRPO to a frozen copy of the LoRA adapter it starts from; without LoRA "
                            "(--lora-r 0) TRL would load a reference model by name, which a locally built policy has not: "
                            "set --lora-r or leave --grpo-beta at 0")
        if self.model == "student" and self.lora_r:
            raise UserError("--lora-r applies to a pretrained model; the student trains every weight (set --lora-r 0)")
        if self.sft_opening_weight <= 0:
            raise UserError(f"--sft-opening-weight must be above 0, got {self.sft_opening_weight}")
        if self.sft_opening_tokens < 1:
            raise UserError(f"--sft-opening-tokens must be at least 1, got {self.sft_opening_tokens}")
        if self.sft_loss == "full" and self.sft_opening_weight != 1.0:
            raise UserError("--sft-opening-weight weighs the start of each reply; with --sft-loss full every token is trained: "
                            "leave it at 1 or use --sft-loss completion")
        if not 0.0 <= self.expert_skip_rate < 1.0:
            raise UserError(f"--expert-skip-rate is a probability below 1, got {self.expert_skip_rate}")
        if not 0.0 <= self.expert_lean_rate <= 1.0:
            raise UserError(f"--expert-lean-rate is a probability, got {self.expert_lean_rate}")
        if self.expert_lean_episodes < 0:
            raise UserError(f"--expert-lean-episodes must be 0 or more, got {self.expert_lean_episodes}")
        if self.grpo_generations < 2:
            raise UserError("--grpo-generations must be at least 2: GRPO compares actions within a group")
        unknown = sorted(set(self.skip_kinds()) - set(META_ACTIONS))
        if unknown or not self.skip_kinds():
            raise UserError(f"--grpo-skip-kinds takes meta-actions ({', '.join(META_ACTIONS)}), not {self.grpo_skip_kinds!r}")
        if self.grpo_skip_samples >= self.grpo_generations:
            raise UserError(f"--grpo-skip-samples ({self.grpo_skip_samples}) must leave at least one sampled action in groups of "
                            f"--grpo-generations {self.grpo_generations}")
        if self.grpo_aggregation == "decoupled" and self.reward != "cost":
            raise UserError("--grpo-aggregation decoupled splits the cost-aware reward in its task and cost parts; "
                            "--reward reference is one composite score (use --reward cost)")
        if self.grpo_aggregation == "decoupled" and self.grpo_skip_uniform_groups:
            raise UserError("--grpo-skip-uniform-groups flattens the groups that all succeeded, where the decoupled cost "
                            "part is all that teaches: leave one of them out")
        if self.grpo_cost_weight <= 0:
            raise UserError(f"--grpo-cost-weight must be above 0, got {self.grpo_cost_weight}")
        if self.grpo_lead_states and self.grpo_states != "all":
            raise UserError("--grpo-lead-states trains the states where the policy acted before consulting; "
                            "--grpo-states consulting leaves none of them (use --grpo-states all)")

    def skip_kinds(self) -> tuple[str, ...]:
        """The meta-actions whose states GRPO's guided exploration skips (`grpo_skip_kinds`)."""
        return tuple(kind.strip() for kind in self.grpo_skip_kinds.split(",") if kind.strip())

    def levels(self) -> list[int]:
        try:
            levels = _ints(self.difficulties)
        except ValueError:
            raise UserError(f"--difficulties takes comma-separated integers such as 1,2, not {self.difficulties!r}") from None
        if not levels:
            raise UserError("--difficulties must name at least one level")
        return levels

    def grpo_levels(self) -> list[int]:
        """The difficulties whose states GRPO trains on (and validates at, with --grpo-select-every)."""
        return _ints(self.grpo_difficulties)

    def episodes_per_level(self) -> dict[int, int]:
        return dict(zip(self.levels(), _ints(self.train_episodes), strict=True))

    def stage_list(self) -> list[str]:
        return [s.strip() for s in str(self.stages).split(",") if s.strip()]

    def episode_config(self, seed: int = 0):  # -> EpisodeConfig
        from evoharness_bpe.lab.frameworks import EpisodeConfig

        return EpisodeConfig(harness="bpe", seed=seed, max_steps=self.max_steps, window=self.window,
                             dashboard_tokens=self.dashboard_tokens, spec_style=self.spec_style, system_prompt=self.system_prompt,
                             max_invalid_run=self.max_invalid_run or None)


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
STAGES: tuple[str, ...] = ("expert", "raw", "sft-train", "sft", "grpo-states", "grpo-train", "grpo")
"""The stages of a run in order; each writes a marker when it finishes (`StageFolder`)."""


STAGE_OUTPUTS: dict[str, tuple[str, ...]] = {
    "expert": ("expert.jsonl", "raw"),  # raw/: the student built from the expert traces
    "raw": ("eval-raw.jsonl",), "sft-train": ("sft",), "sft": ("eval-sft.jsonl",),
    "grpo-states": ("grpo-states.jsonl", "grpo-states.json"), "grpo-train": ("grpo",), "grpo": ("eval-grpo.jsonl",),
}
"""What each stage writes in the run folder (besides its marker)."""

_FIRST_AFFECTED: dict[str, str | None] = {
    **dict.fromkeys(("out", "stages"), None),
    **dict.fromkeys(("threads", "eval_batch", "lockstep"), "raw"),
    **dict.fromkeys(("grpo_state_episodes", "grpo_difficulties", "grpo_states", "grpo_from_successes"), "grpo-states"),
    **dict.fromkeys(("grpo_steps", "grpo_learning_rate", "grpo_lr_schedule", "grpo_states_per_step", "grpo_generations", "grpo_temperature", "grpo_beta",
                     "grpo_scale_rewards", "grpo_continuation_calls", "grpo_skip_samples", "grpo_skip_kinds", "reward", "lam", "mu", "invalid_penalty",
                     "charge_on_success_only", "grpo_skip_pull_only", "grpo_skip_uniform_groups", "grpo_lead_states", "use_vllm",
                     "grpo_select_every", "grpo_select_episodes", "grpo_aggregation", "grpo_cost_weight"),
                    "grpo-train"),
    "grpo_eval_difficulties": "grpo",
}
"""The first stage a setting changes (None: no stage's outputs); a setting not listed changes them all."""

_EVALUATIONS_ONLY: tuple[str, ...] = ("eval_episodes",)
"""Settings that change only the evaluation stages (raw, sft, grpo): no model and no GRPO state depends on them."""
_EVALUATION_STAGES: tuple[str, ...] = ("raw", "sft", "grpo")


_FORK_OR_RESUME = "--fork starts a new run from another's stages; --resume continues a run: pass one of them"


def shared_stages(saved: dict[str, Any], wanted: dict[str, Any]) -> list[str]:
    """The stages (in order) whose outputs a run with `wanted` settings can take from a run made with `saved`:
    those no differing setting changes (a setting changes the stages from its first one on, an
    evaluation-only setting the evaluations alone). A setting one side lacks (added since that run
    was made) counts at its default."""
    defaults = _field_defaults()
    changed: set[str] = set()
    for name in set(saved) | set(wanted):
        if saved.get(name, defaults.get(name)) == wanted.get(name, defaults.get(name)):
            continue
        if name in _EVALUATIONS_ONLY:
            changed.update(_EVALUATION_STAGES)
        elif (stage := _FIRST_AFFECTED.get(name, STAGES[0])) is not None:
            changed.update(STAGES[STAGES.index(stage):])
    return [stage for stage in STAGES if stage not in changed]


def _policy(model: Any, tokenizer: Any, config: ReproduceConfig, *, temperature: float = 0.0):
    from evoharness_bpe.lab.policies import TransformersPolicy

    from .grpo import CHAT_TEMPLATE_KWARGS

    return TransformersPolicy(model, tokenizer=tokenizer, native_tools=True, chat_template_kwargs=CHAT_TEMPLATE_KWARGS,
                              max_new_tokens=config.max_new_tokens, temperature=temperature, seed=config.seed,
                              one_line_calls=True)


def _expert(config: ReproduceConfig, *, lean: bool = False) -> Any:
    """``expert(env)``: the scripted expert the run imitates, with the run's settings (every
    episode played lean with `lean`)."""
    from evoharness_bpe.lab.policies import ExpertPolicy

    lean_rate = 1.0 if lean else config.expert_lean_rate
    return partial(ExpertPolicy, skip_rate=config.expert_skip_rate, lean_rate=lean_rate, seed=config.seed,
                   note_before_commit=config.expert_note_before_commit, track_queue=config.expert_track_queue)


def _held_out_seeds(config: ReproduceConfig, levels: Sequence[int]) -> dict[int, list[int]]:
    """Difficulty → the held-out seeds every stage is evaluated on."""
    return {level: [HELD_OUT + s for s in range(config.eval_episodes)] for level in levels}


def _training_seeds(config: ReproduceConfig) -> dict[int, list[int]]:
    """Difficulty → the seeds of the expert's training episodes."""
    return {level: list(range(n)) for level, n in config.episodes_per_level().items()}


def _lean_seeds(config: ReproduceConfig) -> dict[int, list[int]]:
    """Difficulty → the seeds of the expert's added lean episodes (``--expert-lean-episodes``),
    those after the level's training seeds."""
    return {level: list(range(n, n + config.expert_lean_episodes)) for level, n in config.episodes_per_level().items()}


def _expert_traces(config: ReproduceConfig, seeds: dict[int, list[int]], *, lean: bool = False) -> list[Any]:
    """The scripted expert's episodes of `seeds` (each played lean with `lean`), never cut, kept
    in memory (milliseconds an episode)."""
    return [play(None) for play in _jobs(config, seeds, max_steps=400, per_env=_expert(config, lean=lean))]


def _budget_problems(config: ReproduceConfig, stages: Sequence[str], tokenizer: Any, prefill: str) -> list[str]:
    """`budgets.budget_problems` for the expert's episodes of the held-out seeds at every difficulty
    the run evaluates (the scripted expert, not the policy: milliseconds an episode)."""
    from .budgets import budget_problems, expert_needs
    from .grpo import CHAT_TEMPLATE_KWARGS

    levels = set(config.levels()) | (set(_ints(config.grpo_eval_difficulties)) if "grpo" in stages else set())
    needs = expert_needs(_expert_traces(config, _held_out_seeds(config, sorted(levels))), tokenizer, prefill, CHAT_TEMPLATE_KWARGS)
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

    return [job(level, seed) for level, level_seeds in seeds.items() for seed in level_seeds]


def _play(policy: Any, config: ReproduceConfig, seeds: dict[int, list[int]], path: Path, *, log: Any = None,
          stage: str = "", max_steps: int | None = None, per_env: Any = None) -> list[Any]:
    """Play `seeds` (difficulty → seeds) with `policy` through the core loop and write the traces:
    side by side (`Lockstep`, one batched generation per round) when `config.lockstep` is on and
    the policy batches, else one episode after another."""
    from evoharness_bpe.lab.runner.lockstep import Lockstep

    from .stages import Progress

    jobs = _jobs(config, seeds, max_steps=max_steps, per_env=per_env)
    progress = Progress(stage, len(jobs), "episodes", log) if log is not None else None

    def finished(job: Any) -> Any:
        def run(player: Any) -> Any:
            trace = job(player)
            if progress is not None:
                progress.advance(note=f"{len(trace.model_calls)} model calls in the last")
            return trace
        return run

    if config.lockstep and hasattr(policy, "complete_batch") and len(jobs) > 1:
        rounds = [0]

        def round_done(size: int, seconds: float) -> None:
            rounds[0] += 1
            if log is not None and (rounds[0] <= 2 or rounds[0] % 5 == 0):
                log(f"[{stage}] round {rounds[0]}: {size} episodes running, {seconds:.1f} s ({seconds / size:.2f} s per call)")

        traces = Lockstep(policy, max_batch=config.eval_batch or None, on_round=round_done).play([finished(job) for job in jobs])
    else:
        traces = [finished(job)(policy) for job in jobs]
    _write_traces(path, traces)
    return traces


def _write_traces(path: Path, traces: list[Any]) -> None:
    from evoharness_bpe import TraceWriter

    with TraceWriter(path) as writer:
        for trace in traces:
            writer.write(trace)


def _summary(stage: str, traces: list[Any], wall_s: float) -> dict[str, Any]:
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


def _evaluate(stage: str, model: Any, tokenizer: Any, config: ReproduceConfig, out: Path, log: Any, precision: str,
              levels: list[int] | None = None) -> dict[str, Any]:
    from .speed import inference_copy

    started = time.perf_counter()
    seeds = _held_out_seeds(config, levels or config.levels())
    policy = _policy(inference_copy(model, precision), tokenizer, config)
    traces = _play(policy, config, seeds, out / f"eval-{stage}.jsonl", log=log, stage=stage)
    summary = _summary(stage, traces, time.perf_counter() - started)
    log(f"{stage}: " + "; ".join(f"d{k} success {v['success']:.2f}, meta-calls/ep {v['meta_calls']:.1f}, "
                                  f"meta/step {v['meta_per_env_step']:.2f}" for k, v in summary["levels"].items())
        + f" ({summary['wall_per_model_call_s']:.2f} s per model call)")
    return summary


def _step_progress(stage: str, log: Any) -> Any:
    """A `transformers.TrainerCallback` printing a `Progress` line per optimizer step."""
    from transformers import TrainerCallback

    from .stages import Progress

    class StepProgress(TrainerCallback):
        progress: Progress | None = None

        def on_train_begin(self, args, state, control, **kwargs):  # noqa: ANN001, ANN201 - transformers' signature
            self.progress = Progress(stage, state.max_steps, "steps", log)

        def on_step_end(self, args, state, control, **kwargs):  # noqa: ANN001, ANN201
            loss = next((h.get("loss") for h in reversed(state.log_history) if "loss" in h), None)
            if self.progress is not None:
                self.progress.advance(note=f"loss {loss:.3f}" if loss is not None else "")

    return StepProgress()


def _train_kwargs(config: ReproduceConfig, precision: str) -> dict[str, Any]:
    """What both trainers take from the run's speed choices."""
    import torch

    return {"bf16": precision == "bf16", "use_cpu": not torch.cuda.is_available(), "report_to": "none",
            "save_strategy": "no", "seed": config.seed, "disable_tqdm": True,
            "activation_checkpointing": False}  # TRL's default recomputes every forward: 1.6x a LoRA step here


def _lora(model: Any, config: ReproduceConfig) -> Any:
    from .speed import lora_config

    return lora_config(model, r=config.lora_r, alpha=config.lora_alpha, top_layers=config.lora_layers) if config.lora_r else None


def sft_recipe(config: ReproduceConfig, out: Path, precision: str, *, lora: bool) -> Any:
    """The SFT recipe (`SFTRecipeConfig`) of a reproduction's ``sft-train`` stage."""
    from .sft import SFTRecipeConfig

    return SFTRecipeConfig(model_name_or_path=config.model, use_peft=lora, output_dir=str(out / "sft"),
                           num_train_epochs=config.sft_epochs, learning_rate=config.sft_learning_rate,
                           # a pretrained model: one row a pass (no padding to the batch's longest row), the batch by
                           # accumulation; the small student gains more from batching than it loses to padding
                           per_device_train_batch_size=1 if lora else config.sft_batch_size,
                           gradient_accumulation_steps=config.sft_batch_size if lora else 1,
                           max_length=4096, eval_fraction=0.0,
                           deduplicate=False, logging_steps=1, completion_only_loss=config.sft_loss == "completion",
                           opening_weight=config.sft_opening_weight, opening_tokens=config.sft_opening_tokens,
                           **_train_kwargs(config, precision))


def _sft(model: Any, tokenizer: Any, dataset: Any, config: ReproduceConfig, out: Path, precision: str, log: Any) -> tuple[Any, dict[str, Any]]:
    from .sft import run_sft

    peft_config = _lora(model, config)
    recipe = sft_recipe(config, out, precision, lora=peft_config is not None)
    result = run_sft(recipe, dataset=dataset, model=model, tokenizer=tokenizer, peft_config=peft_config,
                     callbacks=[_step_progress("sft-train", log)], quiet=True)
    return result.model, dict(result.metrics)


class _SnapshotPolicy:
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
            self._policy = _policy(inference_copy(self.trainer.model, self.precision), self.tokenizer, self.config)
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
        policy = _policy(inference_copy(model, precision), tokenizer, config)
        traces = _play(policy, config, seeds, out / "grpo" / "validation" / f"update-{step}.jsonl", log=log, stage=f"select-{step}")
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
    return GRPOConfig(
        output_dir=str(out / "grpo"),
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
        generation_kwargs={"stop": ["\n"]} if config.use_vllm else {"eos_token_id": _line_ends(tokenizer)},
        **_train_kwargs(config, precision),
    )


def _grpo(model: Any, tokenizer: Any, states: list[dict[str, Any]], config: ReproduceConfig, out: Path, precision: str, log: Any):
    """Step-level cost-aware GRPO on `states`; returns the trained model and the reward log."""
    from datasets import Dataset
    from trl import GRPOTrainer

    from .callbacks import MetricsFileCallback, RecordsFileCallback
    from .continuation import DecoupledReward
    from .exploration import SkipExploration
    from .selection import BestOnValidation
    from .sft import quiet_trainer
    from .speed import score_trained_positions_only

    reward = continuation_reward(config)
    args = grpo_arguments(config, out, precision, tokenizer)
    peft_config = None if hasattr(model, "peft_config") else _lora(model, config)
    if hasattr(model, "peft_config"):  # the SFT adapter trains on
        for name, parameter in model.named_parameters():
            parameter.requires_grad_("lora_" in name)
    prefill = _policy(model, tokenizer, config).prefill
    rollout_func = None
    if config.grpo_skip_samples:
        skips = _skip_completions(states, out / "grpo-states.jsonl", tokenizer, prefill, config.skip_kinds())
        log(f"grpo: {config.grpo_skip_samples} of each group of {config.grpo_generations} the state's skip ({len(skips)} distinct "
            f"prompts of {len(states)} states have one)")
        rollout_func = SkipExploration(skips, config.grpo_skip_samples, tokenizer)
    score_trained_positions_only()
    callbacks = [MetricsFileCallback(out / "grpo" / "metrics.jsonl"), RecordsFileCallback(reward.log, out / "grpo" / "rewards.jsonl"),
                 _step_progress("grpo-train", log)]
    if config.grpo_select_every:
        callbacks.append(BestOnValidation(grpo_validation(config, out, precision, tokenizer, reward, log), config.grpo_select_every,
                                          path=out / "grpo" / "selection.jsonl", log=log))
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
    reward.policy = _SnapshotPolicy(trainer, tokenizer, config, precision)
    reward.prefill = prefill
    trainer.model.train()
    trainer.train()
    return trainer.model, reward.log


def grpo_train_states(states: list[dict[str, Any]], config: ReproduceConfig) -> list[dict[str, Any]]:
    """The states GRPO trains on: all of `states`, or with guided exploration narrowed by
    ``--grpo-skip-kinds`` those whose meta-action is one it skips (all of them if none is), with
    ``--grpo-lead-states`` each one's preceding state of its episode as well (in `states`' order)."""
    if not config.grpo_skip_samples or set(config.skip_kinds()) == set(META_ACTIONS):
        return states
    skipped = [state for state in states if state.get("called") in config.skip_kinds()]
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


def _skip_completions(states: list[dict[str, Any]], traces_path: Path, tokenizer: Any, prefill: str,
                      kinds: Sequence[str] = META_ACTIONS) -> dict[str, str]:
    """Each consulting state's skip (`exploration.skip_action` in the episode it came from) as the
    completion text GRPO trains on, keyed by the state's prompt; a state where the episode acted,
    or whose meta-action is not one of `kinds`, has none."""
    from evoharness_bpe import read_traces

    from .exploration import completion_text, skip_action
    from .grpo import CHAT_TEMPLATE_KWARGS

    episodes = {(int(t.metadata.get("difficulty") or 1), int(t.metadata["seed"])): t for t in read_traces(traces_path)}
    skips = {}
    for state in states:
        if state.get("called") not in kinds:  # kinds are meta-actions: a state where the episode acted has none
            continue
        action = skip_action(episodes[int(state["difficulty"]), int(state["seed"])], int(state["position"]), kinds)
        if action is not None:
            skips[state["prompt"]] = completion_text(tokenizer, action, prefill, CHAT_TEMPLATE_KWARGS)
    return skips


def _line_ends(tokenizer: Any) -> list[int]:
    """The end-of-sequence token and every token holding a newline: a one-line call's last token."""
    ends = {int(tokenizer.eos_token_id)} if tokenizer.eos_token_id is not None else set()
    ends |= {i for i in range(len(tokenizer)) if "\n" in tokenizer.decode([i])}
    return sorted(ends)


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The records of a JSONL file the run wrote ([] when it has none)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]


def _save(model: Any, tokenizer: Any, folder: Path, config: ReproduceConfig | None = None, stage: str = "") -> None:
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    if config is not None and (folder / "adapter_config.json").exists():
        write_adapter_card(folder, config, tokenizer, stage)


def reproduce_command(config: ReproduceConfig, preset: str = "cpu") -> str:
    """The ``evoharness reproduce`` command line that makes `config`: `preset` and the flags that differ from it."""
    base = asdict(load_reproduce_preset(preset))
    words = ["evoharness", "reproduce", "--preset", preset, "--out", config.out]
    for name, value in asdict(config).items():
        if name == "out" or value == base.get(name):
            continue
        flag = "--" + name.replace("_", "-")
        if isinstance(value, bool):
            words.append(flag if value else "--no-" + flag[2:])
        else:
            words += [flag, str(value)]
    return shlex.join(words)


def write_adapter_card(folder: str | Path, config: ReproduceConfig, tokenizer: Any, stage: str) -> Path:
    """The adapter card (``evoharness.json``) of a LoRA adapter a stage saved: its base model, the
    episode settings and prompt format it was trained under, and the config that produced it, so
    ``evoharness run --adapter FOLDER`` plays it as it was evaluated."""
    from evoharness_bpe.lab.policies.adapter import ADAPTER_CARD

    from .grpo import CHAT_TEMPLATE_KWARGS

    episode = config.episode_config()
    card = {
        "base": config.model,
        "episode": {"harness": "bpe", "max_steps": episode.max_steps, "window": episode.window, "dashboard_tokens": episode.dashboard_tokens,
                    "system_prompt": episode.system_prompt, "spec_style": episode.spec_style,
                    "max_invalid_run": episode.max_invalid_run},
        "policy": {"chat_template": tokenizer.chat_template, "chat_template_kwargs": dict(CHAT_TEMPLATE_KWARGS),
                   "one_line_calls": True},
        "produced_by": {"command": reproduce_command(config), "stage": stage,
                        "train_seeds": {str(level): [0, n - 1] for level, n in config.episodes_per_level().items()},
                        "config": asdict(config)},
    }
    path = Path(folder) / ADAPTER_CARD
    path.write_text(json.dumps(card, indent=2), "utf-8")
    return path


def _load_trained(base: Any, folder: Path) -> Any:
    """The model a finished training stage saved: its LoRA adapter over `base`, or a whole model."""
    if (folder / "adapter_config.json").exists():
        from peft import PeftModel

        return _on_accelerator(PeftModel.from_pretrained(base, str(folder), is_trainable=True))
    from transformers import AutoModelForCausalLM

    return _on_accelerator(AutoModelForCausalLM.from_pretrained(folder))


def _on_accelerator(model: Any) -> Any:
    """`model` on the CUDA device when there is one (the trainers train it there, and every stage's
    episodes generate there), else where it is."""
    import torch

    return model.to("cuda") if torch.cuda.is_available() else model


def _base_model(config: ReproduceConfig, out: Path, dataset: Any) -> tuple[Any, Any]:
    """The raw policy (on the accelerator, when there is one) and its tokenizer."""
    model, tokenizer = _built_or_loaded(config, out, dataset)
    return _on_accelerator(model), tokenizer


def _built_or_loaded(config: ReproduceConfig, out: Path, dataset: Any) -> tuple[Any, Any]:
    """The raw policy and its tokenizer: the student built (once, saved in ``raw/``) or the model loaded."""
    from .grpo import CHAT_TEMPLATE_KWARGS
    from .models import load_model_and_tokenizer
    from .student import build_student, student_chat_template

    if config.model == "student":
        if (out / "raw" / "config.json").exists():
            from transformers import AutoModelForCausalLM, AutoTokenizer

            return AutoModelForCausalLM.from_pretrained(out / "raw"), AutoTokenizer.from_pretrained(out / "raw")
        train = dataset["train"]
        sample = train.select(range(0, len(train), max(1, len(train) // 300)))
        return build_student(sample, vocab_size=config.student_vocab, hidden_size=config.student_hidden,
                             layers=config.student_layers, seed=config.seed, out_dir=out / "raw",
                             template_kwargs=CHAT_TEMPLATE_KWARGS, id_rows=train)
    model, tokenizer = load_model_and_tokenizer(config.model, dtype="float32")  # fp32 master weights; bf16 by autocast
    if config.chat_template.startswith("compact"):  # every difficulty-1 prompt within 1,024 SmolLM2 tokens (docs/benchmarks.md)
        tokenizer.chat_template = student_chat_template(tools_first=config.chat_template == "compact-tools-first")
    return model, tokenizer


def reproduce(config: ReproduceConfig, *, log: Any = print, resume: bool = False, fork: str | Path | None = None) -> dict[str, Any]:
    """Run the reproduction end to end; write ``results.json``, ``report.md`` and plots in ``config.out``.

    Every stage (`STAGES`) leaves its outputs and a marker in ``config.out``; with `resume` the run
    already there continues at its first unfinished stage (its config must equal `config`). With
    `fork`, a new run starts from the finished stages of the run in that folder which `config`'s
    differences leave alone (`shared_stages`): a GRPO ablation reuses the SFT it starts from.
    """
    import torch

    from evoharness_bpe import read_traces

    from .continuation import consulting_states, state_rows, successful_states
    from .datasets import traces_to_sft_dataset
    from .reproduce_report import targets, write_report
    from .speed import resolve_precision
    from .stages import StageFolder, load_average

    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()  # stages print their own progress lines
    started = time.perf_counter()
    out = Path(config.out)
    if fork is not None and resume:
        raise UserError(_FORK_OR_RESUME)
    folder = StageFolder.open(out, asdict(config), resume=resume, defaults=_field_defaults(), outputs=STAGE_OUTPUTS)
    if fork is not None:
        reused = shared_stages(fork_config(fork), asdict(config))
        copied = folder.adopt(fork, {stage: STAGE_OUTPUTS[stage] for stage in reused})
        log(f"fork: {', '.join(copied) or 'no stage'} taken from {fork}")
    precision = resolve_precision(config.precision)
    if config.threads:
        torch.set_num_threads(config.threads)
    torch.manual_seed(config.seed)
    stages = config.stage_list()
    machine = {"precision": precision, "threads": torch.get_num_threads(), "load_at_start": load_average(),
               "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"}
    log(f"run: {out} ({'resumed' if resume else 'new'}), precision {precision}, {machine['threads']} torch threads, "
        f"load {machine['load_at_start']}")

    def expert() -> dict[str, Any]:
        traces = _expert_traces(config, _training_seeds(config))
        added = _expert_traces(config, _lean_seeds(config), lean=True)  # none without --expert-lean-episodes
        traces += added
        _write_traces(out / "expert.jsonl", traces)
        return {"episodes": len(traces), "model_calls": sum(len(t.model_calls) for t in traces),
                "successes": sum(bool(t.outcome.success) for t in traces), "lean_added": len(added)}

    record = folder.run("expert", expert, log)
    log(f"expert: {record['episodes']} episodes, {record['model_calls']} model calls, {record['successes']} successes")
    # Identical rows (random ids masked) collapse, then every call position gets one row per episode
    # that reaches it, so late calls weigh as much as the opening.
    dataset = traces_to_sft_dataset(read_traces(out / "expert.jsonl"), deduplicate=True, balance_positions=True,
                                    eval_fraction=0.0, seed=config.seed)
    model, tokenizer = _base_model(config, out, dataset)
    log(f"policy: {config.model}, {sum(p.numel() for p in model.parameters()):,} parameters, vocabulary {len(tokenizer)}")
    budget = _budget_problems(config, stages, tokenizer, _policy(model, tokenizer, config).prefill)
    for problem in budget:
        log(f"budget: {problem}")

    results: list[dict[str, Any]] = []
    if "raw" in stages:
        results.append(folder.run("raw", lambda: _evaluate("raw", model, tokenizer, config, out, log, precision), log))

    def sft_train() -> dict[str, Any]:
        trained, metrics = _sft(model, tokenizer, dataset, config, out, precision, log)
        _save(trained, tokenizer, out / "sft" / "model", config, "sft")
        log(f"sft: {len(dataset['train'])} rows, loss {metrics.get('train_loss', float('nan')):.3f}")
        return {"rows": len(dataset["train"]), **{k: v for k, v in metrics.items() if isinstance(v, (int, float))}}

    sft_metrics = folder.run("sft-train", sft_train, log)
    if (out / "sft" / "model" / "adapter_config.json").exists():  # a fresh base: training injected its LoRA layers in place
        model, tokenizer = _base_model(config, out, dataset)
    model = _load_trained(model, out / "sft" / "model")
    if "sft" in stages:
        results.append(folder.run("sft", lambda: _evaluate("sft", model, tokenizer, config, out, log, precision), log))

    reward_log: list[dict[str, Any]] = []
    selection_log: list[dict[str, Any]] = []
    if "grpo" in stages:
        def grpo_states() -> dict[str, Any]:
            from .speed import inference_copy

            seeds = {level: list(range(config.grpo_state_episodes)) for level in config.grpo_levels()}
            player = _policy(inference_copy(model, precision), tokenizer, config)
            own = _play(player, config, seeds, out / "grpo-states.jsonl", log=log, stage="grpo-states")
            states = state_rows(own, player.render_prompt)
            if config.grpo_from_successes:
                finished = successful_states(states)
                if not finished:
                    log("grpo: the SFT policy finished none of its episodes; training on the states of all of them")
                states = finished or states
            kind = config.grpo_states
            if kind == "consulting":
                consulting = consulting_states(states)
                if not consulting:
                    log("grpo: the SFT policy never called a meta-action; training on all its states")
                    kind = "all"
                states = consulting or states
            (out / "grpo-states.json").write_text(json.dumps(states), "utf-8")
            return {"states": len(states), "kind": kind, "episodes": len(own), "successes": sum(bool(t.outcome.success) for t in own)}

        info = folder.run("grpo-states", grpo_states, log)
        log(f"grpo: {info['states']} states ({info['kind']}) from {info['episodes']} SFT-policy episodes ({info['successes']} successes)")

        def grpo_train() -> dict[str, Any]:
            states = json.loads((out / "grpo-states.json").read_text("utf-8"))
            kept = grpo_train_states(states, config)
            if len(kept) != len(states):
                lead = " or come just before one (--grpo-lead-states)" if config.grpo_lead_states else ""
                log(f"grpo: {len(kept)} of {len(states)} states called {', '.join(config.skip_kinds())} (--grpo-skip-kinds){lead}")
            states = kept
            trained, rewards = _grpo(model, tokenizer, states, config, out, precision, log)
            _save(trained, tokenizer, out / "grpo" / "model", config, "grpo")
            return {"steps": config.grpo_steps, "scored": len(rewards)}

        folder.run("grpo-train", grpo_train, log)
        reward_log = _read_jsonl(out / "grpo" / "rewards.jsonl")
        selection_log = _read_jsonl(out / "grpo" / "selection.jsonl")
        base, tokenizer = _base_model(config, out, dataset) if config.model != "student" else (None, tokenizer)
        model = _load_trained(base, out / "grpo" / "model") if base is not None else _load_trained(model, out / "grpo" / "model")
        grpo_levels = _ints(config.grpo_eval_difficulties) or None
        results.append(folder.run("grpo", lambda: _evaluate("grpo", model, tokenizer, config, out, log, precision, grpo_levels), log))

    summary = {
        "config": asdict(config),
        "machine": {**machine, "load_at_end": load_average()},
        "results": results,
        "sft": sft_metrics,
        "grpo_curve": reward_log,
        "grpo_selection": selection_log,
        "budget_problems": budget,
        "stage_wall_s": dict(folder.wall),
        "wall_s": round(sum(folder.wall.values()), 1),
        "wall_s_this_process": round(time.perf_counter() - started, 1),
    }
    summary["targets"] = targets(results)
    (out / "results.json").write_text(json.dumps(summary, indent=2, default=float), "utf-8")
    write_report(summary, out)
    log(f"report: {out / 'report.md'} ({summary['wall_s']:.0f} s of stages)")
    return summary


# -- command line ---------------------------------------------------------------------------
def register(commands: Any) -> None:
    """Add ``evoharness reproduce`` to the CLI's sub-parsers."""
    parser = commands.add_parser("reproduce", help="the miniature reproduction: raw → SFT → cost-aware GRPO, with a report",
                                 description="Each flag's value comes from the preset (--preset, default cpu) unless given; "
                                             "the values shown are the cpu preset's.")
    parser.add_argument("--preset", default=None, choices=PRESETS, help="settings to start from (default: cpu; tiny is a smoke "
                                                                        "test of the pipeline, not a result)")
    parser.add_argument("--resume", metavar="OUT", default=None,
                        help="continue the run in OUT at its first unfinished stage (refused if a flag differs from its config)")
    parser.add_argument("--fork", metavar="SRC", default=None,
                        help="start a new run (--out) with SRC's settings and the flags given, taking SRC's finished stages "
                             "those flags leave alone (a GRPO ablation reuses SRC's SFT)")
    shown = _preset_values("cpu")
    for f in fields(ReproduceConfig):
        flag = "--" + f.name.replace("_", "-")
        kind = type(f.default) if f.default is not None else str
        value = shown.get(f.name, f.default)
        text = f.metadata["help"] + ("" if f.name == "out" or value in ("", None) else f" (cpu: {value})")
        if kind is bool:
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=None, help=text)
        else:
            parser.add_argument(flag, type=kind, default=None, help=text)
    parser.set_defaults(handler=_main)


def _preset_values(name: str) -> dict[str, Any]:
    """The fields a preset sets, with the config's defaults for the rest (for help texts)."""
    try:
        return asdict(load_reproduce_preset(name))
    except (UserError, OSError, ImportError):
        return {}


def _field_defaults() -> dict[str, Any]:
    return {f.name: f.default for f in fields(ReproduceConfig)}


def _saved_settings(folder: str | Path, flag: str, missing: str) -> dict[str, Any]:
    """The settings the run in `folder` was made with: the fields this version knows, one its
    config.json lacks (a setting added since) at its default. `missing` says what no config means."""
    try:
        saved = json.loads((Path(folder) / "config.json").read_text("utf-8"))
    except FileNotFoundError:
        raise UserError(f"{flag} {folder}: {missing}") from None
    except ValueError as exc:
        raise UserError(f"{flag} {folder}: config.json is not valid JSON ({exc})") from None
    defaults = _field_defaults()
    return {**defaults, **{k: v for k, v in saved.items() if k in defaults}}


def resume_config(folder: str | Path, preset: str | None = None, **overrides: Any) -> ReproduceConfig:
    """The config to resume the run in `folder` with: its own (or `preset`'s), with `overrides` on top."""
    if preset is not None:
        return load_reproduce_preset(preset, **{**overrides, "out": str(folder)})
    values = _saved_settings(folder, "--resume", f"nothing to resume there (no config.json); start a run with --out {folder}")
    values.update({k: v for k, v in overrides.items() if v is not None})
    values["out"] = str(folder)
    return ReproduceConfig(**values)


def fork_config(folder: str | Path) -> dict[str, Any]:
    """The settings of the run in `folder`, for ``--fork`` (`_saved_settings`)."""
    return _saved_settings(folder, "--fork", "no run there (no config.json)")


def _main(args: argparse.Namespace) -> int:
    overrides = {f.name: getattr(args, f.name) for f in fields(ReproduceConfig)}
    if args.resume and args.fork:
        raise UserError(_FORK_OR_RESUME)
    if args.resume:
        if overrides.get("out") not in (None, args.resume):
            raise UserError("--resume OUT continues the run in OUT; leave out --out")
        config = resume_config(args.resume, args.preset, **overrides)
    elif args.fork:
        if overrides.get("out") in (None, args.fork):
            raise UserError("--fork SRC starts a new run: give it its own --out")
        config = (load_reproduce_preset(args.preset, **overrides) if args.preset
                  else ReproduceConfig(**{**fork_config(args.fork), **{k: v for k, v in overrides.items() if v is not None}}))
    else:
        config = load_reproduce_preset(args.preset or "cpu", **overrides)
    try:
        reproduce(config, log=lambda line: print(line, flush=True), resume=bool(args.resume), fork=args.fork)
    except KeyboardInterrupt:
        print(f"interrupted: the finished stages in {config.out} are kept; continue with "
              f"evoharness reproduce --resume {config.out}", flush=True)
        return 130
    return 0
