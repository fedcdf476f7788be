"""The incremental reader of ``.loss.json``: :class:`LossHistory`, the one the console uses.

It opens the file without blocking and refuses what is not a regular file, tells the
format (JSON Lines, or one JSON array), notices a file replaced or cut short (everything
is read again) and reads the new bytes: JSON Lines, the trainer's format, here, from the
remembered offset to the last whole line, a block of at most :data:`~.limits.BLOCK_BYTES`
at a time, decoded in place; another engine's JSON array in :mod:`.array`. Both add the
records through :mod:`.ingest` into the columns.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from ..late_bytes import LateBytes
from ..safe_read import open_regular
from . import limits
from .array import JsonArrayReading
from .blocks import detect_format, find_newline, gc_paused, read_into, size_text
from .columns import SERIES_PREFIX, Superseded
from .ingest import HistoryUpdate
from .records import HistoryEvent


class LossHistory(JsonArrayReading):
    """Incremental reader of ``.loss.json``.

    Call :meth:`refresh` whenever the file may have grown; it reads only the bytes
    after the remembered offset. Columns (``step``, ``loss``, ``lr``, ``grad_norm``,
    ``tokens``, ``time``, ``arm`` codes into ``arm_names``) are numpy views sorted by
    step, one row per step (the newest line for a step wins). A null loss is NaN. Every
    other numeric key of the step lines is a series (:meth:`series_column`, named in
    :attr:`series_keys`; :mod:`.keys`), and the eval events are series too (``evals``:
    :mod:`.evals`).
    Events are kept in file order in ``events``; lines that cannot be read are counted
    in ``bad_lines`` with the first few reasons in ``problems``. A file that cannot be
    read at all (not a regular file, no permission) is named in ``error``.
    """

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        self._reset_state()

    def _reset_state(self) -> None:
        self._reset_rows()
        self._offset = 0
        self._identity: tuple[int, int] | None = None
        self._array_mtime: tuple[int, int] | None = None
        self.format: str | None = None         # "jsonl" or "array" once known
        self.torn_tail = 0                      # bytes after the last newline, not yet a line
        self.error: str | None = None           # the file could not be read at all
        self._late = LateBytes()                # NUL bytes at the end: not written yet (a network filesystem)

    # -- hand-over -------------------------------------------------------------
    def state_dict(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """The reader's whole state as JSON-able metadata plus numpy columns, so that a
        read done in another process can be carried on here (no pickling)."""
        meta = {"path": str(self.path), "offset": self._offset, "lines": self._lines,
                "identity": self._identity, "array_mtime": self._array_mtime, "format": self.format,
                "arm_names": self.arm_names, "bad_lines": self.bad_lines, "problems": self.problems,
                "nonfinite": self.nonfinite, "torn_tail": self.torn_tail, "error": self.error,
                "rows_read": self.rows_read,
                "last_nonfinite_step": self.last_nonfinite_step, "head_step": self.head_step,
                "rewinds": self.rewinds, "rewind_count": self.rewind_count, "keys": self.keys.state_dict(),
                "events": [[e.event, e.step, e.time, e.line, e.data, e.row] for e in self.events]}
        columns = {name: arr[: self._cols.n] for name, arr in self._cols.arrays()}
        columns.update({f"superseded.{name}": arr for name, arr in self.superseded.columns.items()})
        return meta, columns

    @classmethod
    def from_state_dict(cls, meta: dict[str, Any], columns: dict[str, np.ndarray],
                        adopt: bool = False) -> "LossHistory":
        """A reader that carries on from :meth:`state_dict`'s output: its next
        :meth:`refresh` reads only what was appended since. ``adopt``: the columns are this
        reader's alone from now on (a private mapping of the history's mirror): they are used
        as they are, and may be longer than ``meta["rows"]``: room for the rows to come."""
        history = cls(meta["path"])
        cols = history._cols
        cols.n = int(meta.get("rows", len(columns["step"])))
        history.keys.load_state_dict(meta.get("keys", {}))
        for name in columns:
            if name.startswith(SERIES_PREFIX):
                cols.series[name[len(SERIES_PREFIX):]] = np.empty(0, np.float64)
        for name, empty in cols.arrays():
            given = columns[name]
            if isinstance(given, np.ndarray) and given.dtype == empty.dtype and (adopt or not given.flags.writeable):
                # Read-only (over bytes received from another process): kept as it is, since
                # no one can change it, and the first rows appended move the columns to new
                # arrays (they are full). Half the memory of a copy for a large history.
                arr = given
            else:
                arr = np.array(given, empty.dtype)           # a copy of the right type: no shared rows
            if arr.ndim != 1 or len(arr) < cols.n or (len(arr) != cols.n and not adopt):
                raise ValueError(f"history column {name!r} has shape {arr.shape}, expected ({cols.n},)")
            cols.replace(name, arr)
        history._offset, history._lines = int(meta["offset"]), int(meta["lines"])
        history._identity = tuple(meta["identity"]) if meta["identity"] is not None else None
        history._array_mtime = tuple(meta["array_mtime"]) if meta["array_mtime"] is not None else None
        history.format, history.error = meta["format"], meta["error"]
        history.arm_names = list(meta["arm_names"])
        history._arm_codes = {name: i for i, name in enumerate(history.arm_names)}
        history.events = [HistoryEvent(*e) for e in meta["events"]]
        for event in history.events:
            history.evals.add(event)
        history.bad_lines, history.problems = int(meta["bad_lines"]), list(meta["problems"])
        history.nonfinite, history.torn_tail = int(meta["nonfinite"]), int(meta["torn_tail"])
        history.rows_read = int(meta.get("rows_read", 0))
        for name in Superseded.NAMES:
            saved = columns.get(f"superseded.{name}")
            if saved is not None:
                history.superseded.columns[name] = np.array(saved, history.superseded.columns[name].dtype)
        kept = history.superseded.columns
        for name in ("old_time", "new_time"):
            if len(kept[name]) != len(kept["step"]):        # handed over by a reader before the times
                kept[name] = np.full(len(kept["step"]), np.nan)
        history.last_nonfinite_step, history.head_step = meta.get("last_nonfinite_step"), meta.get("head_step")
        history.rewinds = [(int(s), float(t)) for s, t in meta.get("rewinds", ())]
        history.rewind_count = int(meta.get("rewind_count", 0))
        return history

    # -- columns ---------------------------------------------------------------
    def __len__(self) -> int:
        return self._cols.n

    def _column(self, name: str) -> np.ndarray:
        return self._cols.get(name)

    step = property(lambda self: self._column("step"), doc="Step numbers, ascending and unique.")
    tokens = property(lambda self: self._column("tokens"), doc="Cumulative tokens (-1 where absent).")
    arm = property(lambda self: self._column("arm"), doc="Arm codes: indices into ``arm_names``.")
    loss = property(lambda self: self._column("loss"), doc="Training loss (NaN where null or non-finite).")
    lr = property(lambda self: self._column("lr"), doc="Learning rate.")
    grad_norm = property(lambda self: self._column("grad_norm"), doc="Gradient norm before clipping.")
    time = property(lambda self: self._column("time"), doc="Unix time of the step.")

    def share_rows(self) -> None:
        """The rows read so far are handed out as views (the console's snapshots): later reads
        never change them in place (a rewind over them moves the columns to new arrays)."""
        self._cols.share()

    def series_column(self, name: str) -> np.ndarray:
        """The column of a series found on the step lines (:mod:`.keys`), aligned with
        ``step``: NaN where a line lacked it. KeyError for a name that is none."""
        return self._cols.get_series(name)

    @property
    def series_keys(self) -> list[str]:
        """The series found on the step lines, in the order they were found."""
        return list(self._cols.series)

    @property
    def awaiting_late_bytes(self) -> bool:
        """Whether the last read stopped before NUL bytes not written yet (rundir.late_bytes):
        read again though the file may not seem to change when they land."""
        return self._late.awaited

    @property
    def last_step(self) -> int | None:
        return int(self.step[-1]) if len(self) else None

    # -- reading ---------------------------------------------------------------
    def refresh(self) -> HistoryUpdate:
        """Read what was appended since the last call; never raises, never blocks."""
        update = HistoryUpdate()
        try:
            self._refresh(update)
        except Exception as err:        # a last guard: no content of the file may make the reader raise
            self.error = f"{self.path.name}: could not be read ({type(err).__name__})"
        return update

    def _refresh(self, update: HistoryUpdate) -> None:
        name = self.path.name
        try:
            fd, st = open_regular(self.path)
        except FileNotFoundError:
            self._forget(update)
            self.error = None
            return
        except ValueError as err:       # a FIFO, a device, a directory: never read
            self._forget(update)
            self.error = f"{name}: {err}"
            return
        except OSError as err:
            self.error = f"{name}: cannot read: {err.strerror or err}"
            return
        try:
            identity, size = (st.st_dev, st.st_ino), st.st_size
            if self._identity is not None and (identity != self._identity or size < self._offset + self.torn_tail):
                self._reset_state()
                update.reset = True
            self._identity = identity
            self.error = None
            array_stamp = (st.st_mtime_ns, size)
            if size and (self.format is None or (self.format == "array" and self._array_mtime != array_stamp)):
                # Seen again while it may be the first line of JSON Lines that opens an array.
                detected = detect_format(os.pread(fd, 64 << 10, 0))
                if self.format == "array" and detected == "jsonl":
                    self._reset_state()
                    self._identity = identity
                    update.reset = True
                self.format = detected or self.format
            if self.format == "array":
                if self._array_mtime != array_stamp:
                    self._read_array(fd, size, update)
                    self._array_mtime = array_stamp
            elif size > self._offset + self.torn_tail or self._late.awaited:
                self._read_lines(fd, size, update, st.st_mtime)
        except OSError as err:
            self.error = f"{name}: cannot read: {err.strerror or err}"
        finally:
            os.close(fd)

    def _forget(self, update: HistoryUpdate) -> None:
        """The file is gone (or is no file): what was read from it is no longer the history."""
        if self._identity is not None:
            self._reset_state()
            update.reset = True

    # -- JSON Lines ------------------------------------------------------------
    def _read_lines(self, fd: int, size: int, update: HistoryUpdate, mtime: float) -> None:
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
                usable = self._late.usable(buf, pos, 1, got + 1, mtime)
                if usable < got:            # NUL bytes not written yet: the lines before them, then stop
                    got = want = usable
                    size = pos + usable
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
