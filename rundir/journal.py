"""Journals of the guided operations (the polish pivot, the rollback): how far one got.

Each operation is a sequence of stages; its journal (a dataclass, one file in the run
directory named in :mod:`rundir.layout`) is written atomically after every stage, so
that an operation interrupted anywhere (the console killed, the operator cancelling,
the trainer dying) is found by the next attempt and completed from where it stopped.
A journal subclass declares its ``FILE``, its ``STAGES`` in order and what it is
(``WHAT``, for messages), and has ``stage`` and ``log`` fields.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from .atomic import atomic_write_json
from .layout import ARCHIVE_DIR
from .safe_read import JOURNAL_MAX, read_json_object

J = TypeVar("J", bound="StagedJournal")


class StagedJournal:
    """The stage bookkeeping every journal shares; ``stage`` is the last one completed."""

    FILE: ClassVar[str]
    STAGES: ClassVar[tuple[str, ...]]
    WHAT: ClassVar[str]
    stage: str
    log: list[dict[str, Any]]

    def advance(self, stage: str, note: str = "", now: float | None = None) -> None:
        if stage not in self.STAGES:
            raise ValueError(f"unknown {self.WHAT} stage {stage!r}")
        self.stage = stage
        self.log.append({"stage": stage, "time": time.time() if now is None else now, "note": note})

    def done(self, stage: str) -> bool:
        """Whether ``stage`` has been completed."""
        return self.STAGES.index(self.stage) >= self.STAGES.index(stage)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = asdict(self)      # type: ignore[call-overload]  # subclasses are dataclasses
        return data


def read_staged(run_dir: str | os.PathLike[str], cls: type[J]) -> tuple[J | None, str | None]:
    """``(journal, None)``, ``(None, None)`` when none is under way, or ``(None, reason)``."""
    read = read_json_object(Path(run_dir) / cls.FILE, JOURNAL_MAX)
    if read.missing:
        return None, None
    if not read.ok or read.value is None:
        return None, f"{cls.FILE}: unreadable ({read.error})"
    try:
        journal = cls(**read.value)
        if journal.stage not in cls.STAGES:
            raise ValueError(f"unknown stage {journal.stage!r}")
    except (TypeError, ValueError) as err:
        return None, f"{cls.FILE}: malformed ({err})"
    return journal, None


def write_staged(run_dir: str | os.PathLike[str], journal: StagedJournal) -> None:
    """The journal, atomically (temp + rename)."""
    atomic_write_json(Path(run_dir) / journal.FILE, journal.to_dict())


def remove_staged(run_dir: str | os.PathLike[str], cls: type[StagedJournal]) -> None:
    (Path(run_dir) / cls.FILE).unlink(missing_ok=True)


def checked_archive_dir(run_dir: Path, root: Path, archive: str, error: type[Exception]) -> Path:
    """``run_dir / archive``, created if absent, after checking that it names a directory
    right under ``root`` (the run's ``archive/``) and is not a symbolic link; raises
    ``error`` (the operation's own exception) saying which check failed."""
    dest = run_dir / archive
    if dest.parent != root or ".." in Path(archive).parts:
        raise error(f"archive path {archive!r} is not under {ARCHIVE_DIR}/")
    if dest.is_symlink():
        raise error(f"{dest} is a symbolic link: refusing to archive into it")
    dest.mkdir(exist_ok=True)
    return dest


def list_archived_records(run_dir: str | os.PathLike[str], prefix: str, record: str) -> list[dict[str, Any]]:
    """The ``record`` file of each ``archive/<prefix>*`` directory (oldest first), each with
    its ``path`` relative to the run directory; an unreadable record gives ``{"error"}``."""
    root = Path(run_dir) / ARCHIVE_DIR
    out: list[dict[str, Any]] = []
    try:
        entries = sorted(p for p in root.iterdir() if p.name.startswith(prefix) and p.is_dir())
    except OSError:
        return out
    for entry in entries:
        read = read_json_object(entry / record, JOURNAL_MAX)
        data: dict[str, Any] = read.value if read.ok and read.value is not None else {"error": read.error}
        out.append({**data, "path": str(entry.relative_to(run_dir))})
    return out
