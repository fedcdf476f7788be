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
from pathlib import Path
from typing import Callable

import numpy as np

from rundir.checkpoint import CheckpointInfo, inspect_listed
from rundir.config import ConfigError, RunConfig, load_run_config
from rundir.external import external_checkpoints, reported_files
from rundir.filesystems import fresh_stamp
from rundir.history import read_history_tail
from rundir.history.records import nonfinite_mask
from rundir.layout import (
    LOSS_JSON,
    PIVOT_JOURNAL,
    ROLLBACK_JOURNAL,
    RUN_TOML,
    STATE_JSON,
    TRAINER_JSON,
    is_checkpoint_bin,
    is_temporary,
)
from rundir.pivot_files import read_journal, unfinished_text
from rundir.process import Verification, verify_trainer
from rundir.ranks import judge_ranks, read_ranks
from rundir.rollback_files import pending_rollback
from rundir.run_lock import blocking_lock_file
from rundir.runs import RunsListing, list_runs
from rundir.sidecars import read_state
from rundir.storage import directory_size
from rundir.zombies import find_zombies

from ..model.run_facts import (
    NO_RUN_TOML,
    RATE_STEPS,
    RunSummary,
    Stall,
    debiased_ema,
    eta_seconds,
    failed_checkpoint_event,
    finished_cleanly,
    rate_per_s,
    safety_stop_event,
    stall_threshold,
    stopped,
)

# Only the newest checkpoints are inspected (header and sidecar): a run with 20,000 of
# them costs what one with 20 does.
CHECKPOINTS_INSPECTED = 20


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
        run, run.name, v.state, v.reason, v.record.pid if v.record else None, last_step, debiased_ema(tail.loss), rate,
        tokens, max_steps, eta, newest, n_checkpoints, used, approximate, last_activity, tail.format, finished,
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
