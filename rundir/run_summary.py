"""A cheap summary of each run of a runs directory, for the console's overview.

:func:`summarize_run` reads only what is small:
the tail of the history (:func:`~rundir.history.read_history_tail`, never the whole
file), ``run.toml``, ``.trainer.json`` (verified), ``.state.json`` for zombie arms, the
newest checkpoints' headers and the directory's size. It never raises: what it cannot
read is one of the run's problems.

A summary holds what is wrong as facts (the trainer's verification and stall, the tail's
events and unreadable lines, invalid checkpoints, zombie arms, journals, ranks, a lock file
no start gets past), never as lines: the console makes its findings from them with the
same functions that make the dashboard's (console/model/findings.py), so the overview,
``--check`` and the problems pane say the same thing. The questions both ask are answered
here once: :func:`trainer_stall`, :func:`read_config`, :func:`failed_checkpoint_event`,
:func:`safety_stop_event`.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np

from .checkpoint import CheckpointInfo, inspect_listed
from .config import ConfigError, RunConfig, load_run_config
from .external import ExternalCheckpoint, external_checkpoints, reported_files
from .filesystems import fresh_stamp
from .history import HistoryEvent, read_history_tail
from .history.records import nonfinite_mask
from .layout import (EVENT_CHECKPOINT, EVENT_CHECKPOINT_FAILED, EVENT_RESUME, EVENT_START, EVENT_STOP, LOSS_JSON,
                     PIVOT_JOURNAL, ROLLBACK_JOURNAL, RUN_TOML, STATE_JSON, STOP_NONFINITE, TRAINER_JSON,
                     is_checkpoint_bin, is_error_stop, is_temporary)
from .pivot_files import read_journal, unfinished_text
from .process import Verification, verify_trainer
from .ranks import RankStatus, judge_ranks, read_ranks
from .rollback_files import pending_rollback
from .run_lock import blocking_lock_file
from .runs import RunsListing, list_runs
from .sidecars import read_state
from .storage import directory_size
from .zombies import find_zombies

# A verified trainer whose history has not grown for this long is stalled: the larger of
# STALL_MIN_S and STALL_STEPS median step times (the dashboard's reader uses the same).
STALL_MIN_S = 60.0
STALL_STEPS = 10
# The overview's loss is a debiased EMA with this weight of the past, over the tail.
EMA_BETA = 0.98
# Steps per second over at most this many of the newest steps.
RATE_STEPS = 200
# Only the newest checkpoints are inspected (header and sidecar): a run with 20,000 of
# them costs what one with 20 does.
CHECKPOINTS_INSPECTED = 20
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


def _ema(loss: np.ndarray, beta: float = EMA_BETA) -> float | None:
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


def trainer_stall(run: Path, now: float, threshold: float, started: float | None,
                  checkpoint_landed: float = 0.0) -> Stall:
    """Whether the verified trainer of ``run`` is stalled, and since when: its last sign of
    progress is the newest of its start, its history's last change, its newest checkpoint's
    landing (``checkpoint_landed``, an mtime: a long write must not read as a stall the moment
    its temporary is renamed into place; a clock ahead of ours counts as now) and, once those
    are past the threshold, a temporary still being written (a long checkpoint write is
    progress too). The dashboard's reader and the overview both ask this."""
    latest = max(started or 0.0, min(checkpoint_landed, now), _mtime(run / LOSS_JSON))
    if now - latest > threshold:
        try:
            for entry in os.scandir(run):
                if is_temporary(entry.name):
                    latest = max(latest, entry.stat(follow_symlinks=False).st_mtime)
        except OSError:
            pass
    return Stall(latest, now - latest, threshold)


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _checkpoints(run: Path, reported: frozenset[str]) -> tuple[list[CheckpointInfo], int]:
    """The newest :data:`CHECKPOINTS_INSPECTED` checkpoints inspected (oldest first), and how many there are;
    a file the trainer reported as its own checkpoint (``reported``) is not one of them."""
    try:
        names = [e.name for e in os.scandir(run) if is_checkpoint_bin(e.name) and e.name not in reported]
    except OSError:
        return [], 0
    names.sort()
    infos = [info for name in names[-CHECKPOINTS_INSPECTED:] if (info := inspect_listed(run / name)) is not None]
    return sorted(infos, key=lambda i: (i.step, i.path.name)), len(names)


def read_config(run: Path) -> tuple[RunConfig | None, str | None]:
    """run.toml parsed, or the line that says why not (:data:`NO_RUN_TOML` where there is none)."""
    if not os.path.lexists(run / RUN_TOML):
        return None, NO_RUN_TOML
    try:
        return load_run_config(run), None
    except ConfigError as err:
        return None, str(err)
    except Exception as err:      # a config the library could not even classify (never expected)
        return None, f"{RUN_TOML}: {type(err).__name__}: {err}"


class SummaryMemo:
    """The parts of a run's summary that stay while their files do, for a view that summarizes
    the same runs again and again: run.toml's parse (keyed by its stamp) and the newest
    checkpoints' inspection (keyed by the directory's stamp: a checkpoint lands by a rename).
    Stamps come from a fresh open (:func:`~rundir.filesystems.fresh_stamp`)."""

    def __init__(self) -> None:
        self._kept: dict[tuple[str, Path], tuple[object, object]] = {}

    def get(self, what: str, path: Path, make: Callable[[], object], given: object = None) -> object:
        """``make()``'s value, kept while ``path``'s stamp and ``given`` (what it was made from) stay."""
        stamp = fresh_stamp(path)
        kept = self._kept.get((what, path))
        if stamp is not None and kept is not None and kept[0] == (stamp, given):
            return kept[1]
        value = make()
        self._kept[(what, path)] = ((stamp, given), value)
        return value

    def keep_only(self, runs: set[Path]) -> None:
        """Forget the runs no longer listed."""
        self._kept = {key: kept for key, kept in self._kept.items() if key[1] in runs or key[1].parent in runs}


def summarize_run(run: str | os.PathLike[str], now: float | None = None,
                  verify: Callable[[Path], Verification] = verify_trainer,
                  stall_after: float | None = None, memo: SummaryMemo | None = None) -> RunSummary:
    """The overview's row for ``run`` (see the module's docstring for what is read); never raises."""
    run = Path(run)
    memo = memo or SummaryMemo()
    now = time.time() if now is None else now
    try:
        os.listdir(run)
    except OSError as err:
        why = f"cannot read the run directory ({err.strerror or err})"
        return RunSummary(run, run.name, "unreadable", why, None, None, None, None, None, None, None, None, 0, 0, False,
                          _mtime(run), None, directory_error=why)
    tail = read_history_tail(run / LOSS_JSON)
    config, config_error = memo.get("config", run / RUN_TOML, lambda: read_config(run))
    try:
        v = verify(run)
    except Exception as err:            # a verification bug must not hide the other runs
        v = Verification("unreadable", f"verification failed: {err}")
    external = external_checkpoints(tail.events)
    reported = reported_files(external)
    checkpoints, n_checkpoints = memo.get("checkpoints", run, lambda: _checkpoints(run, reported), reported)
    newest = next((c for c in reversed(checkpoints) if c.status != "invalid"), None)
    # What the run last did, as the run itself dates it (its newest step, its newest
    # checkpoint); a run that has neither is dated by its files.
    dated = [float(t) for t in tail.time[-1:] if math.isfinite(t)] + [c.mtime for c in checkpoints[-1:] if c.mtime]
    last_activity = max(dated) if dated else max(tail.mtime or 0.0, _mtime(run / TRAINER_JSON), _mtime(run))
    stall = None
    if v.ok:
        started = (v.record.started or v.record.create_time) if v.record else 0.0
        stall = trainer_stall(run, now, stall_threshold(tail.time[-2 * RATE_STEPS:], stall_after), started,
                              max((c.mtime for c in checkpoints[-1:]), default=0.0))
    ranks = read_ranks(run)
    zombies, state_error = _zombies(run, config)
    journal, journal_error = read_journal(run)
    last_step = int(tail.step[-1]) if len(tail.step) else None
    rate = rate_per_s(tail.step, tail.time) if not stopped(tail.events) else None
    max_steps = config.run.max_steps if config is not None and config.run.max_steps else None
    eta = eta_seconds(max_steps, last_step, rate) if v.ok else None
    tokens = int(tail.tokens[-1]) if len(tail.tokens) and tail.tokens[-1] >= 0 else None
    used, approximate = directory_size(run)
    finished = finished_cleanly(tail.events) and not v.ok
    return RunSummary(
        run, run.name, v.state, v.reason, v.record.pid if v.record else None, last_step, _ema(tail.loss), rate, tokens,
        max_steps, eta, newest, n_checkpoints, used, approximate, last_activity, tail.format, finished,
        next(reversed(external), None), stall=stall, config_error=config_error,
        events=tuple(tail.events), history_error=tail.error, bad_lines=tail.bad_lines, torn_tail=tail.torn_tail,
        nonfinite=int(np.count_nonzero(nonfinite_mask(tail.loss))),
        failed_checkpoint=failed_checkpoint_event(tail.events, newest.step if newest else None),
        safety_stop=safety_stop_event(tail.events),
        invalid=tuple(c for c in reversed(checkpoints) if c.status == "invalid"), zombies=zombies,
        state_error=state_error, pending_pivot=journal_error or (unfinished_text(journal) if journal else None),
        pending_rollback=pending_rollback(run), lock_problem=blocking_lock_file(run),
        ranks=judge_ranks(ranks.records, now), launch=ranks.launch)


def _zombies(run: Path, config: RunConfig | None) -> tuple[dict[str, str], str | None]:
    """The zombie arms of ``.state.json`` (arm -> why), and why it or the check cannot be read."""
    state = read_state(run)
    if state.value is None:
        return {}, None if state.missing else state.error
    try:
        return find_zombies(state.value, config, run), None
    except Exception as err:          # a library bug: never let it hide the other runs
        return {}, f"zombie check failed: {err}"


def summarize_runs(root: str | os.PathLike[str], now: float | None = None,
                   verify: Callable[[Path], Verification] = verify_trainer,
                   stall_after: float | None = None) -> tuple[list[RunSummary], RunsListing]:
    """Every run under ``root`` summarized, the most recently active first."""
    listing = list_runs(root)
    summaries = [summarize_run(run, now, verify, stall_after) for run in listing.runs]
    summaries.sort(key=lambda s: (-s.last_activity, s.name))
    return summaries, listing


# A summary kept from an earlier scan is made again at least this often, changed or not
# (an arm's data can go away outside the run directory).
KEPT_AT_MOST_S = 30.0


def _stamp(run: Path) -> tuple:
    """What changes when a run does: its directory's listing and its small files' stamps, each
    from a fresh open (a network filesystem's cached attributes would hide a change)."""
    return tuple(fresh_stamp(path) for path in (run, run / LOSS_JSON, run / RUN_TOML, run / TRAINER_JSON,
                                                 run / STATE_JSON, run / PIVOT_JOURNAL, run / ROLLBACK_JOURNAL))


class RunsSummarizer:
    """:func:`summarize_runs` with a memory, for a view that scans again and again: a run
    whose trainer is not running and whose files did not change since the last scan keeps
    its summary (for at most :data:`KEPT_AT_MOST_S`), so a directory of many finished
    runs costs a few stats per run and scan. Not thread-safe: one scanning thread."""

    def __init__(self, root: str | os.PathLike[str], verify: Callable[[Path], Verification] = verify_trainer,
                 stall_after: float | None = None):
        self.root = Path(root)
        self.verify = verify
        self.stall_after = stall_after
        self._kept: dict[Path, tuple[tuple, float, RunSummary]] = {}
        self._memo = SummaryMemo()

    def scan(self, now: float | None = None) -> tuple[list[RunSummary], RunsListing]:
        """Every run under the root summarized (again where needed), the most recently active first."""
        now = time.time() if now is None else now
        listing = list_runs(self.root)
        kept: dict[Path, tuple[tuple, float, RunSummary]] = {}
        summaries = []
        for run in listing.runs:
            stamp = _stamp(run)
            old = self._kept.get(run)
            if old is not None and old[0] == stamp and old[2].trainer_state != "running" \
                    and time.monotonic() - old[1] < KEPT_AT_MOST_S:
                kept[run] = old
            else:
                kept[run] = (stamp, time.monotonic(),
                             summarize_run(run, now, self.verify, self.stall_after, self._memo))
            summaries.append(kept[run][2])
        self._kept = kept
        self._memo.keep_only(set(kept))
        summaries.sort(key=lambda s: (-s.last_activity, s.name))
        return summaries, listing
