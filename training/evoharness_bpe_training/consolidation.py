"""Consolidation pairs as a train/eval `DatasetDict`: the batch consolidator, then a split.

The pairs come from `evoharness_bpe.consolidator.consolidate_traces` (``evoharness consolidate``):
each trace's notes, the teacher's validated decisions, in TRL's prompt–completion format, so the
policy learns the teacher's consolidation with `run_sft`.
"""

from __future__ import annotations

import os
import random
from typing import Any

from evoharness_bpe.consolidator import consolidate_traces
from evoharness_bpe.exceptions import UserError

__all__ = ["consolidation_dataset"]


def consolidation_dataset(traces: Any, teacher: Any, *, out_dir: str | os.PathLike[str], eval_fraction: float = 0.1,
                          seed: int = 0, resume: bool = False, **batch_options: Any):
    """Consolidate `traces` with `teacher` into ``out_dir/consolidation.jsonl``; return it split.

    `batch_options` go to `consolidate_traces` (retries, backoff, timeout, overwrite).
    """
    from datasets import Dataset, DatasetDict, load_dataset

    result = consolidate_traces(traces, teacher, out_dir, resume=resume, **batch_options)
    if not result.total:
        raise UserError("no trace wrote any note; there is no Experience to consolidate")
    full: Dataset = load_dataset("json", data_files=str(result.dataset), split="train")
    order = list(range(len(full)))
    random.Random(seed).shuffle(order)
    n_eval = min(len(full) - 1, round(eval_fraction * len(full))) if len(full) > 1 else 0
    return DatasetDict({"train": full.select(sorted(order[n_eval:])), "eval": full.select(sorted(order[:n_eval]))})
