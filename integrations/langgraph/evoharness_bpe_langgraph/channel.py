"""The ``bpe`` state channel: the serialised `BPEState`, and the reducer that keeps it whole.

Each write is either a plain `BPEState` dict (it replaces the value) or a *delta* made by
`delta_update`: the new state, the step it was computed from, and the operations applied. When
several tool calls of one model turn change the state in the same graph step, each was computed
from the same old state; the reducer then replays the later ones' operations on the merged
value through the core `Workspace`, so parallel meta-actions and observations all land.
"""

from __future__ import annotations

from typing import Any

from typing_extensions import Annotated, NotRequired, TypedDict

from evoharness_bpe import Workspace, WorkspaceOptions
from evoharness_bpe.stores.memory import MemoryExperienceStore

__all__ = ["BPE_KEY", "RUN_KEY", "DASHBOARD_KEY", "bpe_reducer", "delta_update", "BPEChannels", "BPEGraphState"]

BPE_KEY = "bpe"
RUN_KEY = "bpe_run"
DASHBOARD_KEY = "bpe_dashboard"
_DELTA = "__bpe_delta__"

Op = dict[str, Any]
"""One replayable change: ``{"op": "act", "name", "args", "limits"}``, ``{"op": "observe", "tool",
"result", "error", "limits": [max_beliefs, max_exceptions, max_subgoals]}``, ``{"op": "recalled" | "noted", "ids": [...]}``."""


def delta_update(base_step: int, state: dict[str, Any], ops: list[Op]) -> dict[str, Any]:
    """A write for the ``bpe`` channel: `state` computed at `base_step` by applying `ops`."""
    return {_DELTA: True, "base": base_step, "state": state, "ops": ops}


def bpe_reducer(current: dict[str, Any] | None, update: dict[str, Any] | None) -> dict[str, Any]:
    """Fold a write into the ``bpe`` channel (see the module docstring)."""
    if not update:
        return current or {}
    if not update.get(_DELTA):
        return update
    if not current or current.get("step") == update["base"]:
        return update["state"]
    return _replay(current, update["ops"])


def _replay(current: dict[str, Any], ops: list[Op]) -> dict[str, Any]:
    # Only pure state changes are replayed; store effects (recall, note) happened once already
    # and only their ids are carried over.
    # the caps the acting workspace had; the replay keeps them too
    limits = next((op["limits"] for op in ops if op.get("limits")), None)
    options = None
    if limits:  # [max_beliefs, max_exceptions] and, since subgoals are capped, max_subgoals
        caps = {"max_beliefs": limits[0], "max_exceptions": limits[1]} | ({"max_subgoals": limits[2]} if len(limits) > 2 else {})
        options = WorkspaceOptions(**caps)
    ws = Workspace.from_state(current, store=MemoryExperienceStore(), options=options)
    experience = ws.state.experience
    for op in ops:
        kind = op["op"]
        if kind == "act":
            ws.act(op["name"], op["args"])
        elif kind == "observe":
            ws.observe(op["tool"], result=op.get("result"), error=op.get("error"))
        elif kind in ("recalled", "noted"):
            ids = getattr(experience, kind)
            ids.extend(i for i in op["ids"] if i not in ids)
    return ws.state.model_dump(mode="json")


class BPEChannels(TypedDict):
    """The channels `BPEMiddleware` adds to an agent's state."""

    bpe: NotRequired[Annotated[dict[str, Any], bpe_reducer]]
    """The serialised `BPEState` of the thread; persisted by any checkpointer."""
    bpe_run: NotRequired[str]
    """Id of the current run's episode log (dashboards, meta-action costs, ledger)."""


class BPEGraphState(BPEChannels):
    """Mix into a hand-built graph's state: ``class State(MessagesState, BPEGraphState): ...``."""

    bpe_dashboard: NotRequired[str]
    """The dashboard `BPENode` rendered for the next model call."""
