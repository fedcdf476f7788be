"""The guided rollback's files: choosing the checkpoint, what is lost, the journal, the set-aside.

A rollback goes back past a loss spike: the trainer is stopped (its final checkpoint is
kept), every checkpoint after the chosen step X is set aside into
``archive/rollback_X_<UTC>/`` (moved, never deleted: so that ``--resume latest`` and the
retention policy see X as the newest, and nothing of the abandoned segment is lost),
and the trainer resumes from ``step_X.bin`` with ``--skip-batches N``. ``.loss.json`` is
never rewritten: the resumed trainer appends a ``rollback`` event and the steps from
X + 1 again, and the newest line per step wins. The journal (``.rollback.json``) records
how far a rollback got, so that an interrupted one is completed by the next attempt.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Iterable

import numpy as np

from .abandoned import head_rows
from .atomic import atomic_write_json, fsync_dir, remove_stale_temps
from .checkpoint import CheckpointInfo, list_checkpoints, sidecar_path
from .history import LossHistory
from .journal import StagedJournal, checked_archive_dir, list_archived_records, read_staged, remove_staged, write_staged
from .layout import ROLLBACK_ARCHIVE_PREFIX, ROLLBACK_JOURNAL, ROLLBACK_RECORD, checkpoint_step, rollback_archive_name
from .pivot_files import PivotError, archive_root, regular_file_or_none, utc_stamp
from .step_rows import search_steps
from .text import counted

# The stages in order; a journal's ``stage`` is the last one completed.
STAGES = ("planned", "stopped", "set_aside", "resumed")
MAX_SKIP_BATCHES = 1_000_000      # far past PaLM's 200-500; a typo of more would only spin the samplers


@dataclass(frozen=True)
class ChoiceNames:
    """How a front end names the rollback's two choices in a message: the command line's
    options, or the rollback screen's fields."""

    to: str                 # the checkpoint step, before a value: "--to 1,500"
    choose_to: str          # how to choose that step: "pass --to STEP"
    skip: str               # the batches to skip, before a value


OPTION_NAMES = ChoiceNames(to="--to", choose_to="pass --to STEP", skip="--skip-batches")


class RollbackError(RuntimeError):
    """A rollback that cannot go ahead; the message says why (nothing was changed).

    A message about the operator's choices is a ``template`` naming them as ``{to}``,
    ``{choose_to}`` and ``{skip}``: ``str()`` words it for the command line, and
    :meth:`worded` for another front end."""

    def __init__(self, message: str, *, template: str | None = None) -> None:
        self.template = template
        super().__init__(message if template is None else template.format(**vars(OPTION_NAMES)))

    @classmethod
    def about_choices(cls, template: str) -> "RollbackError":
        return cls("", template=template)

    def worded(self, names: ChoiceNames) -> str:
        return str(self) if self.template is None else self.template.format(**vars(names))


@dataclass
class RollbackJournal(StagedJournal):
    """How far a rollback got. Written atomically after every stage."""

    FILE: ClassVar[str] = ROLLBACK_JOURNAL
    STAGES: ClassVar[tuple[str, ...]] = STAGES
    WHAT: ClassVar[str] = "rollback"

    stage: str
    started: float
    to_step: int                        # X: the checkpoint resumed from
    skip_batches: int
    from_step: int | None = None        # the newest step in the history when the trainer stopped
    spike: dict[str, Any] | None = None     # the spike rolled back past (None with --to)
    final_step: int | None = None       # the stopped trainer's final checkpoint
    archive: str | None = None          # where the checkpoints after X went, relative to the run directory
    set_aside: list[int] = field(default_factory=list)
    log: list[dict[str, Any]] = field(default_factory=list)
    relaunch: dict[str, Any] | None = None      # as the pivot's: {"time"}, then {"pid"} or {"job_id"}


def read_rollback_journal(run_dir: str | os.PathLike[str]) -> tuple[RollbackJournal | None, str | None]:
    """``(journal, None)``, ``(None, None)`` when no rollback is under way, or ``(None, reason)``."""
    return read_staged(run_dir, RollbackJournal)


def pending_rollback(run_dir: str | os.PathLike[str]) -> str | None:
    """The one line of an interrupted rollback, for every view that says it (the dashboard's
    problems, the overview), or None."""
    journal, error = read_rollback_journal(run_dir)
    if error:
        return error
    if journal is None:
        return None
    return (f"a rollback to step {journal.to_step:,} is unfinished (last completed stage: {journal.stage}); "
            "r or --rollback completes it")


def write_rollback_journal(run_dir: str | os.PathLike[str], journal: RollbackJournal) -> None:
    write_staged(run_dir, journal)


def remove_rollback_journal(run_dir: str | os.PathLike[str]) -> None:
    remove_staged(run_dir, RollbackJournal)


def check_skip_batches(n: Any) -> int:
    """``n`` as a batch count, or :class:`RollbackError` naming the problem."""
    if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= MAX_SKIP_BATCHES:
        raise RollbackError.about_choices(f"{{skip}} {_braced(n)}: expected a whole number of batches from 0 to "
                                          f"{MAX_SKIP_BATCHES:,}")
    return n


def choose_checkpoint(checkpoints: Iterable[CheckpointInfo], *, spike_start: int | None = None, margin: int = 100,
                      to_step: int | None = None) -> CheckpointInfo:
    """The checkpoint to roll back to: ``to_step``'s (it must be complete), else the newest
    complete one at least ``margin`` steps before ``spike_start``. Raises
    :class:`RollbackError` saying why there is none."""
    complete = sorted((c for c in checkpoints if c.status == "complete"), key=lambda c: c.step)
    if to_step is not None:
        for info in complete:
            if info.step == to_step:
                return info
        have = ", ".join(f"{c.step:,}" for c in complete[-8:]) or "none"
        raise RollbackError.about_choices(f"{{to}} {to_step}: there is no complete checkpoint at step {to_step:,} "
                                          f"(complete checkpoints: {have})")
    if spike_start is None:
        raise RollbackError.about_choices("no loss spike in the history: nothing to roll back past ({choose_to} "
                                          "to go back to a checkpoint of your choice)")
    limit = spike_start - margin
    early = [c for c in complete if c.step <= limit]
    if not early:
        oldest = f"the oldest complete checkpoint is at step {complete[0].step:,}" if complete else \
            "there is no complete checkpoint"
        raise RollbackError.about_choices(
            f"no complete checkpoint at least {counted(margin, 'step')} (alerts.rollback_margin) before the spike at "
            f"step {spike_start:,}, i.e. at step {limit:,} or earlier: {oldest}; {{choose_to}} to choose one")
    return early[-1]


@dataclass(frozen=True)
class Loss:
    """What going back to ``to_step`` abandons: the steps after it, their tokens and wall time."""

    to_step: int
    last_step: int | None
    steps: int
    tokens: int | None
    seconds: float | None

    def describe(self) -> str:
        if not self.steps:
            return f"no logged training after step {self.to_step:,} is lost"
        parts = [f"steps {self.to_step + 1:,}..{self.last_step:,} ({counted(self.steps, 'step')}"]
        if self.tokens is not None:
            parts.append(f", {self.tokens:,} tokens")
        if self.seconds is not None:
            parts.append(f", {_duration(self.seconds)} of training")
        return "".join(parts) + ") are abandoned (their lines stay in the history; the checkpoints after "\
            f"step {self.to_step:,} are set aside, not deleted)"


def _braced(value: Any) -> str:
    """``repr(value)`` with its braces doubled: a value placed in a message template."""
    return repr(value).replace("{", "{{").replace("}", "}}")


def _duration(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def lost_training(history: LossHistory, to_step: int, tokens_at_step: int | None = None) -> Loss:
    """What rolling back to ``to_step`` loses, from the history's step, tokens and time columns,
    up to where the run is (the head: steps an earlier segment left after it are lost already)."""
    rows = head_rows(history.step, history.head_step)
    steps = history.step[:rows]
    last = int(steps[-1]) if len(steps) else None
    if last is None or last <= to_step:
        return Loss(to_step, last, 0, 0, 0.0)
    at = int(search_steps(steps, to_step, side="right")) - 1      # the line of to_step, or the one before
    tokens_col, time_col = history.tokens[:rows], history.time[:rows]
    start_tokens = tokens_at_step if tokens_at_step is not None else (
        int(tokens_col[at]) if at >= 0 and tokens_col[at] >= 0 else None)
    tokens = int(tokens_col[-1]) - start_tokens if start_tokens is not None and tokens_col[-1] >= 0 else None
    start_time = float(time_col[at]) if at >= 0 else float("nan")
    seconds = float(time_col[-1]) - start_time
    return Loss(to_step, last, last - to_step, tokens, seconds if np.isfinite(seconds) else None)


def set_aside_checkpoints(run_dir: str | os.PathLike[str], journal: RollbackJournal, now: float | None = None) -> Path:
    """Move every checkpoint after ``journal.to_step`` (``.json`` and ``.bin``) into
    ``archive/rollback_X_<UTC>/`` with a ``rollback.json``. Idempotent: a second call after
    an interruption finishes the same archive. ``.loss.json`` is not touched."""
    run_dir = Path(run_dir)
    now = time.time() if now is None else now
    if journal.archive is None:
        journal.archive = rollback_archive_name(journal.to_step, utc_stamp(now))
        write_rollback_journal(run_dir, journal)      # record the name before anything moves
    try:
        root = archive_root(run_dir)
    except PivotError as err:                       # archive/ is a link or a file: said, not a traceback
        raise RollbackError(str(err)) from None
    dest = checked_archive_dir(run_dir, root, journal.archive, RollbackError)
    remove_stale_temps(dest)                  # an interrupted call's half-written record
    # What an interrupted call moved already is in the archive (a kill can land between the
    # moves and the record that lists them).
    moved = set(journal.set_aside) | {step for step in map(checkpoint_step, os.listdir(dest)) if step is not None}
    for info in list_checkpoints(run_dir):
        if info.step <= journal.to_step:
            continue
        for path in (sidecar_path(info.path), info.path):      # .json first: no checksum vouches for a gone .bin
            try:
                source = regular_file_or_none(path)
            except PivotError as err:         # a link or a device: left alone, said
                raise RollbackError(f"cannot set aside {path.name}: {err}") from None
            if source is not None:
                os.replace(source, dest / path.name)          # same file system: an atomic move
        moved.add(info.step)
    journal.set_aside = sorted(moved)
    atomic_write_json(dest / ROLLBACK_RECORD, journal.to_dict())
    fsync_dir(run_dir)
    fsync_dir(dest)
    return dest


def list_rollbacks(run_dir: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every finished or set-aside rollback: ``rollback.json`` of each ``archive/rollback_*`` (oldest first)."""
    return list_archived_records(run_dir, ROLLBACK_ARCHIVE_PREFIX, ROLLBACK_RECORD)
