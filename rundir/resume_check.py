"""Resume verification: did a resume re-run the steps it had logged before, bit for bit?

After a resume from step S, the new process runs steps S+1..R again, which the previous
process had logged already. :class:`~rundir.history.LossHistory` keeps each replaced
line beside the line that replaced it (:class:`~rundir.history.Superseded`);
:func:`check_resumes` compares them, per resume: loss and grad_norm, exact float
equality (a NaN re-run as NaN is identical).

A resume that changes what is computed is labelled so, not reported as a failure of
exactness: another thread count, device or world size than the process before it, a
fresh bandit (a polish pivot), skipped batches (a rollback), or a resume the trainer
itself called inexact (a foreign checkpoint).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable

import numpy as np

from .history import HistoryEvent, Superseded
from .layout import EVENT_RESUME, EVENT_ROLLBACK, EVENT_START
from .text import counted

# The settings a resume is compared on with the process before it: another value
# computes other floats.
COMPUTE_KEYS = ("threads", "device", "world_size")


@dataclass(frozen=True)
class ResumeCheck:
    """One resume's verdict. ``first_difference`` is ``{"step", "loss": [old, new],
    "grad_norm": [old, new]}`` or None; ``changed`` names what the resume changed (then
    a difference is expected, not a failure); ``complete`` once every re-run step was seen."""

    from_step: int
    compared: int
    identical: bool
    first_difference: dict[str, Any] | None
    changed: tuple[str, ...]
    complete: bool
    line: int                       # the resume event's line in the history

    @property
    def verdict(self) -> str:
        """``verified``, ``diverged``, ``changed`` (a resume that computes otherwise) or ``pending``."""
        if self.changed:
            return "changed"
        if not self.identical:
            return "diverged"
        return "verified" if self.complete and self.compared else "pending"

    def text(self) -> str:
        """One line for the events pane."""
        s = f"{self.from_step:,}"
        if self.changed:
            what = "; ".join(self.changed)
            same = "identical" if self.identical else "not identical (expected)"
            return f"resume at {s} changed what is computed ({what}): {self.compared:,} re-run steps {same}"
        if not self.identical:
            d = self.first_difference or {}
            key = "loss" if d.get("loss", [0, 0])[0] != d.get("loss", [0, 0])[1] else "grad_norm"
            a, b = d.get(key, [math.nan, math.nan])
            step = d.get("step")
            at = f"{step:,}" if isinstance(step, int) else str(step)
            return f"resume at {s} DIVERGED at step {at}: {_told_apart(a, b)}"
        if self.complete and self.compared:
            return f"resume at {s} verified: {counted(self.compared, 'step')} identical"
        return f"resume at {s}: {self.compared:,} re-run steps identical so far"

    def to_dict(self) -> dict[str, Any]:
        """``--json``'s ``history.resume_checks`` entry."""
        return {"from_step": self.from_step, "compared": self.compared, "identical": self.identical,
                "first_difference": self.first_difference, "changed": list(self.changed),
                "verdict": self.verdict}


def _told_apart(a: float, b: float) -> str:
    """``2.025 vs 2.5``: the two values in the fewest significant digits (at least four)
    that still tell them apart, so a difference in the 16th digit shows and one in the
    2nd does not drag 17 digits along."""
    for digits in range(4, 18):
        left, right = format(a, f".{digits}g"), format(b, f".{digits}g")
        if left != right:
            return f"{left} vs {right}"
    return f"{a!r} vs {b!r}"


def _same(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    same: np.ndarray = (a == b) | (np.isnan(a) & np.isnan(b))
    return same


def changed_computation(event: HistoryEvent, previous: HistoryEvent | None) -> tuple[str, ...]:
    """What this resume changed in what is computed, compared with the process before it."""
    data, reasons = event.data, []
    if previous is not None:
        for key in COMPUTE_KEYS:
            old, new = previous.data.get(key), data.get(key)
            if old is not None and new is not None and old != new:
                reasons.append(f"{key.replace('_', ' ')} {old} -> {new}")
    if data.get("fresh_bandit"):
        reasons.append("fresh bandit")
    skip = data.get("skip_batches")
    if isinstance(skip, int) and not isinstance(skip, bool) and skip > 0:
        reasons.append(f"{counted(skip, 'batch', 'batches')} skipped")
    if data.get("exact") is False and not reasons:        # the trainer's own word, when nothing above says why
        reasons.append("inexact resume")
    return tuple(reasons)


def _rerun_end(event: HistoryEvent) -> int | None:
    rerun = event.data.get("rerun")
    end = rerun.get("to") if isinstance(rerun, dict) else None
    return end if isinstance(end, int) and not isinstance(end, bool) else None


def _abandoned_before(superseded: Superseded, pairs: np.ndarray, rollbacks: list[HistoryEvent]) -> np.ndarray:
    """Which replaced lines of ``pairs`` a rollback before the resume abandoned: a line for a
    step after the rollback's checkpoint (``to_step``), up to its ``from_step``, written before
    it (the same rule as :func:`rundir.abandoned.abandoned_mask`). The process before the resume
    never ran those steps, so a new line for one is no rerun to compare with it."""
    out = np.zeros(len(pairs), dtype=bool)
    steps, times = superseded.get("step")[pairs], superseded.get("old_time")[pairs]
    for ev in rollbacks:
        to_step, from_step = ev.data.get("to_step"), ev.data.get("from_step")
        if ev.time is None or not isinstance(to_step, int) or not isinstance(from_step, int):
            continue
        out |= (steps > to_step) & (steps <= from_step) & (times < ev.time)
    return out


def _logged_again(superseded: Superseded, pairs: np.ndarray, resumed_at: float) -> np.ndarray:
    """Which replaced lines of ``pairs`` the resumed process wrote itself (a step's values in
    several calls, merged into its newest line): written at or after the resume and not after
    their replacement. A clock that differs between the two processes makes a line of the one
    before look later than the resume, but then later than its replacement too: compared."""
    old = superseded.get("old_time")[pairs]
    again: np.ndarray = (old >= resumed_at) & (old <= superseded.get("new_time")[pairs])
    return again


def check_resumes(events: Iterable[HistoryEvent], superseded: Superseded, last_step: int | None,
                  ) -> list[ResumeCheck]:
    """A verdict for every resume event that re-ran logged steps (or says it will)."""
    events = list(events)
    processes = [(i, ev) for i, ev in enumerate(events) if ev.event in (EVENT_START, EVENT_RESUME)]
    rows, steps = superseded.get("row"), superseded.get("step")
    checks = []
    for n, (i, ev) in enumerate(processes):
        if ev.event != EVENT_RESUME:
            continue
        from_step = ev.data.get("from_step", ev.step)
        if not isinstance(from_step, int) or isinstance(from_step, bool) or ev.row < 0:
            continue
        later = processes[n + 1][1] if n + 1 < len(processes) else None
        lo = int(np.searchsorted(rows, ev.row))
        hi = int(np.searchsorted(rows, later.row)) if later is not None and later.row >= 0 else len(rows)
        mine = np.arange(lo, hi)[steps[lo:hi] > from_step]
        if ev.time is not None:
            mine = mine[~_logged_again(superseded, mine, ev.time)]
        abandoned = _abandoned_before(superseded, mine, [r for r in events[:i] if r.event == EVENT_ROLLBACK])
        end = _rerun_end(ev)
        if abandoned.any():
            mine = mine[~abandoned]
            end = int(steps[mine].max()) if len(mine) else None     # a "rerun" of abandoned steps is none
        if not len(mine) and end is None:
            continue                                # nothing was run again
        same = _same(superseded.get("old_loss")[mine], superseded.get("new_loss")[mine]) \
            & _same(superseded.get("old_grad_norm")[mine], superseded.get("new_grad_norm")[mine])
        first = None
        if not same.all():
            j = mine[int(np.argmin(same))]
            first = {"step": int(steps[j]),
                     "loss": [float(superseded.get("old_loss")[j]), float(superseded.get("new_loss")[j])],
                     "grad_norm": [float(superseded.get("old_grad_norm")[j]),
                                   float(superseded.get("new_grad_norm")[j])]}
        last_rerun = end if end is not None else (int(steps[mine].max()) if len(mine) else from_step)
        complete = later is not None or (last_step is not None and last_step > last_rerun)
        previous = processes[n - 1][1] if n else None
        checks.append(ResumeCheck(from_step, len(mine), bool(same.all()), first,
                                  changed_computation(ev, previous), complete, ev.line))
    return checks
