"""Where the console's cache is, and a look at a history mirror's header, without numpy.

The history's columnar mirror (:mod:`console.read.mirror_file`) lives here; the console's
start-up reads a mirror's header before it forks (:mod:`console.prefetch`), when nothing
but the standard library has been imported yet, so the paths and the header's framing are
spelled here, once, for both.

A cache file is data from elsewhere, like a run's files: the cache may sit on a home
directory that other hosts share, and anything may have been put there. Every cache file is
opened without following a symlink and without blocking, regular files only
(:func:`open_cache_file`), read bounded, and a mirror's header carries its own CRC-32: a
header torn, half-written or changed by hand is refused before a field of it is looked at.
"""

from __future__ import annotations

import binascii
import json
import os
import struct
from pathlib import Path
from typing import Any

from rundir.safe_read import open_checked

CACHE_ENV = "ANDREA_CACHE_DIR"
# Version 3 of the framing: the header's length and its CRC-32 after the magic.
MIRROR_MAGIC = b"andrea-history-mirror 3\n"
OLDER_MIRROR_MAGIC = b"andrea-history-mirror\n"
MIRROR_HEADER_LENGTH = struct.Struct("<QI")
# A header longer than this is no header of ours (it holds the reader's state: events and
# a few problems, bounded by the reader's limits).
MAX_HEADER_BYTES = 64 << 20
def open_cache_file(path: str | os.PathLike[str]) -> tuple[int, os.stat_result]:
    """Open a cache file read-only as a run file is (:func:`~rundir.safe_read.open_checked`):
    never through a symlink (ELOOP), never blocking on a FIFO, and only a regular file
    (``ValueError`` otherwise). The fd and its stat; the caller closes it."""
    try:
        return open_checked(path)
    except ValueError:
        raise ValueError(f"{Path(path).name} in the cache is not a regular file") from None


def read_cache_file(path: str | os.PathLike[str], max_bytes: int) -> bytes:
    """The whole of a cache file of at most ``max_bytes`` (:func:`open_cache_file`'s checks);
    ``ValueError`` when it is larger, ``OSError`` when it cannot be read."""
    fd, st = open_cache_file(path)
    try:
        if st.st_size > max_bytes:
            raise ValueError(f"{Path(path).name} in the cache is larger than {max_bytes} bytes")
        data = os.pread(fd, max_bytes + 1, 0)
        if len(data) > max_bytes:
            raise ValueError(f"{Path(path).name} in the cache grew past {max_bytes} bytes")
        return data
    finally:
        os.close(fd)


def frame_header(header: bytes) -> bytes:
    """A mirror's first bytes: the magic, the header's length and CRC-32, the header."""
    return MIRROR_MAGIC + MIRROR_HEADER_LENGTH.pack(len(header), binascii.crc32(header)) + header


def header_bytes(read_at) -> bytes:
    """The header of a mirror whose bytes ``read_at(offset, length)`` reads, its CRC checked;
    ``ValueError`` naming what is wrong."""
    head = read_at(0, len(MIRROR_MAGIC) + MIRROR_HEADER_LENGTH.size)
    if not head.startswith(MIRROR_MAGIC):
        raise ValueError("of an older version" if head.startswith(OLDER_MIRROR_MAGIC) else "not a mirror")
    if len(head) != len(MIRROR_MAGIC) + MIRROR_HEADER_LENGTH.size:
        raise ValueError("torn")
    length, crc = MIRROR_HEADER_LENGTH.unpack_from(head, len(MIRROR_MAGIC))
    if length > MAX_HEADER_BYTES:
        raise ValueError("a header too long")
    header = read_at(len(head), length)
    if len(header) != length or binascii.crc32(header) != crc:
        raise ValueError("a header torn or changed")
    return header


def loads_header(data: bytes | memoryview) -> Any:
    """A mirror's (or a hand-over's) JSON header: orjson's parse, several times faster than
    the standard library's on a header of thousands of events, and the standard library's
    for one that holds NaN or an infinity (``json.dumps`` writes them; orjson refuses them).
    orjson is imported at first use: the start-up forks before it is needed."""
    import orjson

    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        pass
    try:
        return json.loads(bytes(data))
    except RecursionError:                 # nested past the interpreter's limit (orjson stops at 1,024)
        raise ValueError("JSON nested too deep") from None


def cache_dir() -> Path:
    """Where mirrors are kept: ``$ANDREA_CACHE_DIR``, else ``$XDG_CACHE_HOME/andrea-console``,
    else ``~/.cache/andrea-console``."""
    explicit = os.environ.get(CACHE_ENV)
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "andrea-console"


def mirror_path(history_path: Path) -> Path:
    """Where the mirror of the history at ``history_path`` is kept: by its run directory's
    device and inode (a run renamed or reached by another path keeps its mirror; a history
    replaced in it finds the old one, refuses it and writes its own over it)."""
    st = os.stat(history_path.parent)
    return cache_dir() / "history" / f"{st.st_dev:x}-{st.st_ino:x}-{history_path.name}.mirror"


def mirror_source(history_path: Path) -> dict[str, Any] | None:
    """The ``source`` of the mirror of ``history_path`` as its header says (``dev``, ``ino``,
    ``covered``: the history's bytes it holds, ...), or None when there is none or it cannot
    be read. Not a check: :func:`console.read.mirror_file.open_mirror` checks the bytes."""
    try:
        fd, _ = open_cache_file(mirror_path(history_path))
        try:
            source = loads_header(header_bytes(lambda at, n: os.pread(fd, n, at)))["source"]
        finally:
            os.close(fd)
        return source if isinstance(source, dict) else None
    except (OSError, ValueError, KeyError, TypeError):
        return None
