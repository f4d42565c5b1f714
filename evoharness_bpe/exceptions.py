"""The library's exceptions, split by cause.

- `UserError`: the library was called wrongly; the message says what to change.
- `MetaActionError`: a model sent a meta-action the workspace cannot apply; the message is
  written for the model (which field, what was expected) and nothing was changed.
- `StoreError`: an experience store failed to read or write.
- `ModelCallError`: a model call failed or returned nothing (no text, no tool call), so the
  run cannot go on; raised instead of finishing with an empty answer.
"""

from __future__ import annotations

__all__ = ["EvoHarnessError", "UserError", "MetaActionError", "StoreError", "ModelCallError"]


class EvoHarnessError(Exception):
    """Base class of every error this library raises on purpose."""


class UserError(EvoHarnessError, ValueError):
    """Misuse of the library by the calling code: a wrong argument or configuration."""


class MetaActionError(EvoHarnessError, ValueError):
    """A meta-action call from a model that cannot be applied.

    `field` names the offending argument when there is one. The message is returned to the
    model as the tool result, so it says what was expected.
    """

    def __init__(self, message: str, *, action: str | None = None, field: str | None = None):
        super().__init__(message)
        self.action = action
        self.field = field


class StoreError(EvoHarnessError, RuntimeError):
    """An experience store could not complete an operation."""


class ModelCallError(EvoHarnessError, RuntimeError):
    """A model call failed or came back empty (an empty stream, no text and no tool call)."""
