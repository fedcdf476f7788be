"""A cheap summary of each run of a runs directory, for the console's overview.

:func:`summarize_run` reads only what is small:
the tail of the history (:func:`~rundir.history.read_history_tail`, never the whole
file), ``run.toml``, ``.trainer.json`` (verified), ``.state.json`` for zombie arms, the
newest checkpoints' headers and the directory's size. It never raises: what it cannot
read is one of the run's problems.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from .checkpoint import CheckpointInfo, inspect_listed
from .config import ConfigError, RunConfig, load_run_config
from .external import ExternalCheckpoint, external_checkpoints
from .filesystems import fresh_stamp
from .history import HistoryEvent, HistoryTail, read_history_tail
from .history.records import nonfinite_mask
from .layout import (EVENT_CHECKPOINT, EVENT_CHECKPOINT_FAILED, EVENT_RESUME, EVENT_START, EVENT_STOP, LOSS_JSON,
                     PIVOT_JOURNAL, RUN_TOML, STATE_JSON, TRAINER_JSON, is_checkpoint_bin)
from .pivot_files import read_journal, unfinished_text
from .process import Verification, verify_trainer
from .ranks import judge_ranks, read_ranks
from .runs import RunsListing, list_runs
from .sidecars import read_state
from .storage import directory_size
from .zombies import find_zombies
from .text import counted

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
# Zombie arms named one per problem up to this many (more make one line).
ZOMBIES_LISTED = 3


@dataclass(frozen=True)
class RunSummary:
    """One row of the overview: what a run is doing, read cheaply. Strings are as read
    (a viewer makes them printable)."""

    path: Path
    name: str
    trainer_state: str                  # running | stopped | stale | unverified | unreadable
    trainer_reason: str
    pid: int | None
    stalled: bool
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
    problems: tuple[str, ...]
    finished: bool = False              # the history's last event is a clean stop
    # The newest checkpoint in the trainer's own format (a run API loop's) that the history's
    # tail reports; the overview shows it where the run has none of ours.
    newest_external: ExternalCheckpoint | None = None
    problem_ranks: int = 0              # ranks of the job with a problem (rundir.ranks: dead, stopped, ...)

    @property
    def key(self) -> str:
        return str(self.path)


def _step(step: int | None) -> str:
    return "?" if step is None else f"{step:,}"


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


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _checkpoints(run: Path) -> tuple[list[CheckpointInfo], int]:
    """The newest :data:`CHECKPOINTS_INSPECTED` checkpoints inspected (oldest first), and how many there are."""
    try:
        names = [e.name for e in os.scandir(run) if is_checkpoint_bin(e.name)]
    except OSError:
        return [], 0
    names.sort()
    infos = [info for name in names[-CHECKPOINTS_INSPECTED:] if (info := inspect_listed(run / name)) is not None]
    return sorted(infos, key=lambda i: (i.step, i.path.name)), len(names)


def _tail_problems(tail: HistoryTail, newest: CheckpointInfo | None) -> list[str]:
    out = []
    if tail.error:
        out.append(tail.error)
    for ev in reversed(tail.events):
        if ev.event == EVENT_CHECKPOINT_FAILED:
            step = ev.step if ev.step is not None else -1
            if newest is None or newest.step < step:
                out.append(f"checkpoint FAILED at step {_step(ev.step)}: {ev.data.get('error', 'write error')}")
            break
        if ev.event in (EVENT_CHECKPOINT, EVENT_START, EVENT_RESUME):
            break
    for ev in reversed(tail.events):
        if ev.event == EVENT_STOP:
            if ev.data.get("reason") == "nonfinite":
                out.append(f"trainer stopped: the run diverged at step {_step(ev.step)}")
            break
        if ev.event in (EVENT_START, EVENT_RESUME):
            break
    if tail.bad_lines:
        out.append(f"{LOSS_JSON}: {counted(tail.bad_lines, 'unreadable line')} among the newest")
    if tail.torn_tail:
        out.append(f"{LOSS_JSON}: torn last line ({counted(tail.torn_tail, 'byte')})")
    nonfinite = int(np.count_nonzero(nonfinite_mask(tail.loss)))
    if nonfinite:
        out.append(f"{LOSS_JSON}: {counted(nonfinite, 'non-finite loss value')} among the newest steps")
    return out


def _config(run: Path) -> tuple[RunConfig | None, str | None]:
    """run.toml parsed, or the line that says why not (None, None: there is none)."""
    if not (run / RUN_TOML).exists():
        return None, None
    try:
        return load_run_config(run), None
    except ConfigError as err:
        return None, str(err)


class SummaryMemo:
    """The parts of a run's summary that stay while their files do, for a view that summarizes
    the same runs again and again: run.toml's parse (keyed by its stamp) and the newest
    checkpoints' inspection (keyed by the directory's stamp: a checkpoint lands by a rename).
    Stamps come from a fresh open (:func:`~rundir.filesystems.fresh_stamp`)."""

    def __init__(self) -> None:
        self._kept: dict[tuple[str, Path], tuple[object, object]] = {}

    def get(self, what: str, path: Path, make: Callable[[], object]) -> object:
        stamp = fresh_stamp(path)
        kept = self._kept.get((what, path))
        if stamp is not None and kept is not None and kept[0] == stamp:
            return kept[1]
        value = make()
        self._kept[(what, path)] = (stamp, value)
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
    problems: list[str] = []
    try:
        os.listdir(run)
    except OSError as err:
        return RunSummary(run, run.name, "unreadable", f"cannot read the run directory: {err.strerror or err}", None,
                          False, None, None, None, None, None, None, None, 0, 0, False, _mtime(run), None,
                          (f"cannot read the run directory: {err.strerror or err}",))
    tail = read_history_tail(run / LOSS_JSON)
    config, config_error = memo.get("config", run / RUN_TOML, lambda: _config(run))
    if config_error:
        problems.append(config_error)
    try:
        v = verify(run)
    except Exception as err:            # a verification bug must not hide the other runs
        v = Verification("unreadable", f"verification failed: {err}")
    checkpoints, n_checkpoints = memo.get("checkpoints", run, lambda: _checkpoints(run))
    newest = next((c for c in reversed(checkpoints) if c.status != "invalid"), None)
    # What the run last did, as the run itself dates it (its newest step, its newest
    # checkpoint); a run that has neither is dated by its files.
    dated = [float(t) for t in tail.time[-1:] if math.isfinite(t)] + [c.mtime for c in checkpoints[-1:] if c.mtime]
    last_activity = max(dated) if dated else max(tail.mtime or 0.0, _mtime(run / TRAINER_JSON), _mtime(run))
    stalled = False
    if v.state in ("stale", "unverified", "unreadable"):
        problems.insert(0, f"trainer {v.state}: {v.reason}")
    elif v.ok:
        started = (v.record.started or v.record.create_time) if v.record else 0.0
        latest = max(started or 0.0, tail.mtime or 0.0, *(c.mtime for c in checkpoints[-1:]))
        threshold = stall_threshold(tail.time[-2 * RATE_STEPS:], stall_after)
        if now - latest > threshold:
            stalled = True
            problems.insert(0, f"trainer STALLED: no new step for {now - latest:.0f} s")
    problem_ranks = _rank_problems(run, now)
    problems[:0] = problem_ranks
    problems.extend(_tail_problems(tail, newest))
    invalid = [c for c in checkpoints if c.status == "invalid"]
    if invalid:
        problems.append(f"{counted(len(invalid), 'invalid checkpoint')} among the newest {len(checkpoints)}: "
                        f"{invalid[-1].path.name}: {invalid[-1].reason}")
    state = read_state(run)
    if state.value is not None:
        try:
            zombies = find_zombies(state.value, config, run)
        except Exception as err:
            zombies = {"?": f"zombie check failed: {err}"}
        if len(zombies) <= ZOMBIES_LISTED:
            problems.extend(f"zombie arm {name}: {reason}" for name, reason in zombies.items())
        else:
            name, reason = next(iter(zombies.items()))
            problems.append(f"{len(zombies):,} zombie arms; {name}: {reason}")
    journal, journal_error = read_journal(run)
    if journal_error or journal is not None:
        problems.append(journal_error or unfinished_text(journal))
    last_step = int(tail.step[-1]) if len(tail.step) else None
    rate = rate_per_s(tail.step, tail.time) if not stopped(tail.events) else None
    max_steps = config.run.max_steps if config is not None and config.run.max_steps else None
    eta = eta_seconds(max_steps, last_step, rate) if v.ok else None
    tokens = int(tail.tokens[-1]) if len(tail.tokens) and tail.tokens[-1] >= 0 else None
    used, approximate = directory_size(run)
    finished = bool(tail.events) and tail.events[-1].event == EVENT_STOP and not v.ok
    return RunSummary(run, run.name, v.state, v.reason, v.record.pid if v.record else None, stalled, last_step,
                      _ema(tail.loss), rate, tokens, max_steps, eta,
                      newest, n_checkpoints, used, approximate, last_activity, tail.format, tuple(problems), finished,
                      next(reversed(external_checkpoints(tail.events)), None), len(problem_ranks))


def _rank_problems(run: Path, now: float) -> list[str]:
    """A line per rank of the job with a problem (rundir.ranks), naming it and its host."""
    return [f"rank {s.record.rank} on {s.record.host}: {s.verdict}: {s.why}"
            for s in judge_ranks(read_ranks(run).records, now) if s.problem]


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
                                                 run / STATE_JSON, run / PIVOT_JOURNAL))


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
