"""What the console knows of a run, as facts, before any finding is made of them: the
overview's row (:class:`RunSummary`), and the questions the overview and the dashboard both
ask answered once: the rate and ETA, the stall rule, whether the trainer stopped, finished
cleanly, failed a checkpoint or was stopped by a safety policy. Pure: the reading is
:mod:`console.read.run_summary`'s."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from rundir.checkpoint import CheckpointInfo
from rundir.external import ExternalCheckpoint
from rundir.history import HistoryEvent
from rundir.layout import (
    EVENT_CHECKPOINT,
    EVENT_CHECKPOINT_FAILED,
    EVENT_RESUME,
    EVENT_START,
    EVENT_STOP,
    RUN_TOML,
    STOP_NONFINITE,
    is_error_stop,
)
from rundir.ranks import RankStatus

# A verified trainer whose history has not grown for this long is stalled: the larger of
# STALL_MIN_S and STALL_STEPS median step times (the dashboard's reader uses the same).
STALL_MIN_S = 60.0
STALL_STEPS = 10
# The overview's loss is a debiased EMA with this weight of the past, over the tail.
EMA_BETA = 0.98
# Steps per second over at most this many of the newest steps.
RATE_STEPS = 200
# What a run without run.toml says (the dashboard's problems and the overview's).
NO_RUN_TOML = f"no {RUN_TOML} (a run from another engine, or not started yet)"


@dataclass(frozen=True)
class RunSummary:
    """One row of the overview: what a run is doing, read cheaply, and what is wrong with it as
    facts (the console's findings are made from them). Strings are as read (a viewer makes
    them printable)."""

    path: Path
    name: str
    trainer_state: str                  # running | stopped | stale | unverified | unreadable
    trainer_reason: str
    pid: int | None
    last_step: int | None
    ema_loss: float | None
    steps_per_s: float | None
    tokens: int | None
    max_steps: int | None
    eta_s: float | None
    newest_checkpoint: CheckpointInfo | None
    checkpoints: int
    disk_used: int
    disk_approximate: bool
    last_activity: float                # newest mtime among the history, checkpoints, record and directory
    history_format: str | None
    finished: bool = False              # the history's last event is a clean stop (finished_cleanly)
    # The newest checkpoint in the trainer's own format (a run API loop's) that the history's
    # tail reports; the overview shows it where the run has none of ours.
    newest_external: ExternalCheckpoint | None = None
    # -- what is wrong, as facts -------------------------------------------------------
    directory_error: str | None = None  # the run directory cannot be read (nothing else is)
    stall: Stall | None = None          # a verified trainer's (None for any other)
    config_error: str | None = None     # run.toml missing or unusable (read_config)
    events: tuple[HistoryEvent, ...] = ()   # the tail's events, oldest first
    history_error: str | None = None    # the history cannot be read at all
    bad_lines: int = 0                  # unreadable lines among the newest
    torn_tail: int = 0                  # bytes of a torn last line
    nonfinite: int = 0                  # non-finite losses among the newest steps
    failed_checkpoint: HistoryEvent | None = None   # failed_checkpoint_event of the tail
    safety_stop: HistoryEvent | None = None         # safety_stop_event of the tail
    invalid: tuple[CheckpointInfo, ...] = ()        # invalid among the newest inspected, newest first
    zombies: Mapping[str, str] = field(default_factory=dict)   # arm -> why
    state_error: str | None = None      # .state.json there but unreadable
    pending_pivot: str | None = None    # an unfinished pivot's journal, in words
    pending_rollback: str | None = None  # an unfinished rollback's journal, in words
    lock_problem: str | None = None     # a lock file no start gets past (rundir.run_lock)
    ranks: tuple[RankStatus, ...] = ()  # every rank of the job, worst first (rundir.ranks)
    launch: str | None = None           # the job's launch (rank findings are keyed by it)

    @property
    def key(self) -> str:
        return str(self.path)

    @property
    def stalled(self) -> bool:
        return self.stall is not None and self.stall.stalled

    @property
    def problem_ranks(self) -> int:
        """Ranks of the job with a problem (rundir.ranks: dead, stopped, ...)."""
        return sum(1 for s in self.ranks if s.problem)


def debiased_ema(loss: np.ndarray, beta: float = EMA_BETA) -> float | None:
    """The debiased EMA at the last value (non-finite values skipped): a weighted mean."""
    ok = np.isfinite(loss)
    if not ok.any():
        return None
    weights = beta ** np.arange(len(loss) - 1, -1, -1, dtype=np.float64) * ok
    return float(np.sum(np.where(ok, loss, 0.0) * weights) / np.sum(weights))


def rate_per_s(x: np.ndarray, t: np.ndarray, since: float = -math.inf) -> float | None:
    """Units (steps, tokens) per second over the newest ``RATE_STEPS`` rows timed at or
    after ``since`` (None when time is unknown or the count went back). The dashboard and the
    overview both say it."""
    ok = np.isfinite(t) & (x >= 0) & (t >= since)
    x, t = x[ok][-RATE_STEPS:], t[ok][-RATE_STEPS:]
    if len(t) < 2 or t[-1] <= t[0]:
        return None
    # In Python floats: times of ±1e308 (a hostile file) overflow to inf, refused below, without a warning.
    rate = (float(x[-1]) - float(x[0])) / (float(t[-1]) - float(t[0]))
    return rate if math.isfinite(rate) and rate >= 0 else None      # a count that went back is no speed


def stopped(events: Sequence[HistoryEvent]) -> bool:
    """Whether the newest trainer process logged its ``stop`` (of any reason): after it the
    run makes no progress, so it has no speed and no ETA until a ``start`` or ``resume``."""
    for ev in reversed(events):
        if ev.event == EVENT_STOP:
            return True
        if ev.event in (EVENT_START, EVENT_RESUME):
            return False
    return False


def finished_cleanly(events: Sequence[HistoryEvent]) -> bool:
    """Whether the history's last event is a ``stop`` that says the trainer ended as it meant
    to (not an error, nor a safety policy's stop): the overview's "finished"."""
    if not events or events[-1].event != EVENT_STOP:
        return False
    reason = events[-1].data.get("reason")
    return not is_error_stop(reason) and reason != STOP_NONFINITE


def failed_checkpoint_event(events: Sequence[HistoryEvent], newest_step: int | None) -> HistoryEvent | None:
    """The newest ``checkpoint_failed`` event not yet followed by a checkpoint on disk (the
    newest's step is ``newest_step``), and not before the trainer's last start."""
    for ev in reversed(events):
        if ev.event == EVENT_CHECKPOINT_FAILED:
            step = ev.step if ev.step is not None else -1
            return ev if newest_step is None or newest_step < step else None
        if ev.event in (EVENT_CHECKPOINT, EVENT_START, EVENT_RESUME):
            return None
    return None


def safety_stop_event(events: Sequence[HistoryEvent]) -> HistoryEvent | None:
    """The trainer's last ``stop`` event, when a safety policy (divergence) made it."""
    for ev in reversed(events):
        if ev.event == EVENT_STOP:
            return ev if ev.data.get("reason") == STOP_NONFINITE else None
        if ev.event in (EVENT_START, EVENT_RESUME):
            return None
    return None


def eta_seconds(max_steps: int | None, last_step: int | None, steps_per_s: float | None) -> float | None:
    """Seconds to ``max_steps`` at ``steps_per_s``, or None (no target, no speed, or done)."""
    if not max_steps or last_step is None or last_step >= max_steps or not steps_per_s or steps_per_s <= 0:
        return None
    eta = (max_steps - last_step) / steps_per_s
    return eta if math.isfinite(eta) else None


def stall_threshold(step_times: np.ndarray, stall_after: float | None = None) -> float:
    """``stall_after``, else the larger of :data:`STALL_MIN_S` and :data:`STALL_STEPS` median
    step times of ``step_times``."""
    if stall_after is not None:
        return stall_after
    dt = np.diff(step_times[np.isfinite(step_times)])
    dt = dt[dt > 0]
    return max(STALL_MIN_S, STALL_STEPS * float(np.median(dt))) if len(dt) else STALL_MIN_S


@dataclass(frozen=True)
class Stall:
    """How long a verified trainer has shown no progress (``idle`` seconds, since ``since``),
    against the ``threshold`` past which it is stalled."""

    since: float
    idle: float
    threshold: float

    @property
    def stalled(self) -> bool:
        return self.idle > self.threshold
