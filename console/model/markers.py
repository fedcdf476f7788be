"""The loss plot's markers as data: one table of kinds, and the markers a run shows.

:data:`MARKER_KINDS` holds everything about a kind of marker (its glyph and style, which
one wins a column that several fall in, whether the legend names it only when the plot
shows one) in the legend's order; the plot, its legend, ``--once``'s legend line and the
tests read it. :func:`derive_markers` makes a run's markers with its other findings: the
reader derives them again only when the checkpoints or the history changed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable

from rundir.layout import EVENT_PIVOT, EVENT_RESUME, EVENT_ROLLBACK

if TYPE_CHECKING:
    from rundir import CheckpointInfo, HistoryEvent
    from rundir.external import ExternalCheckpoint

    from .spikes import Spike


@dataclass(frozen=True)
class MarkerKind:
    """What a kind of marker looks like and how it ranks."""

    name: str
    glyph: str
    style: str
    priority: int           # several in one column: the highest is drawn
    rare: bool              # named by the legend only when the plot shows one
    words: str = ""         # how the legend and the readout name it (default: its name)

    @property
    def legend(self) -> str:
        return self.words or self.name


MARKER_KINDS: dict[str, MarkerKind] = {kind.name: kind for kind in (
    MarkerKind("checkpoint", "▴", "cyan", 0, rare=False),
    MarkerKind("resume", "R", "yellow", 1, rare=False),
    MarkerKind("pivot", "P", "magenta", 3, rare=False),
    MarkerKind("spike", "!", "bold red", 5, rare=True),
    MarkerKind("grad_spike", "∇", "bold yellow", 4, rare=True, words="grad-norm spike"),   # often before a loss spike
    MarkerKind("nonfinite", "×", "bold red", 6, rare=True),
    MarkerKind("rewind", "<", "bold red", 2, rare=True),        # steps went back with no resume event
    MarkerKind("rollback", "B", "bold orange1", 4, rare=True),
)}

# What the events that earn a marker are called there.
_EVENT_MARKERS = {EVENT_RESUME: "resume", EVENT_PIVOT: "pivot", EVENT_ROLLBACK: "rollback"}


@dataclass(frozen=True)
class Marker:
    """A marker at a step: ``kind`` is a key of :data:`MARKER_KINDS`."""

    step: int
    kind: str

    @property
    def spec(self) -> MarkerKind:
        return MARKER_KINDS[self.kind]


def derive_markers(checkpoints: Iterable[CheckpointInfo], events: Iterable[HistoryEvent], rewinds: Iterable[int] = (),
                   spikes: Iterable[Spike] = (), nonfinite_steps: Iterable[int] = (),
                   grad_spikes: Iterable[Spike] = (),
                   external: Iterable[ExternalCheckpoint] = ()) -> tuple[Marker, ...]:
    """What earns a marker on the loss plot: the checkpoints on disk and those its trainer
    reported in its own format (``external``: a run of the run API's), resumes, pivots and
    rollbacks, the ``rewinds`` (steps that went back with no resume event: another engine's
    restart), each spike's peak (loss and grad-norm) and each non-finite step."""
    marks = [Marker(c.step, "checkpoint") for c in checkpoints if c.status != "invalid"]
    marks += [Marker(c.step, "checkpoint") for c in external]
    marks += [Marker(step, "rewind") for step in rewinds]
    for ev in events:
        kind = _EVENT_MARKERS.get(ev.event)
        if kind is not None:
            step = ev.step if ev.step is not None else ev.data.get("from_step")
            if isinstance(step, int):
                marks.append(Marker(step, kind))
    marks += [Marker(s.peak_step, "spike") for s in spikes]
    marks += [Marker(s.peak_step, "grad_spike") for s in grad_spikes]
    marks += [Marker(int(n), "nonfinite") for n in nonfinite_steps]
    return tuple(marks)
