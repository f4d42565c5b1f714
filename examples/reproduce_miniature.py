"""Miniature reproduction: a policy raw, after harness fine-tuning, after cost-aware GRPO.

    python examples/reproduce_miniature.py --out runs/miniature              # the CPU preset, about an hour
    python examples/reproduce_miniature.py --preset tiny --out runs/smoke    # a smoke run, a few minutes
    python examples/reproduce_miniature.py --preset smollm2-gpu --out runs/gpu

The same as `evoharness reproduce`: a student trained from scratch (or SmolLM2-135M with the GPU
preset) is evaluated on held-out seeds of crm-migration at difficulties 1 and 2 under the bpe
harness, then fine-tuned on the scripted expert's episodes, then trained with step-level
cost-aware GRPO. `report.md`, `results.json` and the plots land in `--out`. Figures:
docs/benchmarks.md, "Miniature reproduction".
"""

from __future__ import annotations

import argparse

from evoharness_bpe_training.reproduce import PRESETS, load_reproduce_preset, reproduce


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="cpu", choices=PRESETS, help="settings to start from")
    parser.add_argument("--out", default="runs/miniature", help="output folder")
    parser.add_argument("--stages", default=None, help="comma-separated stages to evaluate (raw,sft,grpo)")
    args = parser.parse_args()
    summary = reproduce(load_reproduce_preset(args.preset, out=args.out, stages=args.stages))
    for target in summary["targets"]:
        print(f"{'met' if target['met'] else 'missed'}: {target['target']} — {target['measured']}")


if __name__ == "__main__":
    main()
