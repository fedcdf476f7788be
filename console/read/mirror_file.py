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
and inode, and the path it was made of), at least as long as the offset the mirror covers,
and the same bytes there: CRC-32s of its first and last blocks before that offset and of
blocks spread between them (all of it, for a history up to :data:`WHOLE_CHECK_BYTES`) must
match, and a JSON array (which another engine rewrites whole) must be unchanged since (size
and mtime). Anything else (a history rewritten, cut short, replaced; a mirror torn, foreign
or of another version, or a header that fails its CRC or its schema: :mod:`.mirror_header`)
means the history is parsed again and the mirror rebuilt: :func:`open_history` says why
once, in its reason. The sampled blocks cannot see a change between them; the header also
holds the CRC-32 of every byte the mirror covers, which :func:`verify_covered` checks in full
(the console does it in the background after its first frame, and re-reads on a mismatch).

**On a shared filesystem** (NFS, Lustre, a FUSE mount...: :mod:`rundir.filesystems`) a
mirror is read into memory, never mapped: a mapping of a file that another host replaces or
truncates can raise SIGBUS or ESTALE.
"""

from __future__ import annotations

import binascii
import errno
import json
import mmap
import os
import struct
import threading
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from rundir.atomic import atomic_write_chunks
from rundir.filesystems import filesystem_of
from rundir.history.ingest import HistoryUpdate
from rundir.history.reader import LossHistory
from rundir.layout import TMP_PREFIX
from rundir.safe_read import open_regular

from .cache_dir import CACHE_ENV, cache_dir, frame_header, header_bytes, loads_header, mirror_path, open_cache_file
from .cache_dir import MIRROR_HEADER_LENGTH as _LENGTH
from .cache_dir import MIRROR_MAGIC as MAGIC
from .mirror_header import checked_header, columns_end

# 2: the series columns (rundir/history/keys.py); 3: the header's own CRC-32, and the CRC-32
# of all the bytes covered (``source.crc``).
MIRROR_VERSION = 3
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
CRC_CHUNK = 1 << 20                 # the whole CRC reads the history a chunk at a time
# In a thread beside other work (the parse of a first open, the dashboard after its first
# frame), larger chunks: each takes the GIL back once, which makes the other thread let go of
# it and wait for this one (a chunk of 1 MiB cost a parse up to a sixth more).
THREAD_CHUNK = 8 << 20
# A temporary in the cache this old is a dead writer's (a console killed while it wrote a
# mirror): removed. By age, not by pid: on a cache other hosts share a pid names a process
# of another host, and a mirror is written in seconds.
STALE_TEMP_S = 3600.0
CRC_PLACEHOLDER = (1 << 32) - 1     # the widest CRC-32, in the header until the CRC is known
_CRC_AT = b'{"source": {"crc": '

__all__ = ["CACHE_ENV", "CrcAhead", "NotSaved", "cache_dir", "forget_mirror", "mirror_path", "open_history",
           "open_mirror", "save_mirror", "verify_covered"]


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


def crc_of(fd: int, start: int, end: int, crc: int = 0, should_stop: Callable[[], bool] | None = None,
           marks: list[tuple[int, int]] | None = None, chunk: int | None = None) -> int | None:
    """The CRC-32 of bytes ``[start, end)`` of ``fd`` carried on from ``crc`` (that of the
    bytes before ``start``), read a chunk at a time; None when the file is shorter, or when
    ``should_stop`` says so between chunks. ``marks`` gets ``(offset, CRC-32 of the bytes
    before it)`` after each chunk."""
    buf = bytearray(min(chunk or CRC_CHUNK, max(end - start, 0)))
    view = memoryview(buf)
    pos = start
    while pos < end:
        if should_stop is not None and should_stop():
            return None
        want = min(len(buf), end - pos)
        got = os.preadv(fd, [view[:want]], pos)
        if got <= 0:
            return None
        crc = binascii.crc32(view[:got], crc)
        pos += got
        if marks is not None:
            marks.append((pos, crc))
    return crc


class CrcAhead:
    """The CRC-32 of a history about to be parsed whole, computed beside the parse in a thread
    (reading and the CRC release the GIL: it takes the other CPU, and the mirror's save then
    carries it on from the nearest mark before the bytes the parse reached, instead of reading
    the whole history once more while the first frame waits)."""

    def __init__(self, path: str | os.PathLike[str]):
        self._marks: list[tuple[int, int]] = [(0, 0)]
        self._identity: tuple[int, int] | None = None
        self._thread = threading.Thread(target=self._run, args=(Path(path),), name="history-crc", daemon=True)
        self._thread.start()

    def _run(self, path: Path) -> None:
        try:
            fd, st = open_regular(path)
        except (OSError, ValueError):
            return
        try:
            self._identity = (st.st_dev, st.st_ino)
            crc_of(fd, 0, st.st_size, 0, marks=self._marks, chunk=THREAD_CHUNK)
        except OSError:
            pass
        finally:
            os.close(fd)

    def base(self, covered: int, identity: tuple[int, int] | None) -> tuple[int, int] | None:
        """``(offset, crc)`` of the history's first bytes up to at most ``covered`` of the file
        ``identity`` (device, inode), once the thread is done; None when it read another file."""
        self._thread.join()
        if identity is None or tuple(identity) != self._identity:
            return None
        return max((mark for mark in self._marks if mark[0] <= covered), default=None)


class _CrcOf:
    """The CRC-32 of the covered bytes, read in a thread of its own while the columns are
    written (both wait on the kernel with the GIL released: on two CPUs the CRC costs the
    write almost nothing); it keeps the history's fd open until it is done."""

    def __init__(self, fd: int, start: int, end: int, crc: int):
        self.fd, self.crc = fd, None
        self._thread = threading.Thread(target=self._run, args=(start, end, crc), daemon=True)
        self._thread.start()

    def _run(self, start: int, end: int, crc: int) -> None:
        try:
            self.crc = crc_of(self.fd, start, end, crc)
        except OSError:
            self.crc = None

    def result(self) -> int | None:
        self._thread.join()
        return self.crc

    def close(self) -> None:
        self._thread.join()
        os.close(self.fd)


class _CutShort(Exception):
    """The history was cut short while its mirror was written."""


def _layout(columns: dict[str, np.ndarray]) -> tuple[list[list[Any]], dict[str, int]]:
    """Each column's ``[name, dtype, count with its room, offset]``, and its spare rows."""
    spare = {name: SPARE_ROWS if not name.startswith("superseded.") else 0 for name in columns}
    layout, position = [], 0
    for name, arr in columns.items():
        layout.append([name, arr.dtype.newbyteorder("<").str, len(arr) + spare[name], position])
        position += -(-(len(arr) + spare[name]) * arr.itemsize // ALIGN) * ALIGN
    return layout, spare


def _remove_stale_temps(directory: Path) -> None:
    cutoff = time.time() - STALE_TEMP_S
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return
    for entry in entries:
        if entry.name.startswith(TMP_PREFIX):
            try:
                if entry.stat(follow_symlinks=False).st_mtime < cutoff:
                    os.unlink(entry.path)
            except OSError:
                pass


def save_mirror(history: LossHistory, base: tuple[int, int] | None = None,
                written: dict[str, Any] | None = None) -> NotSaved | None:
    """Write ``history``'s mirror (atomically, replacing an older one); None, or why not.

    ``base``: ``(covered, crc)`` of the bytes of the history the reader's first rows came
    from (the mirror it was opened from): the CRC-32 of all the bytes covered is carried on
    from it over the bytes read since, instead of reading the history from its start again.
    ``written`` is filled with the header's ``source`` when the mirror is written."""
    if history.error is not None or history.format is None or history._identity is None:
        return NotSaved("nothing to mirror")
    meta, columns = history.state_dict()
    try:
        fd, st = open_regular(history.path)
    except (OSError, ValueError) as err:
        return NotSaved(f"{history.path.name}: {err}")
    covered = meta["offset"] if history.format == "jsonl" else st.st_size
    samples = _identity(fd, covered) if (st.st_dev, st.st_ino) == tuple(history._identity) else None
    if samples is None:
        os.close(fd)
        return NotSaved(f"{history.path.name} was replaced or cut short while it was read")
    if history.format != "jsonl" or base is None or not 0 <= base[0] <= covered:
        base = (0, 0)
    crc = _CrcOf(fd, base[0], covered, base[1])
    try:
        return _write(history, meta, columns, st, covered, samples, crc, written)
    finally:
        crc.close()


def _write(history: LossHistory, meta: dict[str, Any], columns: dict[str, np.ndarray], st: os.stat_result,
           covered: int, samples: list[list[int]], crc: _CrcOf, written: dict[str, Any] | None) -> NotSaved | None:
    layout, spare = _layout(columns)
    # "crc" first in "source", first in the header: its place is known, and the header is
    # written last, once the CRC is (its digits padded with spaces to the width of the largest).
    source = {"crc": CRC_PLACEHOLDER, "dev": st.st_dev, "ino": st.st_ino, "covered": covered, "samples": samples,
              "array_stamp": [st.st_mtime_ns, st.st_size] if history.format == "array" else None}
    # The path as the file system resolves it: another spelling of it (relative, through a
    # symlink) is the same history; a path naming another file is refused at the open.
    header = json.dumps({"source": source, "version": MIRROR_VERSION,
                         "meta": {**meta, "path": os.path.realpath(history.path), "rows": len(columns["step"])},
                         "columns": layout}).encode()
    assert header.startswith(_CRC_AT)
    start = -(-(len(MAGIC) + _LENGTH.size + len(header)) // ALIGN) * ALIGN

    def chunks():
        yield start                                                   # the header's place, written last
        for name, arr in columns.items():
            little = np.ascontiguousarray(arr, arr.dtype.newbyteorder("<"))
            yield memoryview(little).cast("B")
            room = spare[name] * arr.itemsize + -(little.nbytes + spare[name] * arr.itemsize) % ALIGN
            yield bytes(min(room, SPARE_WRITTEN))
            yield max(0, room - SPARE_WRITTEN)                        # the rest: a hole
        value = crc.result()
        if value is None:
            raise _CutShort
        source["crc"] = value
        digits = str(value).encode().ljust(len(str(CRC_PLACEHOLDER)))
        yield 0, frame_header(_CRC_AT + digits + header[len(_CRC_AT) + len(digits):])

    try:
        target = mirror_path(history.path)
        target.parent.mkdir(parents=True, exist_ok=True)
        # Durable: a mirror renamed into place before its columns reached the disk would,
        # after a crash, pass every check (they read the history, not the columns).
        atomic_write_chunks(target, chunks())
        _remove_stale_temps(target.parent)
    except _CutShort:
        return NotSaved(f"{history.path.name} was cut short while it was read")
    except OSError as err:
        return _cache_failed(f"cannot write the history's mirror in {cache_dir()}: {err.strerror or err}")
    if written is not None:
        written.update(json.loads(json.dumps(source)))
    return None


def open_mirror(path: str | os.PathLike[str], shared: bool | None = None
                ) -> tuple[LossHistory | None, str | None, dict[str, Any] | None]:
    """The reader of the history at ``path`` as its valid mirror left it (``refresh`` it to
    read what was appended since), no reason and the mirror's ``source`` (what the history
    was when it was written: the spike scans kept beside it are keyed by it); or ``(None,
    why the mirror is not used, None)``. ``shared``: whether the cache is on a filesystem other
    hosts share, where the mirror is read, never mapped (None: ask :func:`filesystem_of`).
    Never raises."""
    path = Path(path)
    try:
        fd, st = open_regular(path)
    except (OSError, ValueError):
        return None, None, None                   # no history to mirror: the reader says why
    try:
        where = mirror_path(path)
        try:
            mfd, mst = open_cache_file(where)
        except ValueError as err:                 # a FIFO, a directory...: never waited on
            return None, f"the history's mirror is not a regular file ({_err_name(err)}): parsed again", None
        except OSError as err:
            if err.errno == errno.ELOOP:          # a symlink: never followed
                return None, "the history's mirror is a symbolic link: parsed again", None
            return None, None, None               # no mirror yet (or no cache to look in)
        try:
            if mst.st_size == 0:
                return None, None, None           # an empty file: no mirror
            if shared is None:
                shared = filesystem_of(where).shared
            return _from_file(path, fd, st, mfd, mst, shared)
        except OSError as err:
            if err.errno in (errno.ESTALE, errno.ENOENT):
                return None, None, None           # replaced by another host while read: none now
            return None, f"the history's mirror is unreadable ({_err_name(err)}): parsed again", None
        except (ValueError, KeyError, TypeError, IndexError, struct.error) as err:
            return None, f"the history's mirror is unreadable ({type(err).__name__}): parsed again", None
        finally:
            os.close(mfd)
    finally:
        os.close(fd)


def _err_name(err: Exception) -> str:
    code = getattr(err, "errno", None)
    return errno.errorcode.get(code, type(err).__name__) if code else type(err).__name__


def _read_whole(fd: int, size: int) -> bytearray:
    """All ``size`` bytes of ``fd`` in memory of this process's own (``OSError`` when fewer)."""
    buf = bytearray(size)
    view, got = memoryview(buf), 0
    while got < size:
        n = os.preadv(fd, [view[got:]], got)
        if n <= 0:
            raise OSError(errno.EIO, "the history's mirror changed while it was read")
        got += n
    return buf


def _from_file(path: Path, fd: int, st: os.stat_result, mfd: int, mst: os.stat_result, shared: bool
               ) -> tuple[LossHistory | None, str | None, dict[str, Any] | None]:
    try:
        header_raw = header_bytes(lambda at, n: os.pread(mfd, n, at))
        raw = loads_header(header_raw)
    except ValueError as err:
        return None, f"the history's mirror is {err}: parsed again", None
    data_start = -(-(len(MAGIC) + _LENGTH.size + len(header_raw)) // ALIGN) * ALIGN
    header, why = checked_header(raw, MIRROR_VERSION, path, st, data_start, mst.st_size, SPARE_ROWS)
    if header is None:
        return None, f"{why}: parsed again", None
    source = header.source
    if source.array_stamp is not None and list(source.array_stamp) != [st.st_mtime_ns, st.st_size]:
        return None, f"{path.name} (a JSON array) was rewritten since its mirror: parsed again", None
    if st.st_size < source.covered:
        return None, f"{path.name} is shorter than its mirror covers: parsed again", None
    if _identity(fd, source.covered) != [list(s) for s in source.samples]:
        return None, f"{path.name} is not the history its mirror was made of: parsed again", None
    # Mapped copy-on-write (private: the rows appended later stay ours), or on a shared
    # filesystem read into memory, up to the end of its last column.
    data = _read_whole(mfd, data_start + columns_end(header)) if shared else \
        mmap.mmap(mfd, 0, access=mmap.ACCESS_COPY)
    columns: dict[str, Any] = {}
    for name, dtype, count, offset in header.columns:
        columns[name] = np.frombuffer(data, np.dtype(dtype), count, data_start + offset)
    # This history's path, whatever the header says; and the bytes after the covered ones (a
    # torn tail when the mirror was written) are read again: they may have been completed in
    # place since, the file no longer.
    meta = {**raw["meta"], "path": str(path), "torn_tail": 0}
    return LossHistory.from_state_dict(meta, columns, adopt=True), None, raw["source"]


def verify_covered(path: str | os.PathLike[str], source: dict[str, Any],
                   should_stop: Callable[[], bool] | None = None) -> bool | None:
    """Whether the bytes of the history at ``path`` that its mirror (``source``: its header's)
    covers are all still the ones it was made of, by the CRC-32 of every one of them: True,
    False (they changed in place: what the mirror holds is not the history), or None when it
    cannot be told (the history gone, replaced or cut short: its reader sees that itself;
    unreadable; or ``should_stop`` said so). Never raises."""
    try:
        covered, expected = int(source["covered"]), int(source["crc"])
        fd, st = open_regular(path)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    try:
        if (st.st_dev, st.st_ino) != (source["dev"], source["ino"]) or st.st_size < covered:
            return None
        crc = crc_of(fd, 0, covered, 0, should_stop, chunk=THREAD_CHUNK)
        return None if crc is None else crc == expected
    except OSError:
        return None
    finally:
        os.close(fd)


def as_read(history: LossHistory) -> HistoryUpdate:
    """What a refresh that read the whole of ``history`` from the start reports (its first
    problems as the reader kept them)."""
    # Lines for steps already read: a rewind, or a step logged again right after itself (no rewind).
    again = history.superseded.get("step")
    froms = [step for step, _ in history.rewinds] + ([int(again.min())] if len(again) else [])
    return HistoryUpdate(history.rows_read, list(history.events), list(history.problems), history.nonfinite,
                         history.rewind_count > 0 or len(again) > 0, False, history.bad_lines, min(froms, default=None))


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
    history, why, source = open_mirror(path)
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
        save_mirror(history, (source["covered"], source["crc"]) if source is not None and not update.reset else None)
    return history, update, why
