"""Appending to ``.loss.json``: the trainer's side of the history (docs/contract.md#lossjson-the-history)."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import Any

import orjson

from .. import fence
from ..safe_read import file_kind, open_nofollow
from .records import nonfinite_label


class LossHistoryWriter:
    """Appends history lines: one ``write`` per line (so a reader sees whole lines or a torn
    tail, never interleaving), flushed at once, fsynced on demand (at every checkpoint). A
    write cut short (a full disk, RLIMIT_FSIZE) raises ``OSError`` and leaves no cut line.
    Refuses (``OSError``) a path that is not a regular file, without blocking on a FIFO."""

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        self._cut = False
        self._fd = open_nofollow(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            st = os.fstat(self._fd)
            if not stat.S_ISREG(st.st_mode):
                raise OSError(f"{self.path.name}: is {file_kind(st.st_mode)}, not a regular file")
            # A torn last line from a crashed writer must not swallow our first line.
            if st.st_size and os.pread(self._fd, 1, st.st_size - 1) != b"\n":
                os.write(self._fd, b"\n")
        except BaseException:
            os.close(self._fd)
            self._fd = -1
            raise

    def append(self, record: dict[str, Any]) -> None:
        """Append one record as a line. A non-finite ``loss`` is written as null plus ``nonfinite``."""
        loss = record.get("loss")
        if isinstance(loss, float) and (label := nonfinite_label(loss)):
            record = {**record, "loss": None, "nonfinite": label}
        line = orjson.dumps(record, option=orjson.OPT_SERIALIZE_NUMPY) + b"\n"
        fence.check()              # a lock holder that may have been taken over writes nothing
        if self._cut:                   # a cut line we could not take back: end it, or it swallows this one
            os.write(self._fd, b"\n")
            self._cut = False
        written = os.write(self._fd, line)
        if written != len(line):
            self._take_back(written)
            raise OSError(errno.ENOSPC, f"{self.path.name}: short write, {written} of {len(line)} bytes "
                                        "(the disk or the file size limit is full): the line was not written")

    def _take_back(self, written: int) -> None:
        """Remove the ``written`` bytes of a line cut short (the file's last bytes: this is its one
        writer), so that the next line does not join it; where that fails, the next append ends
        the cut line first (one unreadable line, never two steps lost in one)."""
        if not written:
            return
        try:
            os.ftruncate(self._fd, os.fstat(self._fd).st_size - written)
        except OSError:
            self._cut = True

    def step(self, step: int, loss: float, lr: float, grad_norm: float, arm: str, tokens: int,
             time: float, **extra: Any) -> None:
        """Append a step line."""
        self.append({"step": step, "loss": loss, "lr": lr, "grad_norm": grad_norm, "arm": arm,
                     "tokens": tokens, "time": time, **extra})

    def event(self, event: str, **fields: Any) -> None:
        """Append an event line (``start``, ``resume``, ``checkpoint``, ``signal``, ``pivot``, ``zombie``, ``stop``,
        ``eval``, ...)."""
        self.append({"event": event, **fields})

    def fsync(self) -> None:
        os.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> "LossHistoryWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
