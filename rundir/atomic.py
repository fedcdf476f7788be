"""Atomic file replacement: the only way this project writes a file another process reads.

A reader never sees a partial file under its final name: the bytes go to a temporary
file in the same directory, are flushed and fsynced, the temporary is renamed over the
final name with ``os.replace`` and the directory is fsynced so that the rename itself
survives a power cut.
"""

from __future__ import annotations

import errno
import os
import secrets
from pathlib import Path
from typing import Any, Callable, Iterator

import orjson

from . import fence
from .layout import TMP_PREFIX

# Large durable writes queue their writeback chunk by chunk (on Linux, fadvise
# DONTNEED on a just-written range starts writing it without waiting), so the disk
# works while the next chunk is produced, the closing fsync has little left to wait
# for, and a checkpoint of gigabytes does not evict the page cache.
WRITEBACK_MIN_BYTES = 1 << 20
_START_WRITEBACK = getattr(os, "posix_fadvise", None)
# Test-only fault injection: a simulated full disk. Any atomic write that would pass
# ANDREA_TEST_ENOSPC_AFTER_BYTES bytes fails there with OSError(ENOSPC), as a full disk
# would; ANDREA_TEST_ENOSPC_WRITES, when set, limits how many writes fail (the disk is
# then "freed"). Never set in normal use.
ENOSPC_AFTER_ENV = "ANDREA_TEST_ENOSPC_AFTER_BYTES"
ENOSPC_WRITES_ENV = "ANDREA_TEST_ENOSPC_WRITES"
_enospc_failures = 0


def _enospc_limit() -> int | None:
    """The simulated free space of this write, or None (the hook is off or used up)."""
    limit = os.environ.get(ENOSPC_AFTER_ENV)
    if not limit:
        return None
    budget = os.environ.get(ENOSPC_WRITES_ENV)
    if budget and _enospc_failures >= int(budget):
        return None
    return int(limit)


def _write_all(fd: int, view: memoryview, total: int, limit: int | None) -> int:
    """Write all of ``view``; returns the new running total (the hook may cut it short)."""
    global _enospc_failures
    while view:
        if limit is not None and total + len(view) > limit:
            room = max(0, limit - total)
            if room:
                total += os.write(fd, view[:room])
            _enospc_failures += 1
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC) + " (simulated by " + ENOSPC_AFTER_ENV + ")")
        written = os.write(fd, view)
        total += written
        view = view[written:]
    return total


def fsync_dir(directory: str | os.PathLike[str]) -> None:
    """Flush a directory entry (a rename or a new file) to stable storage."""
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# A temporary is created, never reused: O_EXCL fails on any name already there (a symlink
# planted at it included, which is not followed), and the name holds a random part that no
# one can guess ahead of the write (nor a writer of the same pid on another host sharing the
# directory pick as well). The pid stays last: remove_stale_temps reads it.
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
_CREATE_TRIES = 16


def temp_path_for(path: Path) -> Path:
    """A fresh temporary name for writing ``path`` (same directory):
    ``.tmp-NAME.RANDOM.PID``, a new random part at each call."""
    return path.with_name(f"{TMP_PREFIX}{path.name}.{secrets.token_hex(6)}.{os.getpid()}")


def create_temp(path: Path) -> tuple[int, Path]:
    """Create a new temporary file for writing ``path``; its fd and name. Never opens a file
    that was already there, and never follows a symlink."""
    for attempt in range(_CREATE_TRIES):
        tmp = temp_path_for(path)
        try:
            return os.open(tmp, _CREATE_FLAGS, 0o644), tmp
        except FileExistsError:
            if attempt == _CREATE_TRIES - 1:
                raise
    raise AssertionError("unreachable")


def _pwrite_all(fd: int, view: memoryview, at: int) -> None:
    while view:
        written = os.pwrite(fd, view, at)
        view, at = view[written:], at + written


def atomic_write_chunks(path: str | os.PathLike[str],
                        chunks: Iterator[bytes | memoryview | int | tuple[int, bytes | memoryview]],
                        on_chunk: Callable[[bytes | memoryview], None] | None = None,
                        durable: bool = True) -> int:
    """Write ``chunks`` to ``path`` atomically and return the number of bytes written.

    A chunk that is an ``int`` is that many zero bytes, left as a hole (skipped, not
    written: they cost neither the copy nor the disk) and not shown to ``on_chunk``. A chunk
    that is a tuple ``(offset, data)`` is written at that offset, over what was written or
    skipped there (a header known only at the end), and is not shown to ``on_chunk`` either.

    ``on_chunk`` sees every chunk as it is written (used to checksum while writing,
    never by a second read). On any error the temporary file is removed and the
    previous file under ``path``, if any, is left as it was. ``durable=False`` skips
    both fsyncs: readers still see the old or the new file whole (the rename is
    atomic), but a power cut may lose the update. Only for live files that are
    rewritten every step and snapshotted durably elsewhere (``.state.json``).
    """
    path = Path(path)
    total = 0
    limit = _enospc_limit()
    fence.check()                               # a lock holder that may have been taken over writes nothing
    fd, tmp = create_temp(path)
    try:
        for chunk in chunks:
            if isinstance(chunk, int):
                total = os.lseek(fd, chunk, os.SEEK_CUR)
                continue
            if isinstance(chunk, tuple):                # (offset, bytes): a header known last
                _pwrite_all(fd, memoryview(chunk[1]).cast("B"), chunk[0])
                continue
            view = memoryview(chunk).cast("B")
            if on_chunk is not None:
                on_chunk(view)
            start = total
            total = _write_all(fd, view, total, limit)
            if durable and _START_WRITEBACK is not None and total - start >= WRITEBACK_MIN_BYTES:
                _START_WRITEBACK(fd, start, total - start, os.POSIX_FADV_DONTNEED)
        if os.fstat(fd).st_size < total:
            os.ftruncate(fd, total)             # it ends in a hole
        if durable:
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        _unlink_quietly(tmp)
        raise
    os.close(fd)
    try:
        fence.check()                           # nor lands a write begun before (a long checkpoint)
        os.replace(tmp, path)
    except BaseException:
        _unlink_quietly(tmp)
        raise
    if durable:
        fsync_dir(path.parent)
    return total


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes, durable: bool = True) -> None:
    """Replace ``path`` with ``data`` atomically (see :func:`atomic_write_chunks` for ``durable``)."""
    atomic_write_chunks(path, iter((data,)), durable=durable)


def dumps_json(obj: Any, *, indent: bool = True) -> bytes:
    """Serialise plain data to JSON bytes (numpy scalars and arrays allowed)."""
    option = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS
    if indent:
        option |= orjson.OPT_INDENT_2
    return orjson.dumps(obj, option=option) + b"\n"


def atomic_write_json(path: str | os.PathLike[str], obj: Any, durable: bool = True) -> None:
    """Replace ``path`` with ``obj`` as JSON, atomically."""
    atomic_write_bytes(path, dumps_json(obj), durable=durable)


def remove_stale_temps(directory: str | os.PathLike[str]) -> list[Path]:
    """Delete temporary files left by writers that died mid-write; return what was removed.

    Only files whose embedded pid no longer runs are removed, so a live writer's
    temporary is never pulled from under it.
    """
    removed = []
    for entry in Path(directory).glob(f"{TMP_PREFIX}*"):
        pid_text = entry.name.rsplit(".", 1)[-1]
        if pid_text.isdigit() and _pid_alive(int(pid_text)):
            continue
        if _unlink_quietly(entry):
            removed.append(entry)
    return removed


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _unlink_quietly(path: Path) -> bool:
    try:
        os.unlink(path)
        return True
    except FileNotFoundError:
        return False
