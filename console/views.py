"""The console's model of a run directory at one moment: immutable views, one per pane.

:class:`RunSnapshot` holds them all; each pane is handed only its own part (the arms
pane its :class:`ArmsView`, the plot its :class:`HistoryView` and markers...). The
snapshot also says what is wrong with the run (:meth:`RunSnapshot.problems`), shared
by the dashboard, ``--once`` and ``--json``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np

from rundir import CheckpointInfo, HistoryEvent, RunConfig, Sample
from rundir.resume_check import ResumeCheck
from rundir.spikes import Spike
from rundir.storage import Storage
from rundir.layout import EVENT_CHECKPOINT, EVENT_CHECKPOINT_FAILED, EVENT_RESUME, EVENT_START, EVENT_STOP, LOSS_JSON

from .format import LINE_LIMIT, format_size, printable, stall_text

# How a verification state reads on the dashboard.
TRAINER_LABELS = {"running": "running", "stopped": "stopped", "stale": "stale pid record",
                  "unverified": "not supervised", "unreadable": "not supervised"}

# Problems and notices about files or arms take one line each up to this many; more make
# one line that names the first few and counts the rest (a hostile run directory can hold
# 100,000 of them, and neither a list nor an event log is read that far).
LISTED = 3


def many(n: int, noun: str) -> str:
    """``1 zombie arm``, ``100,000 zombie arms``."""
    return f"{n:,} {noun}" + ("" if n == 1 else "s")


def names_and_more(names: list[str], total: int) -> str:
    """``a, b, c and 99,997 more`` (the names made printable)."""
    shown = ", ".join(printable(n) for n in names)
    return shown + (f" and {total - len(names):,} more" if total > len(names) else "")


@dataclass(frozen=True)
class Notice:
    """One line for the event log: what the console saw or did."""

    time: float
    text: str
    level: str = "info"                 # info | good | warn | error

    def __post_init__(self) -> None:
        # Notices quote the run directory (names, reasons, errors a trainer wrote): whoever
        # builds one, the event log gets one printable line.
        object.__setattr__(self, "text", printable(self.text, LINE_LIMIT))


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

    @property
    def signallable(self) -> bool:
        return self.state == "running"

    @property
    def stalled(self) -> bool:
        """Alive and verified, but no new step for longer than the stall threshold."""
        return self.state == "running" and self.stalled_for is not None


@dataclass(frozen=True)
class HistoryView:
    """The history reader's state at one read (columns copied, so safe to hand to the UI)."""

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
    spikes: tuple[Spike, ...] = ()      # loss spikes (rundir.spikes), oldest first
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


@dataclass(frozen=True)
class RunSnapshot:
    """Everything the dashboard shows, read at one moment."""

    run_dir: Path
    name: str
    taken: float
    dir_state: str                      # ok | empty | missing | not a directory
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

    # The snapshot is immutable: what is derived from its (possibly 100,000) checkpoints or
    # arms is computed once, not at every repaint of a pane that asks.
    @cached_property
    def newest_checkpoint(self) -> CheckpointInfo | None:
        return next((c for c in reversed(self.checkpoints) if c.status != "invalid"), None)

    @cached_property
    def invalid_checkpoints(self) -> tuple[CheckpointInfo, ...]:
        """The invalid ones, newest first."""
        return tuple(c for c in reversed(self.checkpoints) if c.status == "invalid")

    @property
    def failed_checkpoint(self) -> HistoryEvent | None:
        """The newest ``checkpoint_failed`` event not yet followed by a checkpoint on disk."""
        for ev in reversed(self.history.events):
            if ev.event == EVENT_CHECKPOINT_FAILED:
                newest = self.newest_checkpoint
                step = ev.step if ev.step is not None else -1
                return ev if newest is None or newest.step < step else None
            if ev.event in (EVENT_CHECKPOINT, EVENT_START, EVENT_RESUME):
                return None
        return None

    @property
    def safety_stop(self) -> HistoryEvent | None:
        """The trainer's last ``stop`` event, when a safety policy (divergence) made it."""
        for ev in reversed(self.history.events):
            if ev.event == EVENT_STOP:
                return ev if ev.data.get("reason") == "nonfinite" else None
            if ev.event in (EVENT_START, EVENT_RESUME):
                return None
        return None

    @cached_property
    def zombies(self) -> dict[str, str]:
        return {a.name: a.reason for a in self.arms.rows if a.status == "zombie"}

    def problems(self) -> list[str]:
        """Everything wrong, one printable line each (they quote the run directory), most
        important first."""
        return [printable(p, LINE_LIMIT) for p in self._problems()]

    def _problems(self) -> list[str]:
        out = []
        if self.storage is not None and self.storage.too_full:
            s = self.storage
            out.append(f"disk nearly FULL: {format_size(s.free)} free on the run directory's filesystem, room for "
                       f"{s.checkpoints_that_fit} checkpoint(s) of {format_size(s.checkpoint_size)}")
        if self.dir_state == "missing":
            out.append(f"run directory {self.run_dir} does not exist")
        elif self.dir_state == "not a directory":
            out.append(f"{self.run_dir} is not a directory")
        elif self.dir_state == "empty":
            out.append("the run directory is empty: nothing has been written yet")
        elif self.dir_state.startswith("unreadable"):
            out.append(f"cannot read the run directory{self.dir_state[len('unreadable'):]}")
            if self.trainer.pid is not None:        # the trainer that ran it, out of sight
                out.append(f"trainer {self.trainer.label}: {self.trainer.reason}")
            return out                  # every file in it is unreadable for that one reason
        if self.trainer.state in ("stale", "unverified", "unreadable"):
            out.append(f"trainer {self.trainer.label}: {self.trainer.reason}")
        if self.trainer.stalled:
            out.append(f"trainer STALLED: {stall_text(self.trainer)}")
        failed = self.failed_checkpoint
        if failed is not None:
            out.append(f"checkpoint FAILED at step {failed.step}: {printable(failed.data.get('error', 'write error'))}")
        stop = self.safety_stop
        if stop is not None:
            out.append(f"trainer stopped: the run diverged at step {stop.step} "
                       f"({stop.data.get('in_a_row', '?')} non-finite steps in a row)")
        if self.pending_pivot:
            out.append(self.pending_pivot)
        if self.pending_rollback:
            out.append(self.pending_rollback)
        if self.config_error and self.dir_state == "ok":
            out.append(self.config_error)
        invalid = self.invalid_checkpoints
        if len(invalid) <= LISTED:
            out.extend(f"{printable(c.path.name)}: invalid: {c.reason}" for c in invalid)
        else:
            out.append(f"{many(len(invalid), 'invalid checkpoint file')} (newest first): "
                       + names_and_more([c.path.name for c in invalid[:LISTED]], len(invalid))
                       + f"; {printable(invalid[0].path.name)}: {invalid[0].reason}")
        zombies = self.zombies
        if len(zombies) <= LISTED:
            out.extend(f"zombie arm {printable(name)}: {reason}" for name, reason in zombies.items())
        else:
            first = next(iter(zombies.items()))
            out.append(f"{many(len(zombies), 'zombie arm')}: {names_and_more(list(islice(zombies, LISTED)), len(zombies))}"
                       f"; {printable(first[0])}: {first[1]}")
        h = self.history
        if h.error:
            out.append(h.error)
        if h.bad_lines:
            out.append(f"{LOSS_JSON}: {h.bad_lines} unreadable line(s) skipped"
                       + (f" (first: {h.problems[0]})" if h.problems else ""))
        if h.torn_tail:
            out.append(f"{LOSS_JSON}: torn last line ({h.torn_tail} bytes) skipped")
        if h.nonfinite:
            out.append(f"{LOSS_JSON}: {h.nonfinite} non-finite loss value(s)"
                       + (f", the last at step {h.last_nonfinite_step:,}" if h.last_nonfinite_step is not None else ""))
        if h.silent_rewind_count:
            out.append(f"{LOSS_JSON}: the steps went back to step {h.silent_rewinds[-1]:,} with no resume event "
                       "(a restart by another engine?)" if h.silent_rewind_count == 1 else
                       f"{LOSS_JSON}: the steps went back {h.silent_rewind_count:,} times with no resume event, "
                       f"the last to step {h.silent_rewinds[-1]:,} (restarts by another engine?)")
        if self.arms.error and self.dir_state == "ok":
            out.append(self.arms.error)
        if self.samples_error and self.dir_state == "ok":
            out.append(self.samples_error)
        return out
