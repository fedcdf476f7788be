"""The structure of a JSON array read in blocks: where its elements begin and end.

Another engine's history is one JSON array, rewritten whole. The array reader decodes it
in pieces cut where one object ends and the next begins; when a piece does not decode,
the exact structure of the stretch (strings and escapes respected, vectorised with
numpy) gives each element's bounds, and after junk a new start is searched for: a ","
that an object or array follows, whose element is whole, readable JSON.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

import numpy as np

from . import limits
from .blocks import SCAN_BYTES, scan
from .records import BadLine, parse_line

_WS = b" \t\r\n"
# Where one object ends and the next begins: the fast path's cuts (checked by the decode).
_BOUNDARY = re.compile(rb"\}[ \t\r\n]*(,)[ \t\r\n]*\{")
# Where an object or array begins after a comma: a new start after junk.
_RESYNC = re.compile(rb"(,)[ \t\r\n]*[{\[]")


def find_resync(fd: int, pos: int, size: int) -> int:
    """The offset of the next "," where an object or array ends and another begins, at
    or after ``pos``; -1 if none."""
    def find(chunk: bytes) -> int:
        found = _RESYNC.search(chunk)
        return found.start(1) if found is not None else -1
    return scan(fd, pos, size, find, overlap=256)


def resync(buf: bytearray, start: int, limit: int, at_eof: bool, tries: int = 64) -> int:
    """After junk in a JSON array: the first "," at or after ``start`` that an object or
    array follows, and the element after it is whole, readable JSON (or runs past the
    end of a block that is not the file's last); -1 if none."""
    pos = start
    for _ in range(tries):
        found = _RESYNC.search(buf, pos, limit)
        if found is None:
            return -1
        comma = found.start(1)
        window = min(limit, comma + 1 + (64 << 10))
        commas, closed, _, _ = array_separators(buf, comma, window)
        end = commas[0] if commas else closed
        if end < 0 and window == limit and not at_eof:
            return comma                # the element goes on in the next block
        if end > 0 and not isinstance(parse_line(bytes(buf[comma + 1:end])), BadLine):
            return comma
        pos = comma + 1
    return -1


def closing_bracket(buf: bytearray, end: int) -> int:
    """The offset of the "]" that ends ``buf[:end]`` (past trailing whitespace), or -1."""
    j = end - 1
    while j > 0 and buf[j] in _WS:
        j -= 1
    return j if j > 0 and buf[j] == 0x5D else -1


def has_content(buf: bytearray, start: int, end: int) -> bool:
    return bool(bytes(buf[start:end]).strip()) if start < end else False


def piece_end(buf: bytearray, cur: int, end: int, close: int) -> int:
    """The "," (or the closing "]") ending a piece of about ARRAY_PIECE_BYTES from ``cur``,
    cut where an object ends and the next begins; -1 if none in ``buf[cur:end]``."""
    target = cur + limits.ARRAY_PIECE_BYTES
    stop = close if close >= 0 else end
    if target < stop:
        found = _BOUNDARY.search(buf, target, stop)
        if found is not None:
            return found.start(1)
    if close >= 0:
        return close
    k = end                 # the last cut before the end
    for _ in range(64):
        k = buf.rfind(b"}", cur + 1, k)
        if k < 0:
            return -1
        found = _BOUNDARY.match(buf, k, end)
        if found is not None:
            return found.start(1)
    return -1


# Structural bytes: +1 opens, -1 closes, 2 is a comma.
_STRUCTURE = np.zeros(256, np.int8)
_STRUCTURE[[ord("["), ord("{")]] = 1
_STRUCTURE[[ord("]"), ord("}")]] = -1
_STRUCTURE[ord(",")] = 2


def _structure(w: np.ndarray, depth: int = 0, in_string: int = 0, backslashes: int = 0
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple[int, int, int]]:
    """The structural bytes of ``w`` outside strings (escaped quotes skipped): their
    offsets, kinds (1 opens, -1 closes, 2 a comma) and the depth after each, starting
    from a state (depth, inside a string, backslashes just before) that is returned for
    the bytes after ``w``."""
    quotes = np.flatnonzero(w == 0x22)
    if len(quotes):
        after_backslash = quotes[quotes > 0]
        after_backslash = after_backslash[w[after_backslash - 1] == 0x5C].tolist()
        if quotes[0] == 0 and backslashes:
            after_backslash.insert(0, 0)
        escaped = [q for q in after_backslash if _odd_backslashes(w, q, backslashes)]
        if escaped:
            quotes = np.setdiff1d(quotes, escaped, assume_unique=True)
    kinds = _STRUCTURE[w]
    marks = np.flatnonzero(kinds)
    if len(quotes):
        marks = marks[((np.searchsorted(quotes, marks) + in_string) & 1) == 0]   # outside strings
    kinds = kinds[marks]
    depths = depth + np.cumsum(np.where(kinds == 2, 0, kinds), dtype=np.int64)
    trailing = len(w) - len(bytes(w[-64:]).rstrip(b"\\")) if len(w) else 0
    state = (int(depths[-1]) if len(depths) else depth, (in_string + len(quotes)) & 1,
             trailing + (backslashes if trailing == len(w) else 0))
    return marks, kinds, depths, state


def array_separators(buf: bytearray, at: int, end: int) -> tuple[list[int], int, bool, bool]:
    """The exact structure of a JSON array's elements from the separator at ``at`` up
    to ``end``: the offsets of the commas between elements, of the "]" that closes the
    array if it closes before ``end`` (else -1), whether a "}" with no element open
    stopped the scan (broken structure), and whether ``end`` is inside a string."""
    lo = at + 1
    w = np.frombuffer(buf, np.uint8, end - lo, lo)
    marks, kinds, depth, (_, in_string, _) = _structure(w)
    closed, broken = -1, False
    below = np.flatnonzero(depth < 0)
    if len(below):
        k = int(below[0])
        if w[marks[k]] == 0x5D:
            closed = lo + int(marks[k])
        else:
            broken = True
        marks, kinds, depth = marks[:k], kinds[:k], depth[:k]
    commas = marks[(kinds == 2) & (depth == 0)] + lo
    return commas.tolist(), closed, broken, closed < 0 and not broken and bool(in_string)


def skip_element(fd: int, pos: int, size: int) -> tuple[int, str]:
    """From the first byte of a JSON array's element at file offset ``pos``, its end:
    the offset of the "," or "]" after it and which one; or -1 and "torn" (the file ends
    first) or "broken" (a "}" closes what was not open)."""
    state = (0, 0, 0)
    while pos < size:
        chunk = os.pread(fd, min(SCAN_BYTES, size - pos), pos)
        if not chunk:
            break
        w = np.frombuffer(chunk, np.uint8)
        marks, kinds, depth, state = _structure(w, *state)
        ends = np.flatnonzero(((kinds == 2) & (depth == 0)) | (depth < 0))
        if len(ends):
            at = int(marks[ends[0]])
            if depth[ends[0]] < 0 and w[at] != 0x5D:
                return -1, "broken"
            return pos + at, chr(w[at])
        pos += len(chunk)
    return -1, "torn"


def _odd_backslashes(w: np.ndarray, q: int, before: int = 0) -> bool:
    """Whether the quote at ``w[q]`` is escaped: an odd run of backslashes before it
    (``before`` more of them just before ``w``)."""
    n = 0
    while q - n - 1 >= 0 and w[q - n - 1] == 0x5C:
        n += 1
    if n == q:
        n += before
    return n % 2 == 1


def event_separators(buf: bytearray, at: int, lo: int, hi: int) -> tuple[int, int] | None:
    """The separators ("[" or "," before, "," or "]" after) around the top-level element of
    the JSON array piece ``buf[lo:hi + 1]`` whose text holds offset ``at`` (an ``"event"``
    key); None when there is no such element within reach."""
    element = _element_around(buf, at, _JSON)
    if element is None:
        return None
    _, start, end = element
    before, after = start - 1, end
    while before > lo and buf[before] in _WS:
        before -= 1
    while after < hi and buf[after] in _WS:
        after += 1
    if before < lo or after > hi or buf[before] not in b"[," or buf[after] not in b",]":
        return None
    return before, after


_JSON = json.JSONDecoder()


def _element_around(data: bytes | bytearray, at: int, decoder: json.JSONDecoder,
                    window: int = 1 << 14) -> tuple[dict[str, Any], int, int] | None:
    """The top-level array element (an object) whose text contains offset ``at``, as
    ``(object, start, end)``; None if there is none within reach (an element longer than
    ``window`` bytes is not: the caller then splits the array)."""
    start = at
    for _ in range(16):             # the element's "{" is the nearest one, or one before a nested object
        start = data.rfind(b"{", 0, start)
        if start < 0:
            return None
        # Latin-1 maps each byte to one character, so offsets stay byte offsets; only the
        # structure and the ASCII "event"/"step" values are looked at here.
        try:
            record, length = decoder.raw_decode(data[start:start + window].decode("latin-1"))
        except (ValueError, RecursionError):
            continue
        end = start + length
        if end <= at:
            continue                    # a nested object before the key, or an earlier element
        if isinstance(record, dict) and _next_byte(data, start, -1) in (0x5B, 0x2C) \
                and _next_byte(data, end - 1, 1) in (0x2C, 0x5D):          # "[" or "," before, "," or "]" after
            return record, start, end
    return None


def _next_byte(data: bytes | bytearray, i: int, direction: int) -> int:
    """The first byte after (``direction`` 1) or before (-1) offset ``i`` that is not
    JSON whitespace; -1 at either end."""
    i += direction
    while 0 <= i < len(data):
        if data[i] not in b" \t\r\n":
            return data[i]
        i += direction
    return -1


