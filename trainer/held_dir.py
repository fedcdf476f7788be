"""The run directory, held open for the trainer's lifetime, so that it trains on in it
wherever the directory is moved or renamed.

An operator who renames ``runs/120m`` to ``runs/120m-old`` mid-run must not cost the run
its checkpoints: every file operation by path would fail (ENOENT) from then on, and the
final checkpoint of a stop with them. The trainer opens the directory once and reaches its
files through ``/proc/self/fd/N/``, a path the kernel resolves to the open directory
itself, wherever it now is. (Where ``/proc`` does not offer that, the path given is used,
as before.) A console verifies a trainer that holds the run directory open as naming it
(:func:`rundir.identity.trainer_directory`), and finds where a moved run went the same way.
"""

from __future__ import annotations

import os
from pathlib import Path

from rundir.identity import linked_directory

_FD_DIR = Path("/proc/self/fd")
REMOVED = Path("/")         # moved_to()'s answer for a directory removed: no place at all


class HeldRunDir:
    """An open descriptor of the run directory; :attr:`path` reaches its files."""

    def __init__(self, path: str | os.PathLike[str]):
        self.given = Path(path)
        self.fd = os.open(self.given, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        st = os.fstat(self.fd)
        self._identity = (st.st_dev, st.st_ino)
        through_fd = _FD_DIR / str(self.fd)
        self.path = through_fd if _resolves_to(through_fd, self._identity) else self.given
        self._told: Path | None = None

    def where(self) -> Path | None:
        """Where the directory is now (the path it was given when that cannot be told); None
        when it was removed (:func:`rundir.identity.linked_directory`)."""
        try:
            return linked_directory(_FD_DIR / str(self.fd))
        except OSError:
            return self.given

    def moved_to(self) -> Path | None:
        """Its new place, once the path it was given names something else (it was moved or
        renamed; :data:`REMOVED` when it was removed); None while it is where it was. Said once
        per place."""
        if _resolves_to(self.given, self._identity):
            return None
        now = self.where() or REMOVED
        if now == self._told:
            return None
        self._told = now
        return now

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _resolves_to(path: Path, identity: tuple[int, int]) -> bool:
    try:
        st = os.stat(path)
    except OSError:
        return False
    return (st.st_dev, st.st_ino) == identity
