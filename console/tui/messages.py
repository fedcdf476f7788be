"""Messages between the watcher/reader threads and the UI (dataclasses, toolong style).

Threads only ever *post* these; widgets are touched on the UI thread alone. A flood of
updates is merged by ``can_replace``: a newer message supersedes a pending older one
when it says at least as much.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from textual.message import Message

from ..model.snapshot import Notice, RunSnapshot

if TYPE_CHECKING:
    from rich.console import RenderableType

    from rundir.runs import RunsListing

    from ..actions.pivot_runner import PivotOutcome
    from ..actions.rollback_runner import RollbackOutcome, RollbackRequest
    from ..model.inspect_report import InspectReport
    from ..model.run_facts import RunSummary


@dataclass
class FilesChanged(Message):
    """A signal worker saw these kinds of run-directory files change (a checkpoint landed, the
    trainer exited): read them again. (The watcher hands its changes to the paced reads itself.)"""

    kinds: frozenset[str]

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, FilesChanged) and message.kinds <= self.kinds


@dataclass
class WatchMode(Message):
    """How the watcher follows the run: "events", or "polling · nfs" where the filesystem's
    change events cannot be trusted (rundir.filesystems)."""

    watched_by: str
    polling: bool


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
    under_way: bool = False             # the step waits for something (shown as under way)


@dataclass
class RunsScanned(Message):
    """The overview's worker summarized every run of the runs directory (most active first)."""

    summaries: "list[RunSummary]"
    listing: "RunsListing"

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, RunsScanned)


@dataclass
class CompareReady(Message):
    """The comparison's worker parsed the marked runs' whole histories: one series each."""

    series: list = field(default_factory=list)        # [(name, steps, tokens, loss)]
    problems: list[str] = field(default_factory=list)
    differences: list = field(default_factory=list)   # [DiffRow]: what differs between their run.toml and start


@dataclass
class InspectProgress(Message):
    """The inspector's read number ``read`` has read ``percent`` of the checkpoint."""

    read: int
    percent: int

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, InspectProgress) and message.read == self.read


@dataclass
class InspectFinished(Message):
    """The inspector's read number ``read`` is done: the report, or why there is none (one line).
    A read the screen has moved on from may still finish; its number says so."""

    read: int
    report: "InspectReport | None"
    error: str = ""


@dataclass
class DetailRequested(Message):
    """Enter on a pane's selected row: show its whole text (``title``, then ``body``)."""

    title: str
    body: "RenderableType"


@dataclass
class RollbackProgress(Message):
    """A status line of the rollback screen: ``step`` is "plan" (with the ``request`` it
    answers), "refused", "1".."3", or "done" with the outcome."""

    step: str
    text: str
    outcome: "RollbackOutcome | None" = None
    request: "RollbackRequest | None" = None
    under_way: bool = False             # the step waits for something (shown as under way)
