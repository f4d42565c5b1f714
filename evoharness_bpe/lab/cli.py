"""The `evoharness` command line.

Built-in commands live here; installed sub-packages add theirs through the
``evoharness.commands`` entry-point group: each entry point is a function that receives the
argparse sub-parsers object and registers its commands (``train``, ``export`` …).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import warnings
from collections.abc import Callable, Sequence
from importlib.metadata import entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from .. import __version__
from ..exceptions import EvoHarnessError, UserError

if TYPE_CHECKING:
    from .runner.suite import RunConfig

__all__ = ["build_parser", "main", "OneLineParser", "DefaultsHelpFormatter", "one_line_errors"]


def _demo(args: argparse.Namespace) -> int:
    from .demo import run_demo
    from .runner.folder import make_out_folder

    make_out_folder(Path(args.out))
    run_demo(args.out)
    return 0


_DEFAULT_ENVS = ["crm-migration", "compliance-review"]


def _run(args: argparse.Namespace) -> int:
    from .policies.transformers import INSTALL_EMBEDDED, embedded_model_dir
    from .policies.openai import PolicyError
    from .registry import env_factory, load_framework
    from .runner.suite import RunConfig, RunInterrupted, run_suite

    for env in args.env or ():
        try:
            env_factory(env)  # fail now on an unknown name or a spec that does not load
        except UserError as exc:
            raise UserError(f"--env: {exc}") from None
    for framework in args.framework or ():
        try:
            load_framework(framework)
        except UserError as exc:
            raise UserError(f"--framework: {exc}") from None
    if args.game and "textworld" not in (args.env or ()):
        raise UserError("--game is for TextWorld: add --env textworld")
    for game in args.game or ():
        if not Path(game).is_file():
            raise UserError(f"--game {game} is not a file: pass TextWorld game files (.z8, .ulx or .json)")
    if args.model and "local" in (args.policy or ()):
        _check_model_folder(args.model)
    if "openai" in (args.policy or ()) and not args.base_url.startswith(("http://", "https://")):
        raise UserError(f"--base-url must start with http:// or https://, got {args.base_url!r}")
    note = None
    policies = args.policy
    model_steps, new_tokens = 40, 96
    difficulty = args.difficulty
    if difficulty is None:  # the main job: a horizon at which the harness pays (bpe ~0.6-0.8x none's prompt per step)
        difficulty = 2 if policies is None and args.env is None else 1
    compare_trained = False
    if policies is None:
        if embedded_model_dir() is not None:
            policies = ["expert", "local"]
            compare_trained = args.env is None and _shipped_adapter_playable()
            if args.env is None:  # the quick offline comparison: a few calls of the small model
                model_steps, new_tokens = 3, 48
            note = (f"The embedded SmolLM2-135M-Instruct (raw, untrained; {model_steps} model calls an episode) "
                    f"against the scripted expert, each under the three harnesses, at difficulty {difficulty}: the "
                    "expert's whole episodes show how the bpe prompt stays flat while none and append grow.")
        else:
            policies = ["expert", "noisy"]
            note = f"The embedded model is not installed ({INSTALL_EMBEDDED}); ran the expert policies instead."
            print(f"evoharness: {note}", file=sys.stderr)
    config = RunConfig(
        envs=args.env or list(_DEFAULT_ENVS), policies=policies, harnesses=args.harness or ["none", "append", "bpe"],
        frameworks=args.framework or ["core"], episodes=args.episodes, seed=args.seed, difficulty=difficulty,
        out=args.out, model=args.model, adapter=args.adapter, base_url=args.base_url, max_steps=args.max_steps, model_max_steps=model_steps,
        max_new_tokens=new_tokens, epsilon=args.epsilon,
        window=args.window, note=note, mode="resume" if args.resume else "overwrite" if args.overwrite else "new",
        store=args.store, api_key=args.api_key, games=args.game, observations_in_belief=args.observations_in_belief, ablate=args.ablate or [],
        charge_meta_actions=not args.free_meta_actions, max_meta_actions=args.max_meta_actions,
        bank=args.bank, consolidate_every=args.consolidate_every, consolidator=args.consolidator,
        teacher_url=args.teacher, teacher_model=args.teacher_model, max_per_kind=args.max_per_kind,
        delete_veto=args.delete_veto, retries=args.retries, action_syntax=args.action_syntax,
    )
    try:
        data = run_suite(config)
    except PolicyError as exc:
        raise UserError(f"{str(exc).rstrip('.')}; {_endpoint_hint(exc, config.base_url)}") from None
    except RunInterrupted as exc:
        finished, planned = getattr(exc, "finished", 0), getattr(exc, "planned", 0)
        print(f"evoharness: interrupted after {finished} of {planned} episodes; results in {config.out}; "
              f"continue with: evoharness run ... --out {config.out} --resume", file=sys.stderr)
        return exc.exit_code
    _print_results(data, config.out)
    failed = data["infrastructure_errors"]
    if not failed and compare_trained:
        failed = _trained_comparison(config, max(args.episodes, TRAINED_EPISODES))
    if not failed:
        return 0
    reasons = {str(error["error"]) for error in failed}
    if len(reasons) > 1:  # one line per episode only when they failed differently
        for error in failed:
            print(f"evoharness: {error['env']} {error['policy']} {error['harness']} {error['framework']} seed {error['seed']}: "
                  f"infrastructure error after {error['attempts']} attempt(s): {error['error']}", file=sys.stderr)
    reason = f": {next(iter(reasons))}" if len(reasons) == 1 else ""
    endpoint = any(error["policy"] == "openai" for error in failed) and len(reasons) == 1 and "HTTP" not in reason
    hint = (f"; is a server running at {config.base_url}? Start it, or pass the --base-url of a running OpenAI-compatible "
            "server (…/v1)") if endpoint else ""
    print(f"evoharness: {len(failed)} episode(s) failed for infrastructure reasons{reason} (not counted as task failures)"
          f"{hint}; run again with --out {config.out} --resume to retry them", file=sys.stderr)
    return 1


TRAINED_SEEDS = 10_000
"""First seed of the main job's trained-policy episodes: the reproduction's held-out seeds, never trained on."""
TRAINED_EPISODES = 3
"""Held-out episodes per policy in the main job's comparison of the base and trained models (at least)."""


def _shipped_adapter_playable() -> bool:
    """True when the training package ships its adapter and peft is installed to play it."""
    import importlib.util

    from .runner.suite import shipped_adapter

    return importlib.util.find_spec("peft") is not None and shipped_adapter() is not None


def _trained_comparison(main: "RunConfig", episodes: int) -> list[dict[str, Any]]:
    """The main job's second part: the embedded model before and after harness training, both under
    the shipped adapter's prompt format and episode settings, on held-out crm-migration seeds at
    the difficulty it was trained for. Returns the infrastructure failures."""
    from .runner.suite import RunConfig, run_suite

    config = RunConfig(envs=["crm-migration"], policies=["base", "trained"], harnesses=["bpe"], frameworks=["core"],
                       episodes=episodes, seed=TRAINED_SEEDS + main.seed, difficulty=1, out=main.out / "trained",
                       mode=main.mode, bank="episode",  # each episode on an empty store of its own, as in training
                       note="The embedded SmolLM2-135M-Instruct before (base) and after (trained) harness training: SFT and "
                            "cost-aware GRPO (the shipped LoRA adapter), under the bpe harness, on held-out crm-migration seeds "
                            "at difficulty 1.")
    print("the embedded model before and after harness training (crm-migration, difficulty 1, held-out seeds):", flush=True)
    data = run_suite(config)
    _print_results(data, config.out)
    return list(data["infrastructure_errors"])


def _print_results(data: dict[str, Any], out: Path) -> None:
    """A line per combination of a finished run, its consolidation edits, and where it wrote."""
    for row in data["summary"]:
        print(f"{row['env']:<18} {row['policy']:<7} {row['harness']:<7} {row['framework']:<10} "
              f"success {row['success_rate']:.0%}  steps {row['mean_steps']:.1f}  "
              f"prompt tokens/step {row['mean_prompt_tokens_per_step']:.0f}")
    if data["consolidation"]:
        edits = {k: sum(w[k] for w in data["consolidation"]) for k in ("add", "update", "merge", "delete", "capacity", "vetoed")}
        print(f"consolidation: {len(data['consolidation'])} windows; " + ", ".join(f"{k} {v}" for k, v in edits.items()))
    print(f"wrote {out / 'traces.jsonl'}, {out / 'metrics.json'} and {out / 'report.md'}")


def _endpoint_hint(error: BaseException, base_url: str) -> str:
    """What to do about a failed call to the model endpoint at `base_url` (the finished episodes are kept)."""
    status = getattr(error.__cause__, "status_code", None)
    if status in (401, 403):
        fix = "pass the endpoint's key with --api-key or set OPENAI_API_KEY"
    elif status == 404:
        fix = f"check that --base-url {base_url} ends in /v1 and that the server serves --model"
    elif status is None:
        fix = (f"is a server running at {base_url}? Start it, or pass the --base-url of a running "
               "OpenAI-compatible server (…/v1)")
    else:
        fix = "check the server's log"
    return f"{fix}; finished episodes are kept: continue with --resume"


def _view(args: argparse.Namespace) -> int:
    from .viewer import write_page

    print(f"wrote {write_page(args.traces, args.out, args.episode)}")
    return 0


def _consolidate(args: argparse.Namespace) -> int:
    from ..consolidator import ConsolidationFailed, OpenAITeacher, consolidate_traces
    from .runner.folder import make_out_folder

    if not args.base_url.startswith(("http://", "https://")):
        raise UserError(f"--base-url must start with http:// or https://, got {args.base_url!r}")
    if not Path(args.traces).exists():
        raise UserError(f"{args.traces} does not exist: pass a JSONL trace file or a folder of them")
    make_out_folder(Path(args.out))
    teacher = OpenAITeacher(args.model, args.base_url, api_key=args.api_key, timeout=args.timeout)

    def retrying(episode: str, attempt: int, delay: float, error: BaseException) -> None:
        print(f"evoharness: teacher failed on episode {episode[:12]} ({type(error).__name__}: {str(error)[:120]}); "
              f"retry {attempt} of {args.retries} in {delay:g} s", file=sys.stderr)

    def done(episode: str, outcome: str) -> None:
        print(f"evoharness: episode {episode[:12]}: {outcome}", file=sys.stderr, flush=True)

    try:
        result = consolidate_traces(args.traces, teacher, args.out, resume=args.resume, overwrite=args.overwrite,
                                    retries=args.retries, backoff=args.backoff, timeout=args.timeout + 5,
                                    on_retry=retrying, on_done=done)
    except ConsolidationFailed as exc:
        kept = exc.result.total
        hint = (f"is the teacher running at {args.base_url}? Start it, or pass the --base-url of a running "
                "OpenAI-compatible server (…/v1); then " if exc.unreachable else "")
        print(f"evoharness: error: {exc}\nevoharness: {kept} finished pair(s) kept in {exc.result.dataset}; "
              f"{hint}continue with: evoharness consolidate {args.traces} --out {args.out} --resume "
              f"(and the same --base-url and --model)", file=sys.stderr)
        return 1
    skipped = f", {result.skipped} done before" if result.skipped else ""
    rejected = f", {result.rejected} answers refused (see {Path(args.out) / 'rejected.jsonl'})" if result.rejected else ""
    print(f"{result.written} new pair(s){skipped}{rejected}; {result.total} in {result.dataset}")
    return 0


def _export_otel(args: argparse.Namespace) -> int:
    from ..otlp import export_traces

    sent = export_traces(args.traces, args.endpoint, content=True if args.content else None)
    print(f"sent {sent} spans" + (f" to {args.endpoint}" if args.endpoint else ""))
    return 0


def _otel_command(argv: list[str]) -> list[str]:
    """``export otel …`` as the ``export-otel`` command (``export`` itself belongs to the training package)."""
    i = next((n for n, a in enumerate(argv) if not a.startswith("-")), None)
    if i is not None and argv[i:i + 2] == ["export", "otel"]:
        return [*argv[:i], "export-otel", *argv[i + 2:]]
    return argv


def _check_model_folder(model: str) -> None:
    path = Path(model)
    if not path.is_dir():
        raise UserError(f"--model {model} is not a folder: pass a local Hugging Face model folder (config.json and weights, or a .gguf file)")
    if not (path / "config.json").exists() and not any(path.glob("*.gguf")):
        raise UserError(f"--model {model} holds no model (no config.json, no .gguf file): pass a saved model folder")


def _report(args: argparse.Namespace) -> int:
    from .runner.report import write_report

    print(f"wrote {write_report(args.dir)}")
    return 0


def fraction_below_one(text: str) -> float:
    """An argparse type: a number in [0, 1) (a mistake rate of 1 would mean the noisy expert never
    finishes; a held-out share of 1 would leave nothing to train on)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1), not {text!r}") from None
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1), not {text}")
    return value


def _at_least(low: int | float, kind: type = int) -> Callable[[str], Any]:
    """An argparse type: a number (whole with `kind` int) of at least `low`."""

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {'a whole number' if kind is int else 'a number'}, not {text!r}") from None
        if value < low or value != value:  # NaN is no number of seconds
            raise argparse.ArgumentTypeError(f"expected at least {low}, not {text}")
        return value

    return parse


_positive = _at_least(1)


def quiet_third_parties() -> None:
    """No third-party progress bars, FutureWarnings or warning source lines (unless --verbose)."""
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # TRL's notice on every GRPO run with an environment
    os.environ.setdefault("TQDM_DISABLE", "1")  # the GGUF loader's bars: tqdm reads it when first imported
    if "transformers" in sys.modules:  # already imported: its environment variables were read
        from transformers.utils import logging as hf_logging  # noqa: PLC0415

        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
    if "datasets" in sys.modules:
        import datasets  # noqa: PLC0415

        datasets.disable_progress_bars()
    logging.getLogger("psycopg.pool").setLevel(logging.ERROR)  # each failed connection attempt, before our one line
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    warnings.formatwarning = lambda message, category, *_a, **_k: f"warning: {message}\n"  # type: ignore[assignment]


class DefaultsHelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """``--help`` with each option's default, only where there is one to show.

    No ``(default: None)``, no ``(default: False)`` for a switch, and nothing added to a help text
    that already names its default (``(default: $OPENAI_API_KEY)``, TRL's "Defaults to …").
    """

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (default is None or default is False or default == [] or default is argparse.SUPPRESS
                or "default" in text.lower() or action.option_strings == []):
            return action.help
        return super()._get_help_string(action)


class OneLineParser(argparse.ArgumentParser):
    """An argparse parser whose errors are one line that points to ``--help`` (not the whole usage)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see: {self.prog} --help)\n")


def one_line_errors(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Make `parser` (any argparse parser, e.g. TRL's) report a bad flag in one line."""
    parser.error = OneLineParser.error.__get__(parser)  # type: ignore[method-assign]
    return parser


def build_parser() -> argparse.ArgumentParser:
    """The parser with the built-in commands and every installed plug-in command."""
    parser = OneLineParser(prog="evoharness", description="Belief/Progress/Experience harness for agents.")
    parser.add_argument("--version", action="version", version=f"evoharness {__version__}")
    parser.add_argument("--verbose", action="store_true", help="show third-party warnings and progress bars")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    demo = commands.add_parser("demo", help="play a short scripted episode and print its dashboards",
                               formatter_class=DefaultsHelpFormatter)
    demo.add_argument("--out", default="evoharness-demo", help="folder for the trace and the experience store")
    demo.set_defaults(handler=_demo)
    run = commands.add_parser(
        "run", help="run episodes on built-in environments and write traces, metrics and a report",
        formatter_class=DefaultsHelpFormatter,
        epilog="The openai policy reads OPENAI_API_KEY when --api-key is not given, and OPENAI_TIMEOUT, OPENAI_MAX_TOKENS, "
        "EVOHARNESS_TOOL_CHOICE and EVOHARNESS_NULL_CONTENT (see the README). A run folder holds "
        "traces.jsonl, metrics.json, report.md with its plots, and experience.db (the run's own Experience store).",
        description="With no options: a short offline comparison of the three harnesses with the embedded "
        "model (or the expert policies when it is not installed).",
    )
    run.add_argument("--env", nargs="+", help="crm-migration, compliance-review, alfworld, textworld, an environment "
                     "an installed package registers, or package.module:Class")
    run.add_argument("--policy", nargs="+", choices=["expert", "noisy", "local", "trained", "base", "openai"],
                     help="who acts (trained: the embedded model with a LoRA adapter, --adapter; base: the same model and "
                          "prompt format without the adapter)")
    run.add_argument("--adapter", help="LoRA adapter folder of the trained policy, with its evoharness.json card "
                     "(default: the adapter the training package ships)")
    run.add_argument("--model", help="local model folder (local) or model name (openai)")
    run.add_argument("--base-url", default="http://127.0.0.1:8000/v1", help="OpenAI-compatible endpoint (openai)")
    run.add_argument("--api-key", help="API key of the endpoint (openai; default: $OPENAI_API_KEY)")
    run.add_argument("--game", nargs="+", help="TextWorld game files to play (with --env textworld)")
    run.add_argument("--store", help="Experience store: an SQLite file or a PostgreSQL DSN (default: OUT/experience.db)")
    folder = run.add_mutually_exclusive_group()
    folder.add_argument("--resume", action="store_true", help="continue the run in --out: keep and skip its finished episodes")
    folder.add_argument("--overwrite", action="store_true", help="replace the run in --out")
    run.add_argument("--harness", nargs="+", choices=["none", "append", "panels", "bpe"], help="harness variants to compare "
                     "(panels: the dashboard kept up to date for the model, no meta-actions)")
    run.add_argument("--ablate", nargs="+", metavar="PART", help="beside each full panels/bpe harness, a variant with PART "
                     "switched off (belief, progress, experience; belief+progress for two): the ablation table")
    run.add_argument("--free-meta-actions", action="store_true", help="meta-action-only model calls spend no step "
                     "(default: every model call spends one, as in the reference)")
    run.add_argument("--max-meta-actions", type=int, help="meta-action calls per episode; later ones are refused")
    run.add_argument("--action-syntax", choices=["tools", "text"], default="tools",
                     help="how the local and openai policies act: tool calls, or <action>verb [argument]</action> text "
                     "(for models and servers without tool calling; the expert policies always call tools)")
    run.add_argument("--framework", nargs="+", help="core or an installed integration (langgraph, llamaindex)")
    run.add_argument("--episodes", type=_positive, default=1, help="episodes per combination")
    run.add_argument("--seed", type=int, default=0, help="first seed")
    run.add_argument("--difficulty", type=int, choices=[1, 2, 3],
                     help="longer horizons as it grows (default: 1; 2 for the main job, run with no options)")
    run.add_argument("--max-steps", type=_positive, help="model calls per episode (default: the environment's budget)")
    run.add_argument("--epsilon", type=fraction_below_one, default=0.1, help="mistake rate of the noisy expert, in [0, 1)")
    run.add_argument("--window", type=_at_least(2), default=12, help="recent messages kept by append and bpe")
    run.add_argument("--observations-in-belief", action=argparse.BooleanOptionalAction, default=True,
                     help="bpe and panels: also copy each environment result into Belief while it is whole in the "
                     "recent window (--no-observations-in-belief: the window only; errors still open an exception)")
    run.add_argument("--bank", choices=["live", "episode", "frozen", "evolving"], default="live",
                     help="the Experience store: written as episodes run (live), an empty one per episode (episode), "
                     "only read (frozen), or evolved by "
                     "each combination from a copy in windows of --consolidate-every episodes (evolving)")
    run.add_argument("--consolidate-every", type=_positive, default=5, help="episodes per window of an evolving bank")
    run.add_argument("--consolidator", choices=["rules", "model"], default="rules",
                     help="who turns a window's notes into edits of an evolving bank (model: a teacher at --teacher)")
    run.add_argument("--teacher", help="OpenAI-compatible endpoint of the model consolidator (…/v1)")
    run.add_argument("--teacher-model", default="teacher", help="model name sent to the model consolidator")
    run.add_argument("--max-per-kind", type=_positive, default=80, help="entries an evolving bank holds per kind at most")
    run.add_argument("--delete-veto", type=_positive, default=3, help="an entry recalled this many times cannot be deleted")
    run.add_argument("--retries", type=_at_least(0), default=2,
                     help="retries of an episode whose model server failed (5xx, timeout); then it is reported apart")
    run.add_argument("--out", default="evoharness-run", help="output folder")
    run.set_defaults(handler=_run)
    report = commands.add_parser("report", help="redraw report.md and its plots from a run folder",
                                 formatter_class=DefaultsHelpFormatter)
    report.add_argument("dir", help="a folder written by `evoharness run`")
    report.set_defaults(handler=_report)
    view = commands.add_parser("view", help="write one self-contained HTML page that steps through an episode",
                               formatter_class=DefaultsHelpFormatter)
    view.add_argument("traces", help="a traces.jsonl file")
    view.add_argument("--episode", type=int, default=0, help="which episode (0 is the first, -1 the last)")
    view.add_argument("--out", help="the HTML file to write (default: episode-N.html beside the traces)")
    view.set_defaults(handler=_view)
    consolidate = commands.add_parser(
        "consolidate", help="ask a teacher model to consolidate the notes of finished episodes; write an SFT dataset",
        formatter_class=DefaultsHelpFormatter,
        epilog="Each finished pair is appended to OUT/consolidation.jsonl at once (TRL prompt-completion); a failed "
        "request is retried with backoff, and --resume continues a stopped or killed batch without repeating a pair.",
    )
    consolidate.add_argument("traces", help="a JSONL trace file or a folder of them")
    consolidate.add_argument("--base-url", "--teacher", dest="base_url", default="http://127.0.0.1:8000/v1",
                             help="OpenAI-compatible endpoint of the teacher (…/v1)")
    consolidate.add_argument("--model", default="teacher", help="model name sent to the teacher")
    consolidate.add_argument("--api-key", help="API key of the endpoint (default: $OPENAI_API_KEY)")
    consolidate.add_argument("--timeout", type=_at_least(0.001, float), default=120.0, help="seconds per teacher request")
    consolidate.add_argument("--retries", type=_at_least(0), default=3, help="retries of a failed request (doubling backoff)")
    consolidate.add_argument("--backoff", type=_at_least(0.0, float), default=1.0, help="seconds before the first retry")
    consolidate.add_argument("--out", default="evoharness-consolidation", help="output folder")
    again = consolidate.add_mutually_exclusive_group()
    again.add_argument("--resume", action="store_true", help="continue the dataset in --out: skip the episodes done")
    again.add_argument("--overwrite", action="store_true", help="replace the dataset in --out")
    consolidate.set_defaults(handler=_consolidate)
    otel = commands.add_parser(
        "export-otel", help="send recorded traces as OpenTelemetry GenAI spans over OTLP/HTTP (also: export otel)",
        epilog="Headers, timeout and compression come from the standard OTEL_EXPORTER_OTLP_* variables (LangSmith: "
        "--endpoint https://api.smith.langchain.com/otel and OTEL_EXPORTER_OTLP_HEADERS='x-api-key=…'). Prompts and "
        "replies are sent only with --content or OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true.",
    )
    otel.add_argument("traces", help="a JSONL trace file")
    otel.add_argument("--endpoint", help="OTLP/HTTP URL, a base (…/v1/traces is added) or the full traces URL "
                      "(default: $OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or $OTEL_EXPORTER_OTLP_ENDPOINT)")
    otel.add_argument("--content", action="store_true", help="send prompts, replies and meta-action arguments (credentials masked)")
    otel.set_defaults(handler=_export_otel)
    for ep in entry_points(group="evoharness.commands"):
        ep.load()(commands)
    return parser


def _flag_of(path: str, argv: list[str]) -> tuple[str, str] | None:
    """The flag (and its value) whose path is `path`, lies under it, or holds it: who to blame for an OSError."""
    def related(value: str) -> bool:
        a, b = Path(value), Path(path)
        return a == b or b in a.parents or a in b.parents

    for i, arg in enumerate(argv):
        if not arg.startswith("--"):
            continue
        name, eq, value = arg.partition("=")
        if not eq:
            if i + 1 >= len(argv) or argv[i + 1].startswith("-"):
                continue
            value = argv[i + 1]
        if value and value not in (".", "/") and related(value):
            return name, value
    return None


def _first_line(exc: ValueError) -> str:
    errors = getattr(exc, "errors", None)  # pydantic's ValidationError: the first field and what is wrong with it
    if callable(errors):
        try:
            first = errors()[0]
            return f"{'.'.join(str(p) for p in first.get('loc', ()))}: {first.get('msg', exc)}"
        except (TypeError, IndexError, AttributeError):
            pass
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status."""
    parser = build_parser()
    args = parser.parse_args(_otel_command(list(sys.argv[1:] if argv is None else argv)))
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 2
    if not args.verbose:
        quiet_third_parties()
    try:
        return int(handler(args) or 0)
    except EvoHarnessError as exc:
        print(f"evoharness: error: {exc}", file=sys.stderr)
        return 1
    except ValueError as exc:  # a value no flag check caught: one line, the traceback with --verbose
        if args.verbose:
            raise
        print(f"evoharness: error: {_first_line(exc)} (run again with --verbose for the traceback)", file=sys.stderr)
        return 1
    except OSError as exc:  # an unusable path or a refused connection: one line, not a traceback
        filename = getattr(exc, "filename", None)
        flag = _flag_of(str(filename), list(sys.argv[1:] if argv is None else argv)) if filename else None
        if flag is not None:
            name, value = flag
            print(f"evoharness: error: {name} {value} cannot be used ({exc.strerror or exc}: {filename}): "
                  f"choose another {name}", file=sys.stderr)
        else:
            where = f" ({filename})" if filename else ""
            print(f"evoharness: error: {exc.strerror or exc}{where}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("evoharness: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
