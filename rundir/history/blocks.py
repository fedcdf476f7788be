"""Reading a history file in bounded blocks: what both formats' readers share.

Reads go by ``pread`` into buffers the caller owns; a search for a byte pattern reads
bounded chunks and jumps the holes of a sparse file. Nothing here parses a line.
"""

from __future__ import annotations

import errno
import gc
import os
from typing import Callable

from ..text import counted

SCAN_BYTES = 1 << 20            # the chunk of a search for a newline or an element's end


def detect_format(head: bytes) -> str | None:
    """"array" for a file that is one JSON array, "jsonl" for JSON Lines (whose first
    line may itself be an array: a line that ends with "]" and more lines after it),
    None while only whitespace is written."""
    head = head.lstrip()
    if not head:
        return None
    if head[:1] != b"[":
        return "jsonl"
    first, newline, rest = head.partition(b"\n")
    return "jsonl" if newline and first.rstrip().endswith(b"]") and rest.strip() else "array"


def size_text(n: int) -> str:
    """A byte count for a message: "1 MiB", "64 KiB", "200 bytes"."""
    return f"{n / (1 << 20):g} MiB" if n >= 1 << 20 else f"{n / (1 << 10):g} KiB" if n >= 1 << 10 \
        else counted(n, "byte")


class gc_paused:
    """Pause the cyclic GC while short-lived, acyclic parse results exist: it has nothing
    to find in them and would otherwise rescan them thousands of times."""

    def __enter__(self) -> None:
        self._was_enabled = gc.isenabled()
        gc.disable()

    def __exit__(self, *exc: object) -> None:
        if self._was_enabled:
            gc.enable()


def read_into(fd: int, buf: bytearray, at: int, want: int, pos: int) -> int:
    """Read ``want`` bytes at file offset ``pos`` into ``buf[at:]``; how many were read."""
    view = memoryview(buf)[at:at + want]
    got = 0
    while got < want:
        if hasattr(os, "preadv"):
            n = os.preadv(fd, [view[got:]], pos + got)
        else:                           # pragma: no cover (no preadv on this system)
            chunk = os.pread(fd, want - got, pos + got)
            n = len(chunk)
            view[got:got + n] = chunk
        if n <= 0:
            break
        got += n
    return got


def _next_data(fd: int, pos: int) -> int:
    """The first offset at or after ``pos`` that is not in a hole of a sparse file (a
    hole reads as zeros: nothing to find there); -1 if only a hole is left."""
    if not hasattr(os, "SEEK_DATA"):   # pragma: no cover
        return pos
    try:
        return os.lseek(fd, pos, os.SEEK_DATA)
    except OSError as err:
        return -1 if err.errno == errno.ENXIO else pos


def scan(fd: int, pos: int, size: int, find: Callable[[bytes], int], overlap: int = 0) -> int:
    """The offset of the first match of ``find`` (an index into a chunk, or -1) at or after
    ``pos`` (before ``size``), reading bounded chunks and jumping sparse holes; -1 if none.
    ``overlap`` bytes are read again across chunks, for matches longer than one byte."""
    while pos < size:
        pos = _next_data(fd, pos)
        if pos < 0 or pos >= size:
            return -1
        chunk = os.pread(fd, min(SCAN_BYTES, size - pos), pos)
        if not chunk:
            return -1
        i = find(chunk)
        if i >= 0:
            return pos + i
        if pos + len(chunk) >= size:
            return -1
        pos += max(1, len(chunk) - overlap)
    return -1


def find_newline(fd: int, pos: int, size: int) -> int:
    """The offset of the first newline at or after ``pos`` (before ``size``), or -1."""
    return scan(fd, pos, size, lambda chunk: chunk.find(b"\n"))
