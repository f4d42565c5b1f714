"""An evaluation run: environments × policies × harnesses × frameworks × episodes.

Writes ``traces.jsonl`` (one episode a line), ``metrics.json`` (per episode: success, steps,
invalid actions, meta-actions by type, prompt tokens per step, wall time) and ``report.md`` with
its plots into the output folder (see `folder` for what it holds). A folder that holds a run is
refused unless the run resumes it (finished episodes are kept and skipped) or overwrites it.
SIGINT/SIGTERM stop the run after the last finished episode is on disk; metrics and the report
are written from the finished episodes and `RunInterrupted` is raised.
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..envs import make_env
from ...actions import PARTS
from ...exceptions import StoreError, UserError
from ...harness import HARNESSES, PART_HARNESSES
from ..frameworks import EpisodeConfig
from ..registry import load_framework
from ..policy import ChatMessage, Policy
from ...stores.base import ExperienceStore
from ...trace import Trace, TraceWriter
from .folder import FolderMode, check_resume, checkpoint_store, episode_key, finished_episodes, prepare_folder, restore_store
from .bank import BANK_MODES, EVOLVED_BANK, BankMode, RunBank
from .consolidation_report import CONSOLIDATION_PLOT
from .failures import failure_record, is_infrastructure_error
from .fingerprint import episode_fingerprint, policy_identity
from .interrupts import Interrupts, RunInterrupted
from .metrics import episode_metrics, summarize, variant
from .report import PLOTS, write_report

__all__ = ["RunConfig", "run_suite", "POLICIES", "make_policy", "open_store", "RunInterrupted"]

POLICIES = ("expert", "noisy", "local", "trained", "base", "openai")
ADAPTER_POLICIES = ("trained", "base")
"""Policies read from an adapter card: the adapter merged into its base model, and the base alone."""


@dataclass
class RunConfig:
    """What `evoharness run` runs (every field is also a command-line flag)."""

    envs: list[str] = field(default_factory=lambda: ["crm-migration"], metadata={"help": "environments"})
    policies: list[str] = field(default_factory=lambda: ["expert"], metadata={"help": "expert, noisy, local, trained, base "
                                                                                   "(the trained policy's base model without its adapter) or openai"})
    harnesses: list[str] = field(default_factory=lambda: ["none", "append", "bpe"], metadata={"help": "none, append, panels, bpe"})
    frameworks: list[str] = field(default_factory=lambda: ["core"], metadata={"help": "core or an installed integration"})
    episodes: int = field(default=1, metadata={"help": "episodes per combination (seeds seed, seed+1, …)"})
    seed: int = field(default=0, metadata={"help": "first environment seed"})
    difficulty: int = field(default=1, metadata={"help": "1 to 3; higher lengthens the horizon"})
    out: Path = field(default=Path("evoharness-run"), metadata={"help": "output folder"})
    model: str | None = field(default=None, metadata={"help": "local model folder (local) or model name (openai)"})
    base_url: str = field(default="http://127.0.0.1:8000/v1", metadata={"help": "OpenAI-compatible endpoint"})
    max_steps: int | None = field(default=None, metadata={"help": "model calls per episode (default: the environment's budget)"})
    model_max_steps: int = field(default=40, metadata={"help": "model calls per episode of the local and openai policies when max_steps is not set"})
    max_new_tokens: int = field(default=96, metadata={"help": "reply length of the local policy"})
    adapter: str | None = field(default=None, metadata={
        "help": "LoRA adapter folder with its card (evoharness.json) that the trained policy plays, under the episode "
                "settings it was trained with (default: the adapter the training package ships)"})
    epsilon: float = field(default=0.1, metadata={"help": "mistake rate of the noisy expert, in [0, 1)"})
    window: int = field(default=12, metadata={"help": "recent messages kept by the append and bpe harnesses"})
    note: str | None = field(default=None, metadata={"help": "a line for the top of the report"})
    mode: FolderMode = field(default="new", metadata={"help": "new (refuse a folder with a run), resume or overwrite"})
    store: str | None = field(default=None, metadata={"help": "Experience store: SQLite path or PostgreSQL DSN (default: OUT/experience.db)"})
    api_key: str | None = field(default=None, metadata={"help": "API key of the openai policy (default: $OPENAI_API_KEY)"})
    games: list[str] | None = field(default=None, metadata={"help": "TextWorld game files (textworld)"})
    observations_in_belief: bool = field(default=True, metadata={
        "help": "bpe and panels: also copy each environment result into Belief while it is whole in the recent window "
                "(EpisodeConfig.observations_in_belief)"})
    ablate: list[str] = field(default_factory=list, metadata={
        "help": "parts to switch off, one variant each, beside the full harness (panels and bpe): belief, progress, "
        "experience, or several joined by + (belief+progress)"})
    charge_meta_actions: bool = field(default=True, metadata={
        "help": "a meta-action spends a step as an environment action does (False: meta-action-only calls are free)"})
    max_meta_actions: int | None = field(default=None, metadata={"help": "meta-action calls per episode (None: no cap)"})

    def variants(self, harness: str) -> list[tuple[str, ...]]:
        """The part sets `harness` runs with: all three, then each ablation (panels and bpe only)."""
        out = [PARTS]
        if harness in PART_HARNESSES:
            for spec in self.ablate:
                off = set(spec.split("+"))
                parts = tuple(p for p in PARTS if p not in off)
                if parts not in out:
                    out.append(parts)
        return out

    bank: BankMode = field(default="live", metadata={
        "help": "live (episodes write the store as they run), episode (an empty store each), frozen (they only read it) or evolving (each "
                "combination evolves a private copy of it in windows of --consolidate-every episodes)"})
    consolidate_every: int = field(default=5, metadata={"help": "episodes per window of an evolving bank"})
    consolidator: str = field(default="rules", metadata={"help": "who consolidates an evolving bank: rules or model"})
    teacher_url: str | None = field(default=None, metadata={"help": "OpenAI-compatible endpoint of the model consolidator"})
    teacher_model: str = field(default="teacher", metadata={"help": "model name sent to the model consolidator"})
    max_per_kind: int = field(default=80, metadata={"help": "entries an evolving bank may hold per kind"})
    delete_veto: int = field(default=3, metadata={"help": "an entry recalled this many times cannot be deleted"})
    retries: int = field(default=2, metadata={"help": "retries of an episode whose model server failed (5xx, timeout)"})
    retry_backoff: float = field(default=2.0, metadata={"help": "seconds before the first retry (doubling)"})
    action_syntax: str = field(default="tools", metadata={
        "help": "how the local and openai policies act: tool calls (tools) or <action>verb [argument]</action> text "
                "(text, for models and servers without tool calling; the expert policies always call tools)"})

    def __post_init__(self) -> None:
        for p in self.policies:
            if p not in POLICIES:
                raise UserError(f"unknown policy {p!r}; choose from {', '.join(POLICIES)}")
        for h in self.harnesses:
            if h not in HARNESSES:
                raise UserError(f"unknown harness {h!r}; choose from {', '.join(HARNESSES)}")
        for spec in self.ablate:
            unknown = sorted(set(spec.split("+")) - set(PARTS))
            if unknown:
                raise UserError(f"--ablate {spec}: unknown part {', '.join(unknown)}; the parts are {', '.join(PARTS)}")
        if self.ablate and not set(self.harnesses) & set(PART_HARNESSES):
            raise UserError(f"--ablate switches parts of the {' and '.join(PART_HARNESSES)} harnesses off: add --harness bpe")
        if self.max_meta_actions is not None and self.max_meta_actions < 0:
            raise UserError("--max-meta-actions must be 0 or more")
        if self.episodes < 1:
            raise UserError("--episodes must be at least 1")
        if not 0.0 <= self.epsilon < 1.0:
            raise UserError(f"--epsilon is a mistake rate in [0, 1), not {self.epsilon}")
        if self.mode not in ("new", "resume", "overwrite"):
            raise UserError(f"mode must be new, resume or overwrite, not {self.mode!r}")
        if "openai" in self.policies and not self.model:
            raise UserError("the openai policy needs --model NAME (and --base-url for the endpoint)")
        self.out = Path(self.out)
        if self.bank not in BANK_MODES:
            raise UserError(f"--bank must be {', '.join(BANK_MODES)}, not {self.bank!r}")
        if self.bank == "evolving" and self.mode == "resume":
            raise UserError("an evolving run cannot be resumed: its bank depends on every episode before; run it again "
                            "with --overwrite (it starts from its seed bank)")
        from ..policies.textactions import ACTION_SYNTAXES  # noqa: PLC0415 - the policies load on first use

        if self.action_syntax not in ACTION_SYNTAXES:
            raise UserError(f"--action-syntax must be {' or '.join(ACTION_SYNTAXES)}, not {self.action_syntax!r}")
        if self.consolidator not in ("rules", "model"):
            raise UserError(f"--consolidator must be rules or model, not {self.consolidator!r}")
        if self.teacher_url and not self.teacher_url.startswith(("http://", "https://")):
            raise UserError(f"--teacher must start with http:// or https://, got {self.teacher_url!r}")
        if min(self.consolidate_every, self.max_per_kind, self.delete_veto) < 1 or self.retries < 0 or self.retry_backoff < 0:
            raise UserError("--consolidate-every, --max-per-kind and --delete-veto must be at least 1, --retries and "
                            "--retry-backoff not negative")


class _Counted:
    """Calls `tick` after each model call of the wrapped policy (progress bars)."""

    def __init__(self, policy: Policy, tick: Callable[[], None]) -> None:
        self.policy, self.tick = policy, tick

    def complete(self, messages: list[ChatMessage], tools: list[dict[str, Any]]) -> ChatMessage:
        reply = self.policy.complete(messages, tools)
        self.tick()
        return reply

    def count_prompt_tokens(self, messages: list[ChatMessage], tools: list[dict[str, Any]]) -> int | None:
        count = getattr(self.policy, "count_prompt_tokens", None)
        return count(messages, tools) if count is not None else None


def make_policy(kind: str, env: Any, config: RunConfig, cache: dict[str, Policy], seed: int = 0) -> Policy:
    """A policy of `kind` for one episode of `env` (model-backed ones are built once and reused)."""
    from ..policies import ExpertPolicy, NoisyExpertPolicy  # noqa: PLC0415

    if kind == "expert":
        return ExpertPolicy(env)
    if kind == "noisy":
        return NoisyExpertPolicy(env, epsilon=config.epsilon, seed=seed)
    if kind not in cache:
        if kind in ADAPTER_POLICIES:
            from ..policies.adapter import adapter_policy  # noqa: PLC0415

            cache[kind] = adapter_policy(trained_adapter(config), with_adapter=kind == "trained")
            return cache[kind]
        if kind == "local":
            from ..policies.transformers import TransformersPolicy  # noqa: PLC0415

            # text actions: the reply opens an action, and ends with its line
            text = {"prefill": "<action>", "one_line_calls": True} if config.action_syntax == "text" else {}
            try:
                cache[kind] = TransformersPolicy(config.model, max_new_tokens=config.max_new_tokens, **text)
            except UserError:
                raise
            except Exception as exc:  # noqa: BLE001 - transformers raises many types for a bad folder
                raise UserError(f"--model {config.model} could not be loaded ({type(exc).__name__}: {str(exc).splitlines()[0][:200]}): "
                                "pass a saved Hugging Face model folder") from exc
        else:
            from ..policies.openai import OpenAICompatiblePolicy  # noqa: PLC0415

            cache[kind] = OpenAICompatiblePolicy(str(config.model), config.base_url, api_key=config.api_key)
        if config.action_syntax == "text":
            from ..policies.textactions import TextActionPolicy  # noqa: PLC0415

            cache[kind] = TextActionPolicy(cache[kind], default_tool="auto")  # ALFWorld: <action>go to desk 1</action>
    return cache[kind]


def trained_adapter(config: Any) -> str:
    """The adapter folder of the trained policy: ``config.adapter``, or the one the training package ships."""
    if config.adapter:
        return str(config.adapter)
    shipped = shipped_adapter()
    if shipped is None:
        raise UserError("the trained policy needs --adapter FOLDER (a LoRA adapter with its evoharness.json), or the training "
                        "package with its shipped adapter: pip install -e training")
    return str(shipped)


def shipped_adapter() -> Path | None:
    """The LoRA adapter the training package ships (the CPU reproduction's policy after SFT and GRPO), without importing it."""
    import importlib.util  # noqa: PLC0415

    spec = importlib.util.find_spec("evoharness_bpe_training")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(list(spec.submodule_search_locations)[0]) / "adapters" / "smollm2-crm"
    return folder if (folder / "adapter_config.json").exists() else None


def trained_episode(config: Any) -> dict[str, Any]:
    """The episode settings the trained policy's adapter card fixes (its harness aside: the run's harnesses apply)."""
    from ..policies.adapter import read_adapter_card  # noqa: PLC0415

    card = read_adapter_card(trained_adapter(config))
    return {k: v for k, v in card["episode"].items() if k != "harness"}


def open_store(spec: str | None, out: Path) -> ExperienceStore:
    """The run's Experience store: a PostgreSQL DSN, an SQLite path, or ``OUT/experience.db``.

    A `spec` that cannot be opened is a `UserError` naming ``--store`` (with any password hidden).
    """
    try:
        if spec and (spec.startswith(("postgresql://", "postgres://")) or "dbname=" in spec):
            from ...stores.postgres import PostgresExperienceStore  # noqa: PLC0415

            return PostgresExperienceStore(spec)
        from ...stores.sqlite import SQLiteExperienceStore  # noqa: PLC0415

        return SQLiteExperienceStore(spec or out / "experience.db")
    except (OSError, StoreError) as exc:
        if spec is None:
            raise
        detail = (getattr(exc, "strerror", None) or str(exc)).splitlines()[0][:200]
        raise UserError(f"--store {hide_password(spec)} cannot be opened ({hide_password(detail)}): pass an SQLite file "
                        "path in a writable folder, or the DSN of a running PostgreSQL server") from None


def hide_password(text: str) -> str:
    """`text` with the password of a DSN (``user:secret@`` or ``password=secret``) replaced by ``***``."""
    text = re.sub(r"(://[^:/@\s]*:)[^@\s]*@", r"\1***@", text)
    return re.sub(r"(password\s*=\s*)('[^']*'|\S+)", r"\1***", text, flags=re.IGNORECASE)


class _Progress:
    """rich progress bars when rich is installed, else one printed line per episode."""

    def __init__(self, total: int) -> None:
        self.rich: Any = None
        self.current: Any = None
        if not sys.stdout.isatty():  # logs: plain lines, not bars cut to "0:00…"
            return
        try:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn  # noqa: PLC0415
        except ImportError:
            return
        self.rich = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        self.rich.start()
        self.all = self.rich.add_task("episodes", total=total)

    def start(self, label: str, budget: int, *, calls: bool = False) -> Callable[[], None]:
        """Begin an episode; the returned function is called after each model call.

        With `calls` (a model-backed policy, whose calls take seconds each) plain output also
        prints a line per model call: the model calls so far and the time the episode has taken.
        """
        if self.rich is None:
            if not calls:
                return lambda: None
            started, done = time.monotonic(), [0]

            def line() -> None:
                done[0] += 1
                print(f"{label}: model call {done[0]} of at most {budget} ({time.monotonic() - started:.0f} s)", flush=True)

            return line
        self.current = self.rich.add_task(label, total=budget)
        return lambda: self.rich.advance(self.current)  # type: ignore[union-attr]

    def end(self, label: str, row: dict[str, Any]) -> None:
        line = f"{label}: {'success' if row['success'] else 'failure'}, {row['steps']} steps, {row['invalid_actions']} invalid"
        if self.rich is None:
            print(line, flush=True)
            return
        self.rich.update(self.current, total=row["model_calls"], completed=row["model_calls"], description=line)
        self.rich.advance(self.all)

    def skip(self, label: str, reason: str) -> None:
        line = f"{label}: skipped ({reason})"
        if self.rich is None:
            print(line, flush=True)
            return
        self.rich.update(self.current, description=line)
        self.rich.advance(self.all, 1)

    def close(self) -> None:
        if self.rich is not None:
            self.rich.stop()


def run_suite(config: RunConfig, *, teacher: Any = None) -> dict[str, Any]:
    """Run every combination; write traces, metrics and the report; return the metrics.

    Each finished episode carries a fingerprint (`fingerprint.episode_fingerprint`); a resumed
    run skips the episodes whose fingerprint a finished one has and reruns the others. An episode
    whose model server failed (`failures.is_infrastructure_error`) is retried `config.retries`
    times, then reported under ``infrastructure_errors``, not as a task failure. `teacher`
    (anything `as_teacher` takes) is the model consolidator of an evolving bank; by default one
    is built from ``config.teacher_url`` when ``config.consolidator`` is ``model``.

    Raises `RunInterrupted` after writing metrics and the report of the finished episodes when
    SIGINT or SIGTERM arrives.
    """
    if config.bank == "evolving" and config.consolidator == "model" and teacher is None and not config.teacher_url:
        raise UserError("--consolidator model needs --teacher URL (an OpenAI-compatible endpoint, …/v1)")
    runners = {f: load_framework(f) for f in config.frameworks}
    out = config.out
    done: list[Trace] = []
    if config.mode == "resume" and not out.is_file():  # a file: prepare_folder says so
        done = finished_episodes(out)
        check_resume(out, {"envs": config.envs, "policies": config.policies, "harnesses": config.harnesses,
                           "frameworks": config.frameworks, "difficulty": config.difficulty}, done)
    prepare_folder(out, config.mode, (*PLOTS, CONSOLIDATION_PLOT, EVOLVED_BANK))
    own_store = config.store is None
    if own_store and config.mode == "resume":
        restore_store(out)  # drop what an interrupted episode wrote
    combos = [(e, p, h, parts, f) for e in config.envs for p in config.policies for h in config.harnesses
              for parts in config.variants(h) for f in config.frameworks]
    total = len(combos) * config.episodes
    cache: dict[str, Policy] = {}
    rows: list[dict[str, Any]] = []
    stamps = {str(t.metadata["fingerprint"]) for t in done if t.metadata.get("fingerprint")}
    superseded: set[str] = set()  # finished episodes rerun because what their policy saw changed
    infrastructure: list[dict[str, Any]] = []
    identities = {kind: policy_identity(kind, config) for kind in config.policies}
    trained_settings = trained_episode(config) if set(ADAPTER_POLICIES) & set(config.policies) else {}
    skipped: list[str] = []
    envs: dict[str, Any] = {}
    interrupted: RunInterrupted | None = None
    store = open_store(config.store, out)
    bank = _run_bank(config, store, teacher)
    progress = _Progress(total)
    try:
        with Interrupts() as interrupts, TraceWriter(out / "traces.jsonl") as writer:
            for env_name, kind, harness, parts, framework in combos:
                name = variant(harness, parts)
                env = envs.get(env_name) or envs.setdefault(env_name, _make_env(env_name, config))
                budget = int(getattr(env, "step_budget", 200))
                max_steps = config.max_steps or (budget if kind in ("expert", "noisy") else min(budget, config.model_max_steps))
                if kind in ADAPTER_POLICIES and config.max_steps is None:  # whole episodes, as the adapter was evaluated
                    max_steps = min(budget, int(trained_settings.get("max_steps") or budget))
                combo = (env_name, kind, name, framework)
                namespace = ("evoharness", env_name, kind)
                for episode in range(config.episodes):
                    seed = config.seed + episode
                    episode_config = EpisodeConfig(harness=harness, seed=seed, max_steps=max_steps, window=config.window,  # type: ignore[arg-type]
                                                   namespace=namespace,
                                                   observations_in_belief=config.observations_in_belief, parts=parts,
                                                   charge_meta_actions=config.charge_meta_actions,
                                                   max_meta_actions=config.max_meta_actions)
                    if kind in ADAPTER_POLICIES:  # the prompt format the adapter was trained with
                        episode_config = episode_config.model_copy(update={k: v for k, v in trained_settings.items() if k != "max_steps"})
                    stamp = episode_fingerprint(env=env, env_name=env_name, difficulty=config.difficulty, framework=framework,
                                                policy=identities[kind], episode=episode_config, bank=config.bank,
                                                bank_hash=bank.bank_hash(combo, namespace),
                                                games=config.games if env_name == "textworld" else None)
                    if stamp in stamps:
                        continue
                    label = f"{env_name} {kind} {name} {framework} seed {seed}"
                    tick = progress.start(label, max_steps, calls=kind in ("local", *ADAPTER_POLICIES, "openai"))
                    last = episode == config.episodes - 1
                    result: Trace | Exception
                    for attempt in range(1, config.retries + 2):
                        policy = _Counted(make_policy(kind, env, config, cache, seed), tick)
                        try:
                            result = runners[framework](env, policy, bank.episode_store(combo, namespace), episode_config)
                            break
                        except UserError as exc:  # e.g. a framework without this harness: skip the combination
                            result = exc
                            break
                        except Exception as exc:
                            if not is_infrastructure_error(exc):
                                raise
                            result = exc
                            if bank.mode == "live" and own_store:  # drop what the failed attempt wrote
                                store.close()
                                restore_store(out)
                                store = bank.store = open_store(config.store, out)
                            if attempt <= config.retries:
                                time.sleep(config.retry_backoff * 2 ** (attempt - 1))
                    if isinstance(result, UserError):
                        skipped.append(f"{env_name} / {kind} / {name} / {framework}: {result}")
                        progress.skip(label, str(result))
                        break
                    if isinstance(result, Exception):  # the model server failed on every attempt
                        infrastructure.append(failure_record(combo, seed, attempt, result))
                        progress.skip(label, f"infrastructure error after {attempt} attempt(s): {str(result)[:120]}")
                        bank.episode_done(combo, namespace, None, last=last)
                        continue
                    trace = result
                    trace.metadata["fingerprint"] = stamp
                    trace.metadata["bank"] = config.bank
                    if attempt > 1:
                        trace.metadata["attempts"] = attempt
                    trace.metadata.setdefault("seed", seed)
                    trace.metadata.setdefault("difficulty", config.difficulty)
                    trace.metadata["policy"] = kind
                    row = episode_metrics(trace, policy=kind)
                    with interrupts.critical():  # what is on disk and what is counted stay equal
                        writer.write(trace)
                        if own_store:
                            checkpoint_store(out)
                        rows.append(row)
                        superseded.update(t.episode_id for t in done if episode_key(t) == episode_key(trace)
                                          and t.metadata.get("fingerprint") != stamp)
                    progress.end(label, row)
                    bank.episode_done(combo, namespace, trace, last=last)
    except RunInterrupted as exc:
        interrupted = exc
    finally:
        progress.close()
        bank.close()
        store.close()
        for env in envs.values():
            close = getattr(env, "close", None)
            if close:
                close()
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(config).items() if k != "api_key"}
    if settings.get("store"):
        settings["store"] = hide_password(settings["store"])  # metrics.json is shared; a DSN's password is not
    bank.write(out)
    rows = [episode_metrics(t) for t in done if t.episode_id not in superseded] + rows
    data = {"config": settings,
            "note": config.note, "skipped": skipped, "summary": summarize(rows), "episodes": rows,
            "finished": len(rows), "planned": total, "infrastructure_errors": infrastructure,
            "consolidation": bank.windows}
    (out / "metrics.json").write_text(json.dumps(data, indent=1), "utf-8")
    write_report(out)
    if interrupted is not None:
        interrupted.finished, interrupted.planned = len(rows), total  # type: ignore[attr-defined]
        raise interrupted
    return data


def _run_bank(config: RunConfig, store: ExperienceStore, teacher: Any) -> RunBank:
    """The run's `RunBank`, with the consolidator an evolving bank uses."""
    from ...consolidator.window import BankLimits, ModelWindowConsolidator, RuleConsolidator  # noqa: PLC0415

    consolidator: Any = RuleConsolidator()
    if config.bank == "evolving" and (config.consolidator == "model" or teacher is not None):
        if teacher is None:
            from ...consolidator.teachers import OpenAITeacher  # noqa: PLC0415


            teacher = OpenAITeacher(config.teacher_model, config.teacher_url, api_key=config.api_key)
        consolidator = ModelWindowConsolidator(teacher)
    return RunBank(config.bank, store, consolidate_every=config.consolidate_every, consolidator=consolidator,
                   limits=BankLimits(config.max_per_kind, config.delete_veto))


def _make_env(name: str, config: RunConfig) -> Any:
    if config.games and name == "textworld":
        return make_env(name, config.difficulty, games=config.games)
    return make_env(name, config.difficulty)
