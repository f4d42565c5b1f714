"""SIGINT/SIGTERM inside a run: `RunInterrupted` reaches the runner from wherever it is raised."""

from __future__ import annotations

import os
import signal

import pytest

from evoharness_bpe import MemoryExperienceStore, Workspace
from evoharness_bpe.lab.runner.interrupts import Interrupts, RunInterrupted


class _SignalledStore(MemoryExperienceStore):
    """A store that receives `signum` while it searches (as Ctrl-C lands during a recall)."""

    def __init__(self, signum: int) -> None:
        super().__init__()
        self.signum = signum

    def search(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        os.kill(os.getpid(), self.signum)
        return super().search(*args, **kwargs)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_during_a_meta_action_is_not_turned_into_an_error_for_the_model(signum: int) -> None:
    ws = Workspace("Migrate records", store=_SignalledStore(signum))
    before = ws.state.model_dump_json()
    with Interrupts(), pytest.raises(RunInterrupted) as caught:
        ws.act("recall", {"query": "rate limit"})
    assert caught.value.exit_code == 128 + signum
    assert ws.state.model_dump_json() == before
