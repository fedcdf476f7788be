"""Which checkpoints a run keeps (docs/contract.md#retention), and the prune that removes the rest.

A 121M-parameter run writes a 1.46 GB checkpoint every 100 steps: kept whole, its
directory holds 1.6 TB by the seed's polish pivot. The policy is run.toml's
``[run] keep_last`` (the newest N complete checkpoints; 0 keeps all) and ``keep_every``
(also every checkpoint whose step is a multiple of N; 0: none). Whatever the policy, a
prune never removes

- the newest complete checkpoint (``newest``);
- a checkpoint a polish pivot names, its audit checkpoint or P (``pivot``), from the
  pivots' records and an unfinished pivot's journal;
- the checkpoint a running trainer resumed from until a newer one is complete (``resumed``);
- a ``.bin`` without a ``.json``, foreign or unfinished (``foreign``), or one that fails
  its quick validity check (``invalid``): only a checkpoint this trainer wrote is removed.

Only the trainer prunes (or ``andrea-train --prune``, under the run's lock), and only after
a newer checkpoint is durable. Each checkpoint goes ``.json`` first, then ``.bin``; the
``prune`` event that lists them is in ``.loss.json`` before the first removal, so a prune
that a kill -9 interrupts is finished by the next trainer (:func:`finish_interrupted_prune`)
instead of leaving bare ``.bin`` files that no policy would ever remove.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from .atomic import fsync_dir
from .checkpoint import CheckpointInfo, checkpoint_path, sidecar_path
from .history import HistoryEvent
from .layout import EVENT_PRUNE, EVENT_ROLLBACK
from .pivot_files import list_pivots, read_journal
from .rollback_files import read_rollback_journal
from .text import counted

# Test-only: seconds to sleep between a checkpoint's .json and .bin removal, so that a
# fault-injection test can land a SIGKILL inside a prune. Never set in normal use.
SLOW_PRUNE_ENV = "ANDREA_TEST_SLOW_PRUNE"

# Why a checkpoint is kept, in the order the console lists them.
NEWEST, LAST, EVERY, PIVOT, ROLLBACK, RESUMED, FOREIGN, INVALID, ALL = (
    "newest", "last", "every", "pivot", "rollback", "resumed", "foreign", "invalid", "all")


@dataclass(frozen=True)
class RetentionPolicy:
    """run.toml's ``keep_last`` and ``keep_every`` (0: keep all / none)."""

    keep_last: int = 5
    keep_every: int = 0

    def as_dict(self) -> dict[str, int]:
        return {"keep_last": self.keep_last, "keep_every": self.keep_every}

    def describe(self) -> str:
        last = "all" if self.keep_last == 0 else f"the last {self.keep_last}"
        every = f" and every multiple of {counted(self.keep_every, 'step')}" if self.keep_every else ""
        return f"keep {last}{every}"


@dataclass(frozen=True)
class Verdict:
    """One checkpoint and why it is kept (``keep`` empty: the next prune removes it)."""

    info: CheckpointInfo
    keep: tuple[str, ...]

    @property
    def removed_next(self) -> bool:
        return not self.keep

    @property
    def bytes(self) -> int:
        """What removing it frees: the ``.bin`` and its ``.json``."""
        try:
            return self.info.size + os.stat(sidecar_path(self.info.path)).st_size
        except OSError:
            return self.info.size


def protected_steps(run_dir: str | os.PathLike[str], events: Iterable[HistoryEvent] = ()) -> dict[int, str]:
    """Steps no policy removes, with why: every checkpoint a pivot names (its records and
    an unfinished pivot's journal) and every checkpoint a rollback resumed from (its
    ``rollback`` events, and an unfinished rollback's journal)."""
    protected: dict[int, str] = {}
    records = list_pivots(run_dir)
    journal, _ = read_journal(run_dir)
    if journal is not None:
        records.append({"audit_step": journal.audit_step, "final_step": journal.final_step})
    for record in records:
        for key in ("audit_step", "final_step"):
            step = record.get(key)
            if isinstance(step, int) and not isinstance(step, bool):
                protected[step] = PIVOT
    rollback, _ = read_rollback_journal(run_dir)
    if rollback is not None:
        protected.setdefault(rollback.to_step, ROLLBACK)
    for ev in events:
        if ev.event == EVENT_ROLLBACK and isinstance(ev.data.get("to_step"), int):
            protected.setdefault(ev.data["to_step"], ROLLBACK)
    return protected


def plan_retention(checkpoints: Iterable[CheckpointInfo], policy: RetentionPolicy,
                   protected: Mapping[int, str] | None = None, resumed_step: int | None = None) -> list[Verdict]:
    """Every checkpoint with why it is kept, oldest first; those kept for no reason are
    what a prune removes. Pure: reads nothing (``checkpoints`` from
    :func:`~rundir.checkpoint.list_checkpoints`)."""
    protected = protected or {}
    infos = sorted(checkpoints, key=lambda i: (i.step, i.path.name))
    complete = [i for i in infos if i.status == "complete"]
    newest = complete[-1].step if complete else None
    last = {i.step for i in complete[-policy.keep_last:]} if policy.keep_last else set()
    verdicts = []
    for info in infos:
        if info.status != "complete":
            verdicts.append(Verdict(info, (FOREIGN if info.status == "foreign" else INVALID,)))
            continue
        keep = []
        if info.step == newest:
            keep.append(NEWEST)
        if policy.keep_last == 0:
            keep.append(ALL)
        elif info.step in last:
            keep.append(LAST)
        if policy.keep_every and info.step % policy.keep_every == 0:
            keep.append(EVERY)
        if info.step in protected:
            keep.append(protected[info.step])
        if resumed_step is not None and info.step == resumed_step and newest == resumed_step:
            keep.append(RESUMED)
        verdicts.append(Verdict(info, tuple(keep)))
    return verdicts


@dataclass(frozen=True)
class PruneResult:
    steps: tuple[int, ...]
    bytes_freed: int
    errors: tuple[str, ...] = ()


def remove_checkpoints(run_dir: str | os.PathLike[str], doomed: Iterable[Verdict]) -> PruneResult:
    """Remove each checkpoint, ``.json`` first (so no checksum ever vouches for a missing
    ``.bin``), then ``.bin``; then make the removals durable. A file already gone is no
    error (an operator or another prune); one that cannot be removed is reported."""
    steps, freed, errors = [], 0, []
    delay = float(os.environ.get(SLOW_PRUNE_ENV, "0") or 0)
    for verdict in doomed:
        size = verdict.bytes
        try:
            sidecar_path(verdict.info.path).unlink(missing_ok=True)
            if delay:
                time.sleep(delay)
            verdict.info.path.unlink(missing_ok=True)
        except OSError as err:
            errors.append(f"{verdict.info.path.name}: {err.strerror or err}")
            continue
        steps.append(verdict.info.step)
        freed += size
    if steps:
        fsync_dir(run_dir)
    return PruneResult(tuple(steps), freed, tuple(errors))


def prune(run_dir: str | os.PathLike[str], doomed: Sequence[Verdict], policy: RetentionPolicy,
          record: Callable[[dict[str, Any]], None]) -> PruneResult:
    """Remove ``doomed`` so that a kill at any moment leaves a run that resumes exactly:
    ``record`` appends the ``prune`` event with these fields (steps, bytes, policy) and makes
    it durable *before* the first removal, so that :func:`finish_interrupted_prune` can
    complete what a kill interrupts; then :func:`remove_checkpoints`."""
    record({"steps": [v.info.step for v in doomed], "bytes": sum(v.bytes for v in doomed),
            "policy": policy.as_dict()})
    return remove_checkpoints(run_dir, doomed)


def finish_interrupted_prune(run_dir: str | os.PathLike[str], events: Iterable[HistoryEvent]) -> list[Path]:
    """Finish what a prune killed half-way left: a listed checkpoint whose ``.json`` is gone
    but whose ``.bin`` is still there (and no newer than the prune). Returns what it removed."""
    removed = []
    for ev in events:
        if ev.event != EVENT_PRUNE or not isinstance(ev.data.get("steps"), list):
            continue
        when = ev.time
        for step in ev.data["steps"]:
            if not isinstance(step, int) or isinstance(step, bool):
                continue
            path = checkpoint_path(run_dir, step)
            try:
                st = path.stat()
            except OSError:
                continue
            rewritten = when is not None and st.st_mtime > when
            if sidecar_path(path).exists() or rewritten:
                continue               # whole, or written again since: not the prune's
            try:
                path.unlink()
                removed.append(path)
            except OSError:
                pass
    if removed:
        fsync_dir(run_dir)
    return removed
