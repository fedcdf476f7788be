"""The tail of ``trainer.log``: its newest lines, read incrementally and never unbounded."""

from __future__ import annotations

import os
from collections import deque
from pathlib import Path

from rundir.late_bytes import LateBytes
from rundir.safe_read import open_regular

TAIL_LINES = 200
# The first read, and any read that finds more than this appended since the last one,
# takes only the last FIRST_READ_BYTES: a log that grew by gigabytes costs no more.
FIRST_READ_BYTES = 64 << 10


class LogTail:
    """The newest :data:`TAIL_LINES` lines of a log file that only grows (or is replaced).

    :meth:`read` picks up what was appended since the last call; ``seen`` counts every
    line read so far, so a consumer can tell how many are new.
    """

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        self.lines: deque[str] = deque(maxlen=TAIL_LINES)
        self.seen = 0
        self._offset: int | None = None
        self._identity: tuple[int, int] | None = None
        self._partial = b""
        self._late = LateBytes()         # NUL bytes at the end: not written yet (a network filesystem)

    @property
    def awaiting_late_bytes(self) -> bool:
        """Whether the last read stopped before NUL bytes not written yet (rundir.late_bytes)."""
        return self._late.awaited

    def read(self) -> tuple[str, ...]:
        """Read what was appended; the tail as it is now. Never raises, never blocks."""
        try:
            fd, st = open_regular(self.path)
        except (OSError, ValueError):
            if self._offset is not None:
                self.lines.clear()
                self._offset, self._identity, self._partial = None, None, b""
            return tuple(self.lines)
        try:
            identity = (st.st_dev, st.st_ino)
            restart = self._offset is None or identity != self._identity or st.st_size < self._offset
            if not restart and st.st_size - self._offset > FIRST_READ_BYTES:
                restart = True              # a flood since the last read: only its end is shown
            skip_first = False
            if restart:
                self.lines.clear()
                self._partial = b""
                self._offset = max(0, st.st_size - FIRST_READ_BYTES)
                self._identity = identity
                skip_first = self._offset > 0     # the first line read is most likely cut
            if st.st_size > self._offset:
                data = os.pread(fd, min(st.st_size - self._offset, FIRST_READ_BYTES), self._offset)
                data = data[:self._late.usable(data, self._offset, mtime=st.st_mtime)]
                self._offset += len(data)
                lines = (self._partial + data).split(b"\n")
                self._partial = lines.pop()[-FIRST_READ_BYTES:]
                if skip_first and lines:
                    lines = lines[1:]
                self.seen += len(lines)
                for raw in lines[-TAIL_LINES:]:
                    self.lines.append(raw.decode("utf-8", "replace").rstrip("\r"))
        except OSError:
            pass
        finally:
            os.close(fd)
        return tuple(self.lines)
