"""Bytes that are not written yet: NUL bytes at the end of a file another host appends to.

An NFS (or Lustre, CephFS...) client can see a file's new size before its new bytes: the
writer's pages reach the server out of order, and for a moment the end of the file reads
as NUL bytes; then the real bytes appear at the same offsets. A reader that took the NULs
as a torn line and moved past them would lose the lines written there for good.

So an incremental reader takes the bytes it read only up to the first NUL byte, and reads
that offset again later. NULs that stay at one offset for :data:`GRACE_S` are no late
write but a real hole (a crash after delayed allocation leaves one): from then on they are
taken as they are, which makes them one unreadable line, counted, as a torn line is. So
are NULs in a file that nothing has written to for as long (its mtime is that old): no
write is in flight that could still fill them, and a history opened long after a crash
shows at once.
"""

from __future__ import annotations

import time
from typing import Callable

# How long NUL bytes at one offset are awaited before they are taken as they are. A late
# write on a network filesystem lands within a second or two; this is generous.
GRACE_S = 10.0


class LateBytes:
    """Where a reader's file reads as NUL bytes, and since when (one offset at a time)."""

    def __init__(self, grace_s: float | None = None, clock: Callable[[], float] = time.monotonic):
        self.grace_s = GRACE_S if grace_s is None else grace_s      # the module's, as it is now (tests shrink it)
        self.clock = clock
        self.offset: int | None = None        # the file offset of the NUL awaited, if any
        self._since = 0.0
        self._hole: int | None = None         # the offset of NULs waited for in vain: taken at once

    @property
    def awaited(self) -> bool:
        """Whether the last read stopped before NUL bytes it still awaits."""
        return self.offset is not None

    def usable(self, data: bytes | bytearray, file_offset: int, start: int = 0, end: int | None = None,
               mtime: float | None = None) -> int:
        """How many bytes of ``data[start:end]`` (read at ``file_offset`` for ``data[start]``)
        may be taken now: all of them, or those before the first NUL byte still within its
        grace. A NUL past its grace is taken with the rest of its line (up to the next newline),
        and the search goes on after it. ``mtime``: the file's; one older than the grace takes
        every NUL at once."""
        end = len(data) if end is None else end
        if mtime is not None and time.time() - mtime >= self.grace_s:
            self.offset = None
            return end - start
        at = start
        while True:
            nul = data.find(0, at, end)
            if nul < 0:
                self.offset = None
                return end - start
            if not self._overdue(file_offset + nul - start):
                return nul - start
            newline = data.find(10, nul, end)
            if newline < 0:
                self.offset = None
                return end - start
            at = newline + 1

    def _overdue(self, offset: int) -> bool:
        if offset == self._hole or self.grace_s <= 0:
            return True
        now = self.clock()
        if self.offset != offset:
            self.offset, self._since = offset, now
            return False
        if now - self._since < self.grace_s:
            return False
        self._hole, self.offset = offset, None
        return True
