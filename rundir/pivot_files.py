"""The polish pivot's files (docs/contract.md#the-polish-pivot): the new policy, the archive, the journal.

A pivot is a policy change, not a run reset. This module holds the parts that touch
files and need no trainer: planning the new ``run.toml`` (caps, floors, dropped arms),
archiving ``.samples.json`` and ``.state.json`` with the previous ``run.toml`` and a
``pivot.json``, and the journal (``.pivot.json``) that records how far a pivot got, so
that an interrupted one is completed or rolled back by the next. ``.loss.json`` is never
moved, copied or rewritten here.
"""

from __future__ import annotations

import copy
import datetime as dt
import os
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from .atomic import atomic_write_bytes, atomic_write_json, fsync_dir, remove_stale_temps
from .config import ArmConfig, ConfigError, RunConfig, dump_run_config, validate_policy
from .journal import StagedJournal, checked_archive_dir, list_archived_records, read_staged, remove_staged, write_staged
from .layout import (
    ARCHIVE_DIR,
    PIVOT_ARCHIVE_PREFIX,
    PIVOT_JOURNAL,
    PIVOT_RECORD,
    RUN_TOML,
    SAMPLES_JSON,
    STATE_JSON,
    pivot_archive_name,
)

ARCHIVED_FILES = (SAMPLES_JSON, STATE_JSON)
# The stages in order; a journal's ``stage`` is the last one completed.
STAGES = ("planned", "audit_checkpoint", "stopped", "archived", "config_written", "resumed")


class PivotError(RuntimeError):
    """A pivot step that cannot go ahead; the message says why and what is unchanged."""


@dataclass
class PivotJournal(StagedJournal):
    """How far a pivot got. Written atomically after every stage."""

    FILE: ClassVar[str] = PIVOT_JOURNAL
    STAGES: ClassVar[tuple[str, ...]] = STAGES
    WHAT: ClassVar[str] = "pivot"

    stage: str
    started: float
    old_policy: dict[str, Any]
    new_policy: dict[str, Any]
    dropped: list[str] = field(default_factory=list)
    audit_step: int | None = None
    final_step: int | None = None
    archive: str | None = None          # relative to the run directory
    log: list[dict[str, Any]] = field(default_factory=list)
    # Step 6's relaunch, recorded before it happens ({"time"}) and after ({"pid"} or
    # {"job_id"}): a pivot resumed after a kill waits for that trainer instead of starting
    # a second one.
    relaunch: dict[str, Any] | None = None


def unfinished_text(journal: PivotJournal | None) -> str:
    """The one wording of an unfinished pivot, for every view that says it (the problems, the
    overview, a rollback's refusal)."""
    stage = f" (last completed stage: {journal.stage})" if journal is not None else ""
    return f"a polish pivot is unfinished{stage}: p or --pivot completes it, --pivot-rollback undoes it"


def read_journal(run_dir: str | os.PathLike[str]) -> tuple[PivotJournal | None, str | None]:
    """``(journal, None)``, ``(None, None)`` when no pivot is under way, or ``(None, reason)``."""
    return read_staged(run_dir, PivotJournal)


def write_journal(run_dir: str | os.PathLike[str], journal: PivotJournal) -> None:
    write_staged(run_dir, journal)


def remove_journal(run_dir: str | os.PathLike[str]) -> None:
    remove_staged(run_dir, PivotJournal)


def plan_policy(config: RunConfig, caps: dict[str, float] | None = None, floors: dict[str, float] | None = None,
                drop: list[str] | tuple[str, ...] = ()) -> RunConfig:
    """The configuration after the pivot: ``config`` with new caps and floors, dropped arms removed.

    Raises :class:`ConfigError` naming the arm and the rule when the policy is not allowed.
    """
    caps, floors = dict(caps or {}), dict(floors or {})
    for name in [*caps, *floors, *drop]:
        if name not in config.arms:         # a name to drop as well: refused before anything happens
            raise ConfigError(f"no arm named {name!r} in {RUN_TOML}; arms: {', '.join(config.arms)}")
    new = copy.deepcopy(config)
    arms = {}
    for name, arm in config.arms.items():
        if name in drop:
            continue
        try:
            arms[name] = ArmConfig(source=arm.source, cap=caps.get(name, arm.cap), floor=floors.get(name, arm.floor))
        except ConfigError as err:
            raise ConfigError(str(err).replace("run.toml: ", f"new policy: arms.{name}.", 1)) from None
    validate_policy(arms)
    new.arms = arms
    return new


def policy_text(policy: Any) -> str:
    """A pivot's new caps and floors on one line, ``arm [floor, cap], ...``. The policy may
    come from a file another process wrote: anything that is not a number shows as ``?``."""
    policy = policy if isinstance(policy, dict) else {}
    caps = policy.get("caps") if isinstance(policy.get("caps"), dict) else {}
    floors = policy.get("floors") if isinstance(policy.get("floors"), dict) else {}

    def number(value: Any) -> str:
        return f"{value:g}" if isinstance(value, (int, float)) and not isinstance(value, bool) else "?"

    return ", ".join(f"{arm} [{number(floors.get(arm))}, {number(caps.get(arm))}]" for arm in caps) or "(none)"


def utc_stamp(now: float) -> str:
    return dt.datetime.fromtimestamp(now, dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def regular_file_or_none(path: Path) -> Path | None:
    """``path`` if it is a regular file (not a symlink), None if absent; refuses anything else."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(st.st_mode):
        raise PivotError(f"{path.name} is a symbolic link: a pivot never follows links out of the run directory")
    if not stat.S_ISREG(st.st_mode):
        raise PivotError(f"{path.name} is not a regular file")
    return path


def archive_root(run_dir: Path) -> Path:
    root = run_dir / ARCHIVE_DIR
    try:
        st = os.lstat(root)
    except FileNotFoundError:
        root.mkdir()
        return root
    if not stat.S_ISDIR(st.st_mode):      # a symlink (even to a directory) or a file
        raise PivotError(f"{root} is not a plain directory: refusing to archive into it")
    return root


def archive_sidecars(run_dir: str | os.PathLike[str], journal: PivotJournal, now: float | None = None) -> Path:
    """Steps 3-4: move ``.samples.json`` and ``.state.json``, copy ``run.toml`` and write
    ``pivot.json`` into ``archive/pivot_P_<UTC>/``. Idempotent: a second call after an
    interruption finishes the same archive. ``.loss.json`` is not touched."""
    run_dir = Path(run_dir)
    if journal.final_step is None:
        raise PivotError("the final checkpoint step P is not known yet: the trainer has not stopped")
    now = time.time() if now is None else now
    sources = {name: regular_file_or_none(run_dir / name) for name in (*ARCHIVED_FILES, RUN_TOML)}
    if journal.archive is None:
        journal.archive = pivot_archive_name(journal.final_step, utc_stamp(now))
        write_journal(run_dir, journal)       # record the name before anything moves
    dest = checked_archive_dir(run_dir, archive_root(run_dir), journal.archive, PivotError)
    remove_stale_temps(dest)                  # an interrupted call's half-written copy of run.toml
    archived = []
    for name in ARCHIVED_FILES:
        source = sources[name]
        if source is not None:
            os.replace(source, dest / name)      # same file system: an atomic move
        if (dest / name).exists():
            archived.append(name)
    run_toml = sources[RUN_TOML]
    if not (dest / RUN_TOML).exists() and run_toml is not None:
        atomic_write_bytes(dest / RUN_TOML, run_toml.read_bytes())
    atomic_write_json(dest / PIVOT_RECORD, {**journal.to_dict(), "archived": archived,
                                            "previous_run_toml": (dest / RUN_TOML).exists()})
    fsync_dir(run_dir)
    fsync_dir(dest)
    return dest


def write_new_policy(run_dir: str | os.PathLike[str], new_config: RunConfig) -> None:
    """Step 5: the new caps and floors into ``run.toml`` (atomic)."""
    atomic_write_bytes(Path(run_dir) / RUN_TOML, dump_run_config(new_config).encode("utf-8"))


def rollback_archive(run_dir: str | os.PathLike[str], journal: PivotJournal) -> list[str]:
    """Undo steps 3-5 of an unfinished pivot: the archived sidecars and the previous
    ``run.toml`` go back in place. Returns what was restored."""
    run_dir = Path(run_dir)
    restored: list[str] = []
    if journal.archive is None:
        return restored
    src_dir = run_dir / journal.archive
    if not src_dir.is_dir() or src_dir.is_symlink():
        return restored
    for name in ARCHIVED_FILES:
        src = regular_file_or_none(src_dir / name)
        if src is not None and not (run_dir / name).exists():
            os.replace(src, run_dir / name)
            restored.append(name)
    previous = regular_file_or_none(src_dir / RUN_TOML)
    if previous is not None:
        atomic_write_bytes(run_dir / RUN_TOML, previous.read_bytes())
        restored.append(RUN_TOML)
    for leftover in (src_dir / RUN_TOML, src_dir / PIVOT_RECORD):
        leftover.unlink(missing_ok=True)
    try:
        src_dir.rmdir()
    except OSError:
        pass
    fsync_dir(run_dir)
    return restored


def list_pivots(run_dir: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every finished or archived pivot: ``pivot.json`` of each ``archive/pivot_*`` (oldest first)."""
    return list_archived_records(run_dir, PIVOT_ARCHIVE_PREFIX, PIVOT_RECORD)
