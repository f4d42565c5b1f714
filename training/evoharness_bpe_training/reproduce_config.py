"""A reproduction's settings: `ReproduceConfig` (every field a flag of ``evoharness reproduce``), its
presets, the stages a run is made of, and which stages a change of settings leaves alone
(``--fork`` and ``--resume`` read a run's saved settings back)."""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields
from importlib import resources
from pathlib import Path
from typing import Any

from evoharness_bpe.actions import META_ACTIONS
from evoharness_bpe.exceptions import UserError

__all__ = ["ReproduceConfig", "load_reproduce_preset", "reproduce_command", "resume_config", "fork_config", "shared_stages",
           "field_defaults", "preset_values", "int_list", "PRESETS", "STAGES", "STAGE_OUTPUTS", "HELD_OUT", "VALIDATION", "needs_sft_training"]

PRESETS: tuple[str, ...] = ("cpu", "tiny", "smollm2-gpu")
HELD_OUT = 10_000
"""Held-out seeds start here; training seeds start at 0."""
VALIDATION = 20_000
"""Validation seeds (`--grpo-select-every`) start here: apart from the training and held-out ones."""
_CHOICES: dict[str, tuple[str, ...]] = {"chat_template": ("compact", "compact-tools-first", "qwen3"), "sft_loss": ("completion", "full"),
                                        "grpo_states": ("all", "consulting"), "grpo_lr_schedule": ("linear", "constant"),
                                        "reward": ("cost", "reference"), "grpo_scale_rewards": ("group", "batch", "none"),
                                        "grpo_aggregation": ("sum", "decoupled"), "grpo_select_rule": ("score", "fewest-calls")}


def int_list(text: object) -> list[int]:
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
    stages: str = field(default="raw,sft,grpo", metadata={
        "help": "Stages to evaluate, of raw, sft and grpo; training runs only as far as they need (raw alone trains nothing)."})
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
    sft_cache_frozen_layers: bool = field(default=True, metadata={
        "help": "Keep the hidden state the layers below LoRA's hand up for each SFT row and reuse it in later epochs "
                "(the same adapter, sooner; `frozen_layers`)."})
    sft_checkpoint_steps: int = field(default=25, metadata={
        "help": "Save sft-train's state (adapter, optimizer, data order) every this many optimizer steps, so that a stopped "
                "run's --resume continues that stage from its last save instead of from the start (0: no saves)."})
    grpo_steps: int = field(default=20, metadata={"help": "GRPO optimizer steps."})
    grpo_checkpoint_steps: int = field(default=1, metadata={
        "help": "Save grpo-train's state (adapter, optimizer, random state, its logs, validations and best weights so far) "
                "every this many updates, so that a stopped run's --resume continues that stage from its last save (0: no saves)."})
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
    grpo_closing_states: bool = field(default=False, metadata={
        "help": "Also train on the states of the SFT policy's failed episodes where finishing right there would have "
                "succeeded (the work done, the policy went on and spoilt it), found by replaying each episode and "
                "closing it; with --grpo-skip-samples their forced samples are the closing action."})
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
    grpo_seed: int = field(default=-1, metadata={
        "help": "Seed of GRPO alone (its sampled actions and the order of its states); -1: --seed. A --fork with another "
                "value trains GRPO again on the same SFT policy: the run-to-run spread of the GRPO stage."})
    grpo_select_every: int = field(default=0, metadata={
        "help": "Keep the best of periodic validations: before the first GRPO update, every N updates and after the last, "
                "play --grpo-select-episodes validation episodes (seeds apart from the training and held-out ones) greedily "
                "and score them with GRPO's reward; the stage ends with the best weights by --grpo-select-rule, the SFT "
                "policy's among them (ties keep the earlier). 0: the last update's weights."})
    grpo_select_episodes: int = field(default=10, metadata={"help": "Validation episodes per GRPO difficulty (--grpo-select-every)."})
    grpo_select_rule: str = field(default="score", metadata={
        "help": "Which validation --grpo-select-every keeps: `score` (the highest mean reward) or `fewest-calls` (the fewest "
                "meta-calls per episode among those whose success is at least the SFT policy's, update 0's, less "
                "--grpo-select-margin: the annealing target's own terms)."})
    grpo_select_margin: float = field(default=0.05, metadata={
        "help": "With --grpo-select-rule fewest-calls: how far below the SFT policy's validation success a kept update may be."})
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
        counts = int_list(self.train_episodes)
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
                     "grpo_beta", "grpo_select_every", "sft_checkpoint_steps", "grpo_checkpoint_steps"):
            if getattr(self, name) < 0:
                raise UserError(f"--{name.replace('_', '-')} must be 0 or more, got {getattr(self, name)}")
        if not 0.0 <= self.grpo_select_margin < 1.0:
            raise UserError(f"--grpo-select-margin is a fraction of success in [0, 1), got {self.grpo_select_margin}")
        if self.grpo_seed < -1:
            raise UserError(f"--grpo-seed is a seed (0 or more) or -1 for --seed, got {self.grpo_seed}")
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
            levels = int_list(self.difficulties)
        except ValueError:
            raise UserError(f"--difficulties takes comma-separated integers such as 1,2, not {self.difficulties!r}") from None
        if not levels:
            raise UserError("--difficulties must name at least one level")
        return levels

    def grpo_levels(self) -> list[int]:
        """The difficulties whose states GRPO trains on (and validates at, with --grpo-select-every)."""
        return int_list(self.grpo_difficulties)

    def grpo_trainer_seed(self) -> int:
        """The seed GRPO's trainer runs with: --grpo-seed, or --seed where that is -1."""
        return self.seed if self.grpo_seed == -1 else self.grpo_seed

    def episodes_per_level(self) -> dict[int, int]:
        return dict(zip(self.levels(), int_list(self.train_episodes), strict=True))

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
    **dict.fromkeys(("out", "stages", "sft_cache_frozen_layers", "sft_checkpoint_steps", "grpo_checkpoint_steps"), None),  # the same adapter (sooner; or after a stop)
    **dict.fromkeys(("threads", "eval_batch", "lockstep"), "raw"),
    **dict.fromkeys(("grpo_state_episodes", "grpo_difficulties", "grpo_states", "grpo_from_successes",
                     "grpo_closing_states"), "grpo-states"),
    **dict.fromkeys(("grpo_steps", "grpo_learning_rate", "grpo_lr_schedule", "grpo_states_per_step", "grpo_generations", "grpo_temperature", "grpo_beta",
                     "grpo_scale_rewards", "grpo_continuation_calls", "grpo_skip_samples", "grpo_skip_kinds", "reward", "lam", "mu", "invalid_penalty",
                     "charge_on_success_only", "grpo_skip_pull_only", "grpo_skip_uniform_groups", "grpo_lead_states", "use_vllm",
                     "grpo_select_every", "grpo_select_episodes", "grpo_select_rule", "grpo_select_margin", "grpo_aggregation", "grpo_cost_weight",
                     "grpo_seed"),
                    "grpo-train"),
    "grpo_eval_difficulties": "grpo",
}
"""The first stage a setting changes (None: no stage's outputs); a setting not listed changes them all."""

_EVALUATIONS_ONLY: tuple[str, ...] = ("eval_episodes",)
"""Settings that change only the evaluation stages (raw, sft, grpo): no model and no GRPO state depends on them."""
_EVALUATION_STAGES: tuple[str, ...] = ("raw", "sft", "grpo")


def needs_sft_training(stages: Iterable[str]) -> bool:
    """Whether evaluating `stages` (``--stages``) needs the ``sft-train`` stage: ``sft`` evaluates its
    policy and ``grpo`` starts from it; ``raw`` alone trains nothing.

    >>> needs_sft_training(["raw"]), needs_sft_training(["raw", "grpo"])
    (False, True)
    """
    return bool({"sft", "grpo"} & set(stages))


FORK_OR_RESUME = "--fork starts a new run from another's stages; --resume continues a run: pass one of them"


def shared_stages(saved: dict[str, Any], wanted: dict[str, Any]) -> list[str]:
    """The stages (in order) whose outputs a run with `wanted` settings can take from a run made with `saved`:
    those no differing setting changes (a setting changes the stages from its first one on, an
    evaluation-only setting the evaluations alone). A setting one side lacks (added since that run
    was made) counts at its default."""
    defaults = field_defaults()
    changed: set[str] = set()
    for name in set(saved) | set(wanted):
        if saved.get(name, defaults.get(name)) == wanted.get(name, defaults.get(name)):
            continue
        if name in _EVALUATIONS_ONLY:
            changed.update(_EVALUATION_STAGES)
        elif (stage := _FIRST_AFFECTED.get(name, STAGES[0])) is not None:
            changed.update(STAGES[STAGES.index(stage):])
    return [stage for stage in STAGES if stage not in changed]



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



def preset_values(name: str) -> dict[str, Any]:
    """The fields a preset sets, with the config's defaults for the rest (for help texts)."""
    try:
        return asdict(load_reproduce_preset(name))
    except (UserError, OSError, ImportError):
        return {}


def field_defaults() -> dict[str, Any]:
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
    defaults = field_defaults()
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


