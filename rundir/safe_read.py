"""Reading a file of a run directory as data from elsewhere: never blocks, never raises.

A run directory may come from another engine, another user on a shared filesystem or a
half-copied archive. Every reader of the contract's small files goes through
:func:`read_bytes` (or :func:`read_json`), which

- opens with ``O_NONBLOCK`` (a FIFO in place of a file must not hang the reader),
  ``O_NOCTTY`` and ``O_NOFOLLOW`` (the contract's files are regular files: a symbolic link
  planted at one of their names is refused, never followed), and refuses anything that
  ``fstat`` does not call a regular file;
- refuses a file larger than the cap its kind allows before reading a byte of it (a
  pid record pointing at ``/dev/zero`` or a huge sparse file must not cost memory);
- answers with a :class:`FileRead`: the value, or one line naming the problem.
"""

from __future__ import annotations

import errno
import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

import orjson

from . import late_bytes
from .filesystems import filesystem_of
from .text import counted

T = TypeVar("T")

KiB = 1 << 10
MiB = 1 << 20

# What each kind of file may weigh: generous for what the trainer writes, small enough
# that a hostile file costs no memory worth mentioning.
PID_RECORD_MAX = 64 * KiB
RUN_TOML_MAX = 256 * KiB              # a run.toml is a few KiB; its parser is slow on odd input
SAMPLES_MAX = 16 * MiB                # .samples.json: the last samples.keep completions
RESUME_JSON_MAX = 16 * MiB
SIDECAR_MAX = 64 * MiB
JOURNAL_MAX = 1 * MiB

_READ_FLAGS = (os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | getattr(os, "O_NOCTTY", 0)
               | getattr(os, "O_CLOEXEC", 0))
SYMLINK = "a symbolic link"


@dataclass(frozen=True)
class FileRead(Generic[T]):
    """A reader's answer: ``value`` when usable, else ``error`` naming the problem.

    ``missing`` is True when the file does not exist (``error`` then says so too), which
    for several files is normal rather than a problem.
    """

    value: T | None
    error: str | None = None
    missing: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None and self.value is not None


def file_kind(mode: int) -> str:
    """What a file that is not a regular one is, for a message: "a FIFO", "a directory"..."""
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, SYMLINK)):
        if test(mode):
            return name
    return "not a regular file"


def _json_type(value: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null",
            int: "a number", float: "a number"}.get(type(value), type(value).__name__)


def _size(n: int) -> str:
    return f"{n / MiB:g} MiB" if n >= MiB else f"{n / KiB:g} KiB" if n >= KiB else counted(n, "byte")


def not_regular(path: str | os.PathLike[str]) -> str | None:
    """None when ``path`` is absent or a regular file; else what it is ("a FIFO", "a
    directory", "a symbolic link", or why it cannot be looked at). Never raises."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as err:
        return f"not to be looked at ({err.strerror or err})"
    return None if stat.S_ISREG(st.st_mode) else file_kind(st.st_mode)


def open_for_append(path: str | os.PathLike[str]) -> int:
    """Open (create) ``path`` for appending without ever blocking (a FIFO put there would
    block an ordinary open until a reader came); ``OSError`` naming what it is when it is
    not a regular file (a symbolic link there is refused, never followed: a planted one would
    send the trainer's writes to the file it names). The caller closes the fd."""
    fd = open_nofollow(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(f"{Path(path).name} is {file_kind(st.st_mode)}, not a regular file")
    except BaseException:
        os.close(fd)
        raise
    return fd


class SymlinkRefused(OSError):
    """A symbolic link where a regular file belongs: refused, never followed (errno ELOOP)."""


def open_nofollow(path: str | os.PathLike[str], flags: int, mode: int = 0o644) -> int:
    """``os.open`` with ``O_NOFOLLOW``: a symbolic link at ``path`` raises :class:`SymlinkRefused`
    saying so (the kernel's ELOOP reads "too many levels of symbolic links")."""
    try:
        return os.open(path, flags | os.O_NOFOLLOW, mode)
    except OSError as err:
        if err.errno == errno.ELOOP and os.path.islink(path):
            raise SymlinkRefused(errno.ELOOP, f"{Path(path).name} is {SYMLINK}, not a regular file") from None
        raise


def open_checked(path: str | os.PathLike[str]) -> tuple[int, os.stat_result]:
    """Open ``path`` read-only without blocking and without following a symbolic link
    (:class:`SymlinkRefused`); the fd and its stat, or ``ValueError`` naming what it is when it
    is not a regular file. The caller closes the fd."""
    fd = open_nofollow(path, _READ_FLAGS)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"is {file_kind(st.st_mode)}, not a regular file")
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def open_regular(path: str | os.PathLike[str]) -> tuple[int, os.stat_result]:
    """:func:`open_checked`, a symbolic link being one more thing that is not a regular file:
    raises ``OSError`` (``FileNotFoundError`` when absent), or ``ValueError`` naming what it is."""
    try:
        return open_checked(path)
    except SymlinkRefused:
        raise ValueError(f"is {SYMLINK}, not a regular file") from None


def read_bytes(path: str | os.PathLike[str], max_bytes: int, name: str | None = None) -> FileRead[bytes]:
    """The whole file, if it is a regular file of at most ``max_bytes``; never raises.

    A file just written that ends in NUL bytes is read again (reopened) a few times: on a
    network filesystem its size can arrive before its bytes (rundir.late_bytes). Our trainer
    replaces its sidecars atomically, which a close-to-open filesystem never shows half
    written; another engine may write them in place."""
    waits = iter(LATE_RETRIES_S)
    while True:
        read, mtime = _read_whole(Path(path), max_bytes, name)
        if not (read.ok and read.value is not None and read.value.endswith(b"\0")
                and time.time() - mtime < late_bytes.GRACE_S):
            return read
        wait = next(waits, None)
        if wait is None:
            return FileRead(None, f"{name or Path(path).name}: ends in NUL bytes, not written yet (read again later)")
        time.sleep(wait)


# The waits between the reads of a file that ends in NUL bytes (0.35 s in all, at most).
LATE_RETRIES_S = (0.05, 0.1, 0.2)


def _read_whole(path: Path, max_bytes: int, name: str | None) -> tuple[FileRead[bytes], float]:
    """:func:`read_bytes`'s one read, and the file's mtime (0 when it was not read)."""
    name = name or path.name
    try:
        fd, st = open_regular(path)
    except FileNotFoundError:
        return FileRead(None, f"{name}: no such file", missing=True), 0.0
    except NotADirectoryError:
        return FileRead(None, f"{name}: cannot read: its directory is not a directory", missing=True), 0.0
    except ValueError as err:
        return FileRead(None, f"{name}: {err}"), 0.0
    except OSError as err:
        return FileRead(None, f"{name}: cannot read: {err.strerror or err}"), 0.0
    try:
        if st.st_size > max_bytes:
            return FileRead(None, f"{name}: {_size(st.st_size)}, larger than the {_size(max_bytes)} such a file may "
                                  "be: not read"), 0.0
        chunks, total = [], 0
        while total <= max_bytes:           # the size can change while we read: stay bounded
            chunk = os.read(fd, min(max_bytes + 1 - total, 16 * MiB))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > max_bytes:
            return FileRead(None, f"{name}: grew past the {_size(max_bytes)} such a file may be: not read"), 0.0
        return FileRead(b"".join(chunks)), st.st_mtime
    except OSError as err:
        return FileRead(None, f"{name}: cannot read: {err.strerror or err}"), 0.0
    finally:
        os.close(fd)


def parse_json(raw: bytes, name: str) -> FileRead[Any]:
    """Parse JSON bytes; the error names the file. Never raises (orjson caps nesting)."""
    if not raw.strip():
        return FileRead(None, f"{name}: empty file")
    try:
        return FileRead(orjson.loads(raw))
    except orjson.JSONDecodeError as err:
        return FileRead(None, f"{name}: not valid JSON ({err})")
    except (RecursionError, MemoryError) as err:       # belt and braces: orjson caps depth itself
        return FileRead(None, f"{name}: not readable JSON ({type(err).__name__})")


def read_json(path: str | os.PathLike[str], max_bytes: int, name: str | None = None) -> FileRead[Any]:
    """A bounded, non-blocking read of a JSON file; the value or one line naming the problem.

    On a shared filesystem, one written in the last few seconds that does not parse is read
    again, for a little longer than a mount caches attributes: through such a mount (FUSE's
    attr_timeout) a file replaced while it was opened can read as its predecessor's size, cut
    short, until the cached size expires."""
    waits = iter(CUT_RETRIES_S)
    while True:
        read = read_bytes(path, max_bytes, name)
        if not read.ok or read.value is None:
            return FileRead(None, read.error, read.missing)
        parsed = parse_json(read.value, name or Path(path).name)
        if parsed.ok or not _written_lately_on_a_shared_filesystem(path):
            return parsed
        wait = next(waits, None)
        if wait is None:
            return parsed
        time.sleep(wait)


# The waits between the reads of a JSON file that may have been cut short (1.5 s in all: a
# FUSE mount's default attribute cache is 1 s).
CUT_RETRIES_S = (0.1, 0.2, 0.4, 0.8)


def _written_lately_on_a_shared_filesystem(path: str | os.PathLike[str]) -> bool:
    try:
        recent = time.time() - os.stat(path).st_mtime < late_bytes.GRACE_S
    except OSError:
        return False
    return recent and filesystem_of(path).shared


def read_json_object(path: str | os.PathLike[str], max_bytes: int,
                     name: str | None = None) -> FileRead[dict[str, Any]]:
    """:func:`read_json`, and the top level must be an object."""
    name = name or Path(path).name
    read = read_json(path, max_bytes, name)
    if read.error is None and not isinstance(read.value, dict):
        return FileRead(None, f"{name}: not a JSON object (its top level is {_json_type(read.value)})")
    return read
