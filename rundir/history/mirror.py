"""A columnar mirror of ``.loss.json``, kept in a cache outside the run directory.

A long history costs a full parse on every open. The mirror is the incremental reader's
own state (:meth:`~.reader.LossHistory.state_dict`: its columns as raw little-endian
arrays, its offset, events and counts) written to a file in the user's cache, keyed by the
history's device and inode. Opening a run with a valid mirror maps the columns (no parse,
no copy: :meth:`~.reader.LossHistory.from_state_dict` keeps read-only arrays as they are)
and reads only the bytes appended since the mirror's offset.

Why a cache and not a file the trainer writes beside ``.loss.json``: it needs no change of
the contract (``.loss.json`` stays the only history), costs the trainer nothing, and serves
every history alike, another engine's or a generated one, from its second open on.

**Never trusted blindly.** A mirror is used only when the history is the same file (device
and inode), at least as long as the offset the mirror covers, and the same bytes there:
CRC-32s of its first and last blocks before that offset and of blocks spread between them
(all of it, for a history up to :data:`WHOLE_CHECK_BYTES`) must match, and a JSON array
(which another engine rewrites whole) must be unchanged since (size and mtime). Anything
else (a history rewritten, cut short, replaced; a mirror torn, foreign or of another
version) means the history is parsed again and the mirror rebuilt: :func:`open_history`
says why once, in its reason.
"""

from __future__ import annotations

import binascii
import json
import mmap
import os
import struct
from pathlib import Path
from typing import Any

import numpy as np

from ..atomic import atomic_write_chunks
from ..cache_dir import (CACHE_ENV, MIRROR_HEADER_LENGTH as _LENGTH, MIRROR_MAGIC as MAGIC, cache_dir, loads_header,
                         mirror_path)
from ..safe_read import open_regular
from .ingest import HistoryUpdate
from .reader import LossHistory

MIRROR_VERSION = 2                  # 2: the series columns (rundir/history/keys.py)
ALIGN = 64
# Histories shorter than this parse in well under a tenth of a second: no mirror.
MIN_MIRROR_BYTES = 4 << 20
# Up to this many covered bytes are checked whole; past it, SAMPLES blocks of SAMPLE_BYTES.
WHOLE_CHECK_BYTES = 256 << 10
SAMPLE_BYTES = 16 << 10
SAMPLES = 16
# A mirror is written again once this many more bytes have been read past its offset.
REWRITE_AFTER_BYTES = 4 << 20
# Each step column is written with room for this many more rows: the reader appends the
# steps written after the mirror into its private, copy-on-write mapping of them, where only
# the pages it writes become its own memory, instead of copying every column first. The
# first SPARE_WRITTEN bytes of that room are written zeros; the rest is a hole in the file
# (read as zeros, never written: a quarter of a 200k-step mirror's bytes). A reader's first
# write into a hole costs the file system a page as well, so the rows a reopened run
# appends first land on written ones (python -m bench mirror: 100 lines behind).
SPARE_ROWS = 1 << 16
SPARE_WRITTEN = 16 << 10
__all__ = ["CACHE_ENV", "NotSaved", "cache_dir", "forget_mirror", "mirror_path", "open_history", "open_mirror",
           "save_mirror"]


class NotSaved(str):
    """Why :func:`save_mirror` wrote no mirror (a str: the reason, for a message), and whether
    the cache could not be written (``cache_failed``: read-only, full) rather than the history
    having nothing to mirror or moving while it was read (the callers decide by it, not by words)."""

    cache_failed = False


def _cache_failed(reason: str) -> NotSaved:
    failed = NotSaved(reason)
    failed.cache_failed = True
    return failed


def _sample_spans(covered: int) -> list[tuple[int, int]]:
    """The ``(start, length)`` spans of the history whose CRCs identify its first ``covered``
    bytes: all of them when short, else the first and last blocks and blocks spread between."""
    if covered <= WHOLE_CHECK_BYTES:
        return [(0, covered)] if covered else []
    last = covered - SAMPLE_BYTES
    return sorted({(last * i // (SAMPLES - 1), SAMPLE_BYTES) for i in range(SAMPLES)})


def _identity(fd: int, covered: int) -> list[list[int]] | None:
    """``[[start, length, crc32], ...]`` of the sampled spans; None when the file is shorter."""
    spans = []
    for start, length in _sample_spans(covered):
        data = os.pread(fd, length, start)
        if len(data) != length:
            return None
        spans.append([start, length, binascii.crc32(data)])
    return spans


def save_mirror(history: LossHistory) -> NotSaved | None:
    """Write ``history``'s mirror (atomically, replacing an older one); None, or why not."""
    if history.error is not None or history.format is None or history._identity is None:
        return NotSaved("nothing to mirror")
    meta, columns = history.state_dict()
    try:
        fd, st = open_regular(history.path)
    except (OSError, ValueError) as err:
        return NotSaved(f"{history.path.name}: {err}")
    try:
        if (st.st_dev, st.st_ino) != tuple(history._identity):
            return NotSaved(f"{history.path.name} was replaced while it was read")
        covered = meta["offset"] if history.format == "jsonl" else st.st_size
        samples = _identity(fd, covered)
    finally:
        os.close(fd)
    if samples is None:
        return NotSaved(f"{history.path.name} was cut short while it was read")
    rows = len(columns["step"])
    spare = {name: SPARE_ROWS if not name.startswith("superseded.") else 0 for name in columns}
    layout, position = [], 0
    for name, arr in columns.items():
        layout.append([name, arr.dtype.newbyteorder("<").str, len(arr) + spare[name], position])
        position += -(-(len(arr) + spare[name]) * arr.itemsize // ALIGN) * ALIGN
    header = json.dumps({"version": MIRROR_VERSION, "source": {
        "dev": st.st_dev, "ino": st.st_ino, "covered": covered, "samples": samples,
        "array_stamp": [st.st_mtime_ns, st.st_size] if history.format == "array" else None},
        "meta": {**meta, "rows": rows}, "columns": layout}).encode()
    start = -(-(len(MAGIC) + _LENGTH.size + len(header)) // ALIGN) * ALIGN

    def chunks():
        yield MAGIC + _LENGTH.pack(len(header)) + header
        yield start - len(MAGIC) - _LENGTH.size - len(header)      # zeros, as a hole
        for name, arr in columns.items():
            little = np.ascontiguousarray(arr, arr.dtype.newbyteorder("<"))
            yield memoryview(little).cast("B")
            room = spare[name] * arr.itemsize + -(little.nbytes + spare[name] * arr.itemsize) % ALIGN
            yield bytes(min(room, SPARE_WRITTEN))
            yield max(0, room - SPARE_WRITTEN)                        # the rest: a hole

    try:
        target = mirror_path(history.path)
        target.parent.mkdir(parents=True, exist_ok=True)
        # Durable: a mirror renamed into place before its columns reached the disk would,
        # after a crash, pass every check (they read the history, not the columns).
        atomic_write_chunks(target, chunks())
    except OSError as err:
        return _cache_failed(f"cannot write the history's mirror in {cache_dir()}: {err.strerror or err}")
    return None


def open_mirror(path: str | os.PathLike[str]) -> tuple[LossHistory | None, str | None, dict[str, Any] | None]:
    """The reader of the history at ``path`` as its valid mirror left it (``refresh`` it to
    read what was appended since), no reason and the mirror's ``source`` (what the history
    was when it was written: the spike scans kept beside it are keyed by it); or ``(None,
    why the mirror is not used, None)``. Never raises."""
    path = Path(path)
    try:
        fd, st = open_regular(path)
    except (OSError, ValueError):
        return None, None, None                   # no history to mirror: the reader says why
    try:
        try:
            with open(mirror_path(path), "rb") as fh:
                mapped = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_COPY)     # private: writes stay ours
        except (OSError, ValueError):
            return None, None, None               # no mirror yet (or an empty file)
        try:
            return _from_mapping(path, fd, st, mapped)
        except (ValueError, KeyError, TypeError, IndexError, OSError, struct.error) as err:
            return None, f"the history's mirror is unreadable ({type(err).__name__}): parsed again", None
    finally:
        os.close(fd)


def _from_mapping(path: Path, fd: int, st: os.stat_result, mapped: mmap.mmap
                  ) -> tuple[LossHistory | None, str | None, dict[str, Any] | None]:
    if mapped[:len(MAGIC)] != MAGIC:
        return None, "the history's mirror is not one: parsed again", None
    (length,) = _LENGTH.unpack_from(mapped, len(MAGIC))
    head = len(MAGIC) + _LENGTH.size
    header = loads_header(mapped[head:head + length])
    source = header["source"]
    if header["version"] != MIRROR_VERSION:
        return None, f"the history's mirror is of version {header['version']!r}: parsed again", None
    if (source["dev"], source["ino"]) != (st.st_dev, st.st_ino):
        return None, f"{path.name} is another file than its mirror's: parsed again", None
    if source["array_stamp"] is not None and source["array_stamp"] != [st.st_mtime_ns, st.st_size]:
        return None, f"{path.name} (a JSON array) was rewritten since its mirror: parsed again", None
    covered = int(source["covered"])
    if st.st_size < covered:
        return None, f"{path.name} is shorter than its mirror covers: parsed again", None
    if _identity(fd, covered) != source["samples"]:
        return None, f"{path.name} is not the history its mirror was made of: parsed again", None
    data_start = -(-(head + length) // ALIGN) * ALIGN
    columns: dict[str, Any] = {}
    for name, dtype, count, offset in header["columns"]:
        dtype = np.dtype(dtype)
        at = data_start + int(offset)
        if at + dtype.itemsize * int(count) > len(mapped):
            return None, "the history's mirror is short: parsed again", None
        columns[name] = np.frombuffer(mapped, dtype, int(count), at)
    return LossHistory.from_state_dict(header["meta"], columns, adopt=True), None, source


def as_read(history: LossHistory) -> HistoryUpdate:
    """What a refresh that read the whole of ``history`` from the start reports (its first
    problems as the reader kept them)."""
    return HistoryUpdate(history.rows_read, list(history.events), list(history.problems), history.nonfinite,
                         history.rewind_count > 0, False, history.bad_lines,
                         min((step for step, _ in history.rewinds), default=None))


def forget_mirror(path: Path) -> None:
    """Remove the mirror of the history at ``path``, if there is one."""
    try:
        mirror_path(path).unlink()
    except OSError:
        pass


def open_history(path: str | os.PathLike[str], min_bytes: int = MIN_MIRROR_BYTES
                 ) -> tuple[LossHistory, HistoryUpdate, str | None]:
    """The history at ``path`` read up to its end: from its mirror when one is valid, else
    parsed. Returns ``(history, the update of the whole read, as if it had been parsed, why a
    mirror there was not used (None: it was, or there was none))``. The mirror is written
    (again) when the history is at least ``min_bytes`` long and it had none, was replaced or
    cut short, or has grown by :data:`REWRITE_AFTER_BYTES` since. Never raises."""
    history, why, _ = open_mirror(path)
    mirrored_to = history._offset if history is not None else None
    if history is None:
        history = LossHistory(path)
        if why is not None:
            forget_mirror(history.path)           # refused once: not checked (and said) again
        update = history.refresh()
    else:
        update = as_read(history).then(history.refresh())
    try:
        size = os.stat(history.path).st_size
    except OSError:
        size = 0
    if history.error is None and size >= min_bytes and (
            mirrored_to is None or update.reset or history._offset - mirrored_to >= REWRITE_AFTER_BYTES):
        save_mirror(history)
    return history, update, why
