"""The incremental reader of ``.loss.json``: :class:`LossHistory`, the one the console uses.

It opens the file without blocking and refuses what is not a regular file, tells the
format (JSON Lines, or one JSON array), notices a file replaced or cut short (everything
is read again) and hands the new bytes to the format's reader (:mod:`.jsonl`,
:mod:`.array`), which adds them through :mod:`.ingest` into the columns.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from ..safe_read import open_regular
from .array import JsonArrayReading
from .blocks import detect_format
from .columns import Superseded
from .ingest import HistoryUpdate
from .jsonl import JsonLinesReading
from .records import HistoryEvent


class LossHistory(JsonLinesReading, JsonArrayReading):
    """Incremental reader of ``.loss.json``.

    Call :meth:`refresh` whenever the file may have grown; it reads only the bytes
    after the remembered offset. Columns (``step``, ``loss``, ``lr``, ``grad_norm``,
    ``tokens``, ``time``, ``arm`` codes into ``arm_names``) are numpy views sorted by
    step, one row per step (the newest line for a step wins). A null loss is NaN.
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
                "rewinds": self.rewinds, "rewind_count": self.rewind_count,
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
        history.bad_lines, history.problems = int(meta["bad_lines"]), list(meta["problems"])
        history.nonfinite, history.torn_tail = int(meta["nonfinite"]), int(meta["torn_tail"])
        history.rows_read = int(meta.get("rows_read", 0))
        for name in Superseded.NAMES:
            given = columns.get(f"superseded.{name}")
            if given is not None:
                history.superseded.columns[name] = np.array(given, history.superseded.columns[name].dtype)
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
            elif size > self._offset + self.torn_tail:
                self._read_lines(fd, size, update)
        except OSError as err:
            self.error = f"{name}: cannot read: {err.strerror or err}"
        finally:
            os.close(fd)

    def _forget(self, update: HistoryUpdate) -> None:
        """The file is gone (or is no file): what was read from it is no longer the history."""
        if self._identity is not None:
            self._reset_state()
            update.reset = True
