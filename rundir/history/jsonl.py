"""Reading JSON Lines, the trainer's format: from the remembered offset to the last whole
line, a block of at most :data:`~.limits.BLOCK_BYTES` at a time, decoded in place."""

from __future__ import annotations

import numpy as np

from . import limits
from .blocks import find_newline, gc_paused, read_into, size_text
from .ingest import HistoryUpdate, Ingest


class JsonLinesReading(Ingest):
    """The JSON Lines part of :class:`~.reader.LossHistory`: ``_offset`` is where the next
    line starts, ``torn_tail`` the bytes after the last newline (not yet a line)."""

    _offset: int
    torn_tail: int

    def _read_lines(self, fd: int, size: int, update: HistoryUpdate) -> None:
        """Lines from the remembered offset to the end, a block of at most BLOCK_BYTES at a time."""
        pos = self._offset
        if self.torn_tail > limits.MAX_LINE_BYTES:      # an over-long line: only its end is looked for
            pos = self._skip_long_line(fd, pos, pos + self.torn_tail, size, update)
        buf: bytearray | None = None
        estimated = False
        with gc_paused():
            while 0 <= pos < size:
                want = min(limits.BLOCK_BYTES, size - pos)
                if buf is None or len(buf) < want + 1:
                    buf = None
                    buf = bytearray(want + 1)       # byte 0: room for the "[" before the first line
                got = read_into(fd, buf, 1, want, pos)
                last = buf.rfind(b"\n", 1, got + 1)
                if last < 0:
                    if got <= limits.MAX_LINE_BYTES:
                        break                       # the unfinished last line
                    pos = self._skip_long_line(fd, pos, pos + got, size, update)
                    continue
                lines = self._ingest_lines(buf, last, update)
                pos += last
                self._offset = pos
                if got < want or (pos + got - last >= size and got - last <= limits.MAX_LINE_BYTES):
                    break                           # the end (an unfinished line at most)
                if not estimated:
                    # About as many rows to come as the bytes left hold lines like these.
                    self._cols.reserve(self._cols.n + int((size - pos) * lines / last * 1.15) + 1024)
                    estimated = True
        self.torn_tail = max(0, size - self._offset)

    def _skip_long_line(self, fd: int, start: int, search_from: int, size: int, update: HistoryUpdate) -> int:
        """Step over the line at ``start``, longer than MAX_LINE_BYTES: where the next line
        starts, or -1 while its end is not written yet."""
        newline = find_newline(fd, search_from, size)
        if newline < 0:
            self._offset = start
            return -1
        self._lines += 1
        self._problem(update, f"{self.path.name} line {self._lines}: longer than "
                              f"{size_text(limits.MAX_LINE_BYTES)}: skipped")
        self._offset = newline + 1
        return newline + 1

    def _ingest_lines(self, buf: bytearray, last: int, update: HistoryUpdate) -> int:
        """The lines in ``buf[1:last + 1]`` (``last`` is a newline); their count.

        The newlines become commas in place, and the byte before a batch and its last
        newline become "[" and "]", so each batch decodes as one JSON array uncopied."""
        arr = np.frombuffer(buf, np.uint8, last + 1)
        ends = np.flatnonzero(arr == 10)
        arr[ends] = 0x2C
        del arr
        seps = np.empty(len(ends) + 1, np.int64)
        seps[0] = 0
        seps[1:] = ends
        self._ingest_elements(buf, memoryview(buf), seps, self._lines + 1, update, None)
        self._lines += len(ends)
        return len(ends)
