"""The console's model of a run directory at one moment: immutable views, one per pane.

:class:`RunSnapshot` holds them all; each pane is handed only its own part (the arms
pane its :class:`ArmsView`, the plot its :class:`HistoryView` and markers...). The
snapshot also says what is wrong with the run (:meth:`RunSnapshot.problems`), shared
by the dashboard, ``--once`` and ``--json``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Mapping, NamedTuple

import numpy as np

from rundir import CheckpointInfo, HistoryEvent, LossHistory, RunConfig, Sample
from rundir.external import STATUS as EXTERNAL
from rundir.external import ExternalCheckpoint
from rundir.layout import EVENT_RESUME, EVENT_START, EVENT_STOP, is_error_stop
from rundir.ranks import RankStatus, summary_line
from rundir.resume_check import ResumeCheck
from rundir.storage import Storage

from .findings import Finding, derive_alerts, derive_problems
from .format import LINE_LIMIT, TRAINER_LABELS, printable  # noqa: F401 (TRAINER_LABELS re-exported)
from .history_series import SeriesData, series_data
from .history_series import column as series_column
from .history_series import names as series_names
from .levels import Level
from .markers import Marker
from .mirror_note import MIRROR_NOT_SAVED, MIRROR_NOTES, MIRROR_REBUILT, MirrorNote  # noqa: F401 (re-exported)
from .run_facts import failed_checkpoint_event, safety_stop_event
from .series_blocks import SeriesBlocks
from .spikes import Spike

# How a verification state reads on the dashboard.

@dataclass(frozen=True)
class Notice:
    """One line for the event log: what the console saw or did."""

    time: float
    text: str
    level: Level = Level.INFO

    def __post_init__(self) -> None:
        # Notices quote the run directory (names, reasons, errors a trainer wrote): whoever
        # builds one, the event log gets one printable line. A level outside the one
        # vocabulary is refused where it is made, not shown unstyled.
        object.__setattr__(self, "text", printable(self.text, LINE_LIMIT))
        object.__setattr__(self, "level", Level(self.level))


@dataclass(frozen=True)
class TrainerView:
    """Who trains this directory, as verified against the process table."""

    state: str                          # running | stopped | stale | unverified | unreadable
    label: str                          # running | stopped | not supervised | stale pid record
    reason: str
    pid: int | None = None
    started: float | None = None
    cpu_percent: float | None = None
    rss: int | None = None
    gpu_memory: int | None = None       # bytes, where nvidia-smi reports the pid
    argv: tuple[str, ...] = ()
    # The SLURM job the record names (job_id, step_id, cluster, node, job_name, user), with
    # the scheduler's state, run_time and time_limit once it verified the job.
    slurm: dict[str, str] | None = None
    stalled_for: float | None = None    # seconds without a new history line, when past the threshold
    stall_threshold: float | None = None
    # Set when the verified process is stopped by a signal (SIGSTOP, Ctrl-Z: state T), or by
    # a debugger (t): why it makes no progress, and how it goes on.
    suspended: str | None = None

    @property
    def signallable(self) -> bool:
        return self.state == "running"

    @property
    def stalled(self) -> bool:
        """Alive and verified, but no new step for longer than the stall threshold."""
        return self.state == "running" and self.stalled_for is not None


@dataclass(frozen=True)
class HistoryView:
    """The history reader's state at one read (its columns read-only and never changed after,
    so safe to hand to the UI)."""

    version: int                        # bumped at every change: the plot re-renders on it
    format: str | None
    n_steps: int
    last_step: int | None               # where the run is: the head (the newest step line's step)
    last_loss: float | None             # the newest finite loss at or before the head
    tokens: int | None
    steps_per_s: float | None
    tokens_per_s: float | None
    nonfinite: int
    bad_lines: int
    torn_tail: int
    problems: tuple[str, ...]
    error: str | None
    events: tuple[HistoryEvent, ...]
    step: np.ndarray = field(repr=False, compare=False)
    loss: np.ndarray = field(repr=False, compare=False)
    rewinds: int = 0                    # how many reads found the history rewound or reset
    last_nonfinite_step: int | None = None
    spikes: tuple[Spike, ...] = ()      # loss spikes (console.model.spikes), oldest first
    nonfinite_steps: tuple[int, ...] = ()
    resume_checks: tuple[ResumeCheck, ...] = ()
    eta_s: float | None = None          # seconds to run.max_steps at the current segment's speed
    tokens_column: np.ndarray | None = field(default=None, repr=False, compare=False)   # for the x axis
    time_column: np.ndarray | None = field(default=None, repr=False, compare=False)
    # Where the steps went back with no resume event (another engine's restart): the newest
    # few steps it went back to, and how many times in all.
    silent_rewinds: tuple[int, ...] = ()
    silent_rewind_count: int = 0
    # Steps after the head, left by an earlier segment (a rollback, a resume from an older
    # checkpoint) and not run again yet: shown dimmed, never as where the run is.
    steps_ahead: int = 0
    # The newest thing worth saying about the history's mirror (the first read's, or a save
    # that failed since); None: nothing to say.
    mirror: MirrorNote | None = None
    # The arms drawn, for the series of each arm's share and p (console.model.series).
    grad_spikes: tuple[Spike, ...] = ()  # grad-norm spikes (console.model.spikes on grad_norm), oldest first
    arm_column: np.ndarray | None = field(default=None, repr=False, compare=False)    # codes into arm_names
    arm_names: tuple[str, ...] = ()
    # Every other series: lr, grad_norm, the step lines' other numeric keys, the eval series.
    series: SeriesData = field(default_factory=SeriesData, repr=False, compare=False)
    # The series table's figures of every block of step lines, kept by the reader across views
    # (:mod:`.series_blocks`), and which of its generations this view's rows are.
    summaries: "SeriesBlocks | None" = field(default=None, repr=False, compare=False)
    summary_generation: int = 0

    def series_names(self) -> list[str]:
        """Every series' name: ``loss``, ``lr``, ``grad_norm``, ``tokens``, ``time``, each
        other numeric key of the step lines (as first found), ``eval_loss`` and
        ``eval_loss/<arm>`` (:mod:`console.model.history_series`)."""
        return series_names(self.series)

    def column(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """``(steps, values)`` of a series, int64 and float64: for a column of the step lines,
        the view's ``step`` and the values aligned with it (NaN where a line lacked the key, or
        held no finite number there); for an eval series, the steps it has a value at. Sorted
        by step, the newest line (or event) for a step winning. KeyError for no such series."""
        steps, values, _ = series_column(self.series, name, self.step, self.loss, self.tokens_column,
                                         self.time_column)
        return steps, values

    @cached_property
    def abandoned_rows(self) -> np.ndarray | None:
        """Which step lines (rows of ``step``) a rollback abandoned or lie after the head
        (:func:`rundir.abandoned.abandoned_mask`); None: none. Once per view: every plot asks."""
        from rundir.abandoned import abandoned_mask

        return abandoned_mask(self.step, self.time_column, self.events, self.last_step)

    def abandoned(self, name: str) -> np.ndarray | None:
        """Which points of ``column(name)`` a rollback abandoned or lie after the head (by
        their lines' or events' times: :func:`rundir.abandoned.abandoned_mask`); None: none."""
        from rundir.abandoned import abandoned_mask

        steps, _, times = series_column(self.series, name, self.step, self.loss, self.tokens_column,
                                        self.time_column)
        return abandoned_mask(steps, times, self.events, self.last_step)


@dataclass(frozen=True)
class ArmRow:
    name: str
    pulls: int | None
    share: float | None
    prob: float | None
    ema_reward: float | None
    cap: float | None
    floor: float | None
    source: str
    status: str                         # ok | zombie | configured (not in .state.json)
    reason: str = ""


@dataclass(frozen=True)
class ArmsView:
    rows: tuple[ArmRow, ...]
    policy_from: str                    # .state.json | run.toml | none
    phase: dict[str, Any]
    state_step: int | None
    error: str | None
    none_why: str = ""                  # with no rows: why the run has no arms, as the pane and --once say it


@dataclass(frozen=True)
class PivotEntry:
    """One polish pivot, from its archive's ``pivot.json``."""

    step: int | None                    # P, the checkpoint it resumed from
    archive: str                        # relative to the run directory
    stage: str
    policy: str                         # the new caps and floors, one line

    @property
    def finished(self) -> bool:
        return self.stage == "resumed"


@dataclass(frozen=True)
class RanksView:
    """Every rank of the job (a job of several processes), worst first (:mod:`rundir.ranks`)."""

    statuses: tuple[RankStatus, ...] = ()
    launch: str | None = None
    earlier: int = 0                    # records of an earlier launch, not read as this one's
    errors: tuple[str, ...] = ()        # unreadable records

    @cached_property
    def summary(self) -> str:
        """``2 ranks on 1 node · slowest rank 1, +38% step time``; "" with no ranks."""
        return summary_line(self.statuses)

    @property
    def problems(self) -> tuple[RankStatus, ...]:
        return tuple(s for s in self.statuses if s.problem)


# The most specific reason first: what makes a file survive any policy, then the policy's rules.
RULE_ORDER = ("pivot", "rollback", "resumed", "foreign", "invalid", "every", "last", "newest", "all")


@dataclass(frozen=True)
class RetentionView:
    """run.toml's retention policy applied to the checkpoints on disk (as the trainer would)."""

    policy: str                                  # "keep the last 5 and every multiple of 1,000 steps"
    keep: dict[str, tuple[str, ...]]             # file name -> why it is kept (empty: the next prune removes it)

    @property
    def next_prune(self) -> tuple[str, ...]:
        return tuple(name for name, why in self.keep.items() if not why)

    def rule(self, name: str) -> str:
        """The one rule that best says why a file is kept (``pivot`` over ``last``...), or
        ``prune`` when the next prune removes it: a column of the checkpoints pane."""
        if name not in self.keep:
            return ""
        reasons = self.keep[name]
        if not reasons:
            return "prune"
        return min(reasons, key=lambda r: RULE_ORDER.index(r) if r in RULE_ORDER else len(RULE_ORDER))

    def why(self, name: str) -> str:
        """``kept: last, every`` or ``removed by the next prune`` ("" for a file it does not know)."""
        if name not in self.keep:
            return ""
        return "kept: " + ", ".join(self.keep[name]) if self.keep[name] else "removed by the next prune"


class SavedCheckpoint(NamedTuple):
    """A run's newest checkpoint as the views name it (:func:`newest_saved`)."""

    name: str
    step: int
    time: float | None          # when it was saved (None: an external one that does not say)
    status: str                 # ours' status, or "external"

    @property
    def external(self) -> bool:
        return self.status == EXTERNAL


def newest_saved(ours: CheckpointInfo | None, external: ExternalCheckpoint | None) -> SavedCheckpoint | None:
    """Ours (the newest usable), else (a run API loop's run) the newest in its trainer's own format."""
    if ours is not None:
        return SavedCheckpoint(ours.path.name, ours.step, ours.mtime, ours.status)
    if external is not None:
        return SavedCheckpoint(external.name, external.step, external.time or None, external.status)
    return None


@dataclass(frozen=True)
class RunSnapshot:
    """Everything the dashboard shows, read at one moment."""

    run_dir: Path
    name: str
    taken: float
    dir_state: str                      # ok | empty | missing | not a directory | unreadable
    config: RunConfig | None
    config_error: str | None
    trainer: TrainerView
    history: HistoryView
    checkpoints: tuple[CheckpointInfo, ...]
    arms: ArmsView
    samples: tuple[Sample, ...]         # newest per arm
    samples_error: str | None
    log_tail: tuple[str, ...]
    other_files: tuple[str, ...]
    log_seen: int = 0                   # trainer.log lines read so far (new ones = the difference)
    pivots: tuple[PivotEntry, ...] = ()  # finished or archived polish pivots, oldest first
    pending_pivot: str | None = None    # an interrupted pivot's journal, described
    pending_rollback: str | None = None  # an interrupted rollback's journal, described
    retention: RetentionView | None = None   # why each checkpoint is kept, and what the next prune removes
    storage: Storage | None = None      # the run directory's size and its filesystem's room
    markers: tuple[Marker, ...] = ()    # the loss plot's (:mod:`.markers`)
    dir_reason: str = ""                # why an unreadable directory is (the OS's words)
    # Checkpoints in the trainer's own format, from the history's external_checkpoint events
    # (rundir.external): listed and said, never resumed or rolled back to.
    external_checkpoints: tuple[ExternalCheckpoint, ...] = ()
    ranks: RanksView = field(default_factory=RanksView)     # every rank of a job of several processes
    # A lock file no trainer's start can get past, in one line (rundir.run_lock.blocking_lock_file).
    lock_problem: str | None = None
    # Each part's version: bumped when the reader derives it anew, so that a view drawn from
    # some parts (the plot: history and markers) is redrawn exactly when one of them changed.
    versions: Mapping[str, int] = field(default_factory=dict)

    @property
    def dir_unusable(self) -> bool:
        """Nothing in the run directory can be read: it is not there, not one, or unreadable."""
        return self.dir_state in ("missing", "not a directory", "unreadable")

    @property
    def dir_text(self) -> str:
        """The directory's state as said: with the reason it is unreadable."""
        return f"{self.dir_state} ({self.dir_reason})" if self.dir_reason else self.dir_state

    # The snapshot is immutable: what is derived from its (possibly 100,000) checkpoints or
    # arms is computed once, not at every repaint of a pane that asks.
    @cached_property
    def newest_checkpoint(self) -> CheckpointInfo | None:
        return next((c for c in reversed(self.checkpoints) if c.status != "invalid"), None)

    @cached_property
    def newest_saved(self) -> SavedCheckpoint | None:
        return newest_saved(self.newest_checkpoint,
                            self.external_checkpoints[-1] if self.external_checkpoints else None)

    @cached_property
    def invalid_checkpoints(self) -> tuple[CheckpointInfo, ...]:
        """The invalid ones, newest first."""
        return tuple(c for c in reversed(self.checkpoints) if c.status == "invalid")

    @cached_property      # the events walked once per snapshot
    def failed_checkpoint(self) -> HistoryEvent | None:
        """The newest ``checkpoint_failed`` event not yet followed by a checkpoint on disk."""
        newest = self.newest_checkpoint
        return failed_checkpoint_event(self.history.events, newest.step if newest is not None else None)

    @cached_property      # asked by the problems, the alerts and the status
    def safety_stop(self) -> HistoryEvent | None:
        """The trainer's last ``stop`` event, when a safety policy (divergence) made it."""
        return safety_stop_event(self.history.events)

    @cached_property
    def error_stop(self) -> HistoryEvent | None:
        """The trainer's last ``stop`` event when its reason says the trainer failed (``error:
        ...``: a framework's error), else None."""
        for ev in reversed(self.history.events):
            if ev.event == EVENT_STOP:
                return ev if is_error_stop(ev.data.get("reason")) else None
            if ev.event in (EVENT_START, EVENT_RESUME):
                return None
        return None

    @cached_property
    def zombies(self) -> dict[str, str]:
        return {a.name: a.reason for a in self.arms.rows if a.status == "zombie"}

    @cached_property
    def problems(self) -> tuple[Finding, ...]:
        """Everything wrong with the run, most important first (:mod:`.findings`)."""
        return derive_problems(self)

    @cached_property
    def alerts(self) -> tuple[Finding, ...]:
        """What is raised once to someone not looking (:mod:`.findings`)."""
        return derive_alerts(self)


def plain_view(history: LossHistory) -> HistoryView:
    """A :class:`HistoryView` of a history read on its own (the comparison's runs): its
    columns and events, none of the findings a run's reader adds."""
    loss = history.loss.copy()
    finite = loss[np.isfinite(loss)]
    return HistoryView(
        version=0, format=history.format, n_steps=len(history),
        last_step=int(history.step[-1]) if len(history) else None,
        last_loss=float(finite[-1]) if len(finite) else None, tokens=None, steps_per_s=None, tokens_per_s=None,
        nonfinite=history.nonfinite, bad_lines=history.bad_lines, torn_tail=history.torn_tail,
        problems=tuple(history.problems), error=history.error, events=tuple(history.events),
        step=history.step.copy(), loss=loss, tokens_column=history.tokens.copy(), time_column=history.time.copy(),
        series=series_data(history), arm_column=history.arm.copy(), arm_names=tuple(history.arm_names))
