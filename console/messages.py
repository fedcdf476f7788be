"""Messages between the watcher/reader threads and the UI (dataclasses, toolong style).

Threads only ever *post* these; widgets are touched on the UI thread alone. A flood of
updates is merged by ``can_replace``: a newer message supersedes a pending older one
when it says at least as much.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from textual.message import Message

from .views import Notice, RunSnapshot

if TYPE_CHECKING:
    from .pivot_runner import PivotOutcome
    from .rollback_runner import RollbackOutcome, RollbackRequest


@dataclass
class FilesChanged(Message):
    """The watcher saw these kinds of run-directory files change."""

    kinds: frozenset[str]

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, FilesChanged) and message.kinds <= self.kinds


@dataclass
class SnapshotReady(Message):
    """A read finished: the new snapshot and the notices of what changed."""

    snapshot: RunSnapshot
    notices: list[Notice] = field(default_factory=list)

    def can_replace(self, message: Message) -> bool:
        # Only an older snapshot that carries no news may be dropped unseen.
        return isinstance(message, SnapshotReady) and not message.notices


@dataclass
class ConsoleNotice(Message):
    """Something the console did (a signal, a confirmation) or learned from a signal worker."""

    notice: Notice


@dataclass
class PivotProgress(Message):
    """A status line of the pivot runner: ``step`` is "plan", "1".."6", or "done" with the outcome."""

    step: str
    text: str
    outcome: "PivotOutcome | None" = None


@dataclass
class RollbackProgress(Message):
    """A status line of the rollback screen: ``step`` is "plan" (with the ``request`` it
    answers), "refused", "1".."3", or "done" with the outcome."""

    step: str
    text: str
    outcome: "RollbackOutcome | None" = None
    request: "RollbackRequest | None" = None
