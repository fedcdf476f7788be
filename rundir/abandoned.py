"""The steps the run has left behind: still in ``.loss.json`` (it is never rewritten) until
the current segment's lines for the same steps replace them. A guided rollback abandons
the steps after its checkpoint; a resume from an older checkpoint (after a crash, a rewind
by another engine) leaves the earlier segment's steps after the head until they are run
again. None of them is where the run is: the status, ETA and rates speak of the head (the
step of the newest step line), the plot dims them, and a rollback does not go back for a
spike among them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Sequence

import numpy as np

from .layout import EVENT_PIVOT, EVENT_RESUME, EVENT_ROLLBACK
from .step_rows import search_steps

if TYPE_CHECKING:       # the history's tail asks run_head where the run is: no import back at run time
    from .history.records import HistoryEvent


def head_rows(steps: np.ndarray, head_step: int | None) -> int:
    """How many rows (steps ascending) are at or before the head step: the rest lie ahead of
    where the run is, left by an earlier segment."""
    if head_step is None:
        return len(steps)
    return int(search_steps(steps, head_step, side="right"))


def abandoned_mask(steps: np.ndarray, times: np.ndarray | None, events: Iterable[HistoryEvent],
                   head_step: int | None) -> np.ndarray | None:
    """The steps left behind that no newer line has replaced yet: every step after the head
    (``head_step``, the step of the newest step line), and after a ``rollback`` event from
    step F to step X, the lines of steps X+1..F written before it. (The resumed trainer's
    lines for the same steps replace them as it goes.) None when there are none."""
    mask = None
    ahead = head_rows(steps, head_step)
    if ahead < len(steps):
        mask = np.zeros(len(steps), dtype=bool)
        mask[ahead:] = True
    if times is None or len(times) != len(steps):
        return mask
    for ev in events:
        if ev.event != EVENT_ROLLBACK or ev.time is None:
            continue
        to_step, from_step = ev.data.get("to_step"), ev.data.get("from_step")
        if not isinstance(to_step, int) or not isinstance(from_step, int):
            continue
        lo, hi = search_steps(steps, [to_step + 1, from_step + 1])
        older = np.zeros(len(steps), dtype=bool)
        older[lo:hi] = times[lo:hi] < ev.time
        mask = older if mask is None else mask | older
    return mask if mask is not None and mask.any() else None


def rolled_back_past(events: Iterable[HistoryEvent], step: int, time: float | None) -> HistoryEvent | None:
    """The ``rollback`` event that abandoned what happened at ``step`` (at ``time``): one
    written after it that went back from ``step`` or later to a step before it (the same rule
    as :func:`abandoned_mask`'s); None when none did, or ``time`` is not known."""
    if time is None:
        return None
    for ev in events:
        to_step, from_step = ev.data.get("to_step"), ev.data.get("from_step")
        if ev.event == EVENT_ROLLBACK and ev.time is not None and ev.time > time and isinstance(to_step, int) \
                and isinstance(from_step, int) and to_step < step <= from_step:
            return ev
    return None


def live_pivot_steps(events: Iterable[HistoryEvent]) -> list[int]:
    """The steps of the pivots the run still stands on: each ``pivot`` event no later rollback
    went back past."""
    events = list(events)
    return [ev.step for ev in events if ev.event == EVENT_PIVOT and isinstance(ev.step, int)
            and rolled_back_past(events, ev.step, ev.time) is None]


def abandoned_pivot_archives(events: Iterable[HistoryEvent]) -> set[str]:
    """The archives of the pivots a rollback went back past (each ``pivot`` event names its
    archive): the run no longer stands on them. By archive, not by step: a pivot done again at
    the same step after the rollback is another pivot, and the one the run stands on."""
    events = list(events)
    return {ev.data["archive"] for ev in events if ev.event == EVENT_PIVOT and isinstance(ev.step, int)
            and isinstance(ev.data.get("archive"), str) and rolled_back_past(events, ev.step, ev.time) is not None}


def run_head(head_step: int | None, events: Sequence[HistoryEvent], rows_read: int) -> int | None:
    """Where the run is: the step of the newest step line (``head_step``), unless a ``rollback``
    or ``resume`` came after every step line: then the step it went back to (its ``to_step``,
    or the resume's ``from_step``), until the resumed trainer logs its first step."""
    for ev in reversed(events):
        if ev.row < rows_read:
            break                               # a step line came after it: the head is that line's
        if ev.event in (EVENT_ROLLBACK, EVENT_RESUME):
            back = ev.data.get("to_step" if ev.event == EVENT_ROLLBACK else "from_step")
            if isinstance(back, int) and not isinstance(back, bool) and head_step is not None and back < head_step:
                return back
            return head_step
    return head_step
