"""Reading a JSON array, another engine's format: the whole array each time it changes
(it is rewritten, not appended to), a block at a time, in pieces decoded typed, with the
careful path and the resync of :mod:`.array_scan` where a piece does not decode."""

from __future__ import annotations

import os
from typing import Callable

import numpy as np

from . import limits
from .array_scan import (
    array_separators,
    closing_bracket,
    event_separators,
    find_resync,
    has_content,
    piece_end,
    resync,
    skip_element,
)
from .blocks import gc_paused, read_into, size_text
from .ingest import Careful, HistoryUpdate, Ingest
from .records import careful_batch, parse_line


class JsonArrayReading(Ingest):
    """The JSON-array part of :class:`~.reader.LossHistory`."""

    _identity: tuple[int, int] | None
    _reset_state: Callable[[], None]        # the reader's: back to an empty history

    def _read_array(self, fd: int, size: int, update: HistoryUpdate) -> None:
        """The whole array (another engine rewrites it), a block at a time."""
        if self._cols.n or self.events or self.bad_lines:
            identity = self._identity
            self._reset_state()
            self._identity, self.format = identity, "array"
            update.reset = True
        pos = os.pread(fd, 64 << 10, 0).find(b"[")  # where the format was told: after whitespace only
        number = 1
        buf: bytearray | None = None
        with gc_paused():
            while 0 <= pos < size:
                want = min(limits.BLOCK_BYTES, size - pos)
                if buf is None or len(buf) < want:
                    buf = None
                    buf = bytearray(want)
                got = read_into(fd, buf, 0, want, pos)
                if not got:
                    break
                at_eof = pos + got >= size
                close = closing_bracket(buf, got) if at_eof else -1
                cur, number, state = self._array_block(buf, got, close, at_eof, number, update)
                if state == "done":
                    break
                if state == "more":
                    pos += cur
                elif state == "long":
                    pos, number = self._long_element(fd, pos + cur + 1, size, number, update)
                else:                                # junk past this block: find the next element
                    pos = find_resync(fd, pos + cur + 1, size)

    def _long_element(self, fd: int, start: int, size: int, number: int, update: HistoryUpdate) -> tuple[int, int]:
        """The array element at ``start`` that goes on past a scan: followed through the
        file to its end, read if short enough, else counted. Where to go on (-1: the end)."""
        end, after = skip_element(fd, start, size)
        where = f"{self.path.name} element {number}"
        if end < 0:         # torn at the end, or junk that opens more than it closes: start again after it
            self._problem(update, f"{where}: " + ("torn or invalid element at the end of the JSON array"
                                                  if after == "torn" else "not readable JSON: skipped"))
            return find_resync(fd, start, size), number + 1
        if end - start <= limits.MAX_LINE_BYTES:
            record = parse_line(os.pread(fd, end - start, start))
            self._add_batch(careful_batch([record], number, self.keys), update)
        else:
            self._problem(update, f"{where}: longer than {size_text(limits.MAX_LINE_BYTES)}: skipped")
        return (-1 if after == "]" else end), number + 1

    def _array_block(self, buf: bytearray, end: int, close: int, at_eof: bool, number: int,
                     update: HistoryUpdate) -> tuple[int, int, str]:
        """The elements of ``buf[:end]``, which starts at a separator ("[" or ","): the
        offset of the separator to read on from, the next element's number, and "done",
        "more" (read on from there) or "lost" (no next element in this block)."""
        view = memoryview(buf)
        limit = close + 1 if close >= 0 else end
        cur = 0
        while True:
            if cur == close:
                return cur, number, "done"
            b = piece_end(buf, cur, end, close)
            if 0 < b - cur <= min(2 * limits.ARRAY_PIECE_BYTES, limits.MAX_LINE_BYTES):
                buf[cur], buf[b] = 0x5B, 0x5D

                def event_at(offset: int, lo: int = cur, hi: int = b) -> tuple[int, int] | None:
                    return event_separators(buf, offset, lo, hi)

                n = self._typed_block(buf, cur, b, number, update, None, event_at)
                if n >= 0:
                    number, cur = number + n, b
                    continue
                if b != close:
                    buf[b] = 0x2C                   # "," again, for the scan below
            elif b < 0 and cur > 0 and not at_eof:
                return cur, number, "more"
            # The careful path: the exact structure of the next stretch.
            scan_to = min(limit, cur + 1 + limits.MAX_LINE_BYTES + 2 * limits.ARRAY_PIECE_BYTES)
            commas, closed, broken, in_string = array_separators(buf, cur, scan_to)
            seps = np.array([cur, *commas, *([closed] if closed >= 0 else [])], np.int64)
            if len(seps) > 1:
                stop = self._ingest_elements(buf, view, seps, number, update, Careful())
                if stop is None:
                    number += len(seps) - 1
                    cur = int(seps[-1])
                    if closed >= 0:
                        if has_content(buf, closed + 1, end):
                            self._problem(update, f"{self.path.name}: data after the end of the JSON array: ignored")
                        return cur, number, "done"
                    continue
                # Two elements in a row unparsable: the scan lost its way (a stray quote in
                # junk). The first is counted; look for a new start inside it, in the
                # bytes as they were (the batches' "[" and "]" made commas again).
                if commas:
                    np.frombuffer(buf, np.uint8)[commas] = 0x2C
                number += stop
                resync_from = int(seps[stop - 1]) + 1
                found = resync(buf, resync_from, limit, at_eof)
                # The elements skipped from the second one on: as many as the scan saw if it
                # saw right (unreadable elements in a row), else one.
                m = int(np.searchsorted(seps, found)) if found >= 0 else len(seps) - 1
                skipped = m - stop if found < 0 or (m < len(seps) and seps[m] == found) else max(1, m - stop)
                for _ in range(max(0, skipped)):
                    self._problem(update, f"{self.path.name} element {number}: not readable JSON: skipped")
                    number += 1
            elif scan_to == limit and not at_eof and cur > 0 and not broken:
                return cur, number, "more"          # the element goes on in the next block
            elif not broken and ((not in_string and scan_to < limit) or (cur == 0 and not at_eof)):
                return cur, number, "long"          # an element that goes on past the scan: followed to its end
            else:
                # No element ends here: junk (not even delimited) or a torn end. It is
                # counted; the next one starts after a comma, with an object or array.
                resync_from = cur + 1
                found = resync(buf, resync_from, limit, at_eof)
                if found < 0 and at_eof:
                    if has_content(buf, cur + 1, limit):
                        self._problem(update, f"{self.path.name} element {number}: torn or invalid element at the "
                                              "end of the JSON array")
                    return cur, number, "done"
                self._problem(update, f"{self.path.name} element {number}: not readable JSON: skipped")
                number += 1
            if found < 0:
                return resync_from - 1, number, "done" if at_eof else "lost"
            cur = found

