"""``.loss.json``: the append-only training history (DESIGN.md section 4).

:class:`LossHistoryWriter` appends one JSON line per ``write``; :class:`LossHistory`
reads incrementally, remembering a byte offset and parsing only new bytes, and keeps
the step lines as numpy columns sorted by step with the newest line for a step winning.
It also reads a whole-file JSON array (other engines write that), ``NaN``/``Infinity``
tokens, unknown keys and a torn last line.

The file is data from elsewhere, so the reader never raises and never hangs: it opens
without blocking and refuses what is not a regular file (a FIFO, ``/dev/zero``), reads
in bounded blocks (memory follows the columns, not the file), and a line it cannot use
(invalid, binary, nested past what a parser takes, longer than :data:`MAX_LINE_BYTES`)
is counted in ``bad_lines`` while the lines around it are kept.
"""

from __future__ import annotations

import errno
import gc
import json
import math
import os
import re
import stat
from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path
from typing import Any, Callable

import msgspec
import numpy as np
import orjson

from .safe_read import _kind, open_regular


# Reads go in blocks of at most this many bytes, so that a read's memory follows the
# columns it builds, not the file's size.
BLOCK_BYTES = 16 << 20
# A line (or JSON array element) longer than this is skipped and counted, never parsed.
MAX_LINE_BYTES = 1 << 20
# Lines are decoded in batches this size; a batch that fails is halved until each bad
# line is among at most LEAF_LINES, which are read one by one.
BLOCK_LINES = 4096
LEAF_LINES = 32
# A JSON array is decoded in pieces of about this size, cut where one object ends and
# the next begins.
ARRAY_PIECE_BYTES = 512 << 10
# Events are kept whole (and handed on): one nested deeper than this is not kept.
MAX_EVENT_NESTING = 64
MAX_PROBLEMS = 20               # reasons kept in ``LossHistory.problems``
MAX_UPDATE_PROBLEMS = 1000      # reasons kept in one update's ``new_problems`` (all are counted)
# Step lines replaced by a newer line for the same step (a resume re-ran them), kept with
# their replacement for resume verification: the newest this many.
MAX_SUPERSEDED = 100_000
MAX_REWINDS = 1000              # rewinds kept in ``LossHistory.rewinds`` (all are counted)

_FLOAT_COLUMNS = ("loss", "lr", "grad_norm", "time")


class _Line(msgspec.Struct, gc=False):
    """The typed view of a history line that the fast path decodes into: no dict per
    line, unknown keys skipped by the decoder. Event lines are re-read in full."""

    step: int = -1
    loss: float | None = None
    lr: float = math.nan
    grad_norm: float = math.nan
    arm: str = ""
    tokens: int = -1
    time: float = math.nan
    event: str | None = None


_decode_block = msgspec.json.Decoder(list[_Line]).decode
_get_row = attrgetter("step", "tokens", "arm", *_FLOAT_COLUMNS, "event")


def _nonfinite_label(value: float) -> str | None:
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf"
    return None


def _size(n: int) -> str:
    return f"{n / (1 << 20):g} MiB" if n >= 1 << 20 else f"{n / (1 << 10):g} KiB" if n >= 1 << 10 else f"{n} bytes"


class LossHistoryWriter:
    """Appends history lines: one ``write`` per line (so a reader sees whole lines or a torn
    tail, never interleaving), flushed at once, fsynced on demand (at every checkpoint).
    Refuses (``OSError``) a path that is not a regular file, without blocking on a FIFO."""

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_NONBLOCK, 0o644)
        try:
            st = os.fstat(self._fd)
            if not stat.S_ISREG(st.st_mode):
                raise OSError(f"{self.path.name}: is {_kind(st.st_mode)}, not a regular file")
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
        if isinstance(loss, float) and (label := _nonfinite_label(loss)):
            record = {**record, "loss": None, "nonfinite": label}
        line = orjson.dumps(record, option=orjson.OPT_SERIALIZE_NUMPY) + b"\n"
        os.write(self._fd, line)

    def step(self, step: int, loss: float, lr: float, grad_norm: float, arm: str, tokens: int,
             time: float, **extra: Any) -> None:
        """Append a step line."""
        self.append({"step": step, "loss": loss, "lr": lr, "grad_norm": grad_norm, "arm": arm,
                     "tokens": tokens, "time": time, **extra})

    def event(self, event: str, **fields: Any) -> None:
        """Append an event line (``start``, ``resume``, ``checkpoint``, ``signal``, ``pivot``, ``zombie``, ``stop``)."""
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


@dataclass(frozen=True)
class HistoryEvent:
    """An event line, kept as a marker (resume, checkpoint, pivot, ...)."""

    event: str
    step: int | None
    time: float | None
    line: int
    data: dict[str, Any]
    row: int = -1               # step lines read before it: where it falls among them (-1: not known)


@dataclass
class HistoryUpdate:
    """What one :meth:`LossHistory.refresh` picked up. ``new_problems`` holds the first
    :data:`MAX_UPDATE_PROBLEMS` reasons; ``new_bad_lines`` counts them all."""

    new_steps: int = 0
    new_events: list[HistoryEvent] = field(default_factory=list)
    new_problems: list[str] = field(default_factory=list)
    new_nonfinite: int = 0
    rewound: bool = False      # a step at or before one already seen (a resume re-ran steps)
    reset: bool = False        # the file shrank or was replaced: everything was re-read
    new_bad_lines: int = 0
    rewound_from: int | None = None     # the smallest step of the new lines, when they rewound

    def __post_init__(self) -> None:
        self.new_bad_lines = max(self.new_bad_lines, len(self.new_problems))

    @property
    def changed(self) -> bool:
        return bool(self.new_steps or self.new_events or self.new_bad_lines or self.reset)

    def then(self, later: "HistoryUpdate") -> "HistoryUpdate":
        """This update followed by ``later``, as if one refresh had picked up both."""
        froms = [f for f in (self.rewound_from, later.rewound_from) if f is not None]
        return HistoryUpdate(self.new_steps + later.new_steps, self.new_events + later.new_events,
                             (self.new_problems + later.new_problems)[:MAX_UPDATE_PROBLEMS],
                             self.new_nonfinite + later.new_nonfinite, self.rewound or later.rewound,
                             self.reset or later.reset, self.new_bad_lines + later.new_bad_lines,
                             min(froms) if froms else None)


class _Columns:
    """Growable, step-sorted numpy columns; appending is amortised O(new rows)."""

    def __init__(self) -> None:
        self.n = 0
        self.step = np.empty(0, np.int64)
        self.tokens = np.empty(0, np.int64)
        self.arm = np.empty(0, np.int32)
        self.floats = {name: np.empty(0, np.float64) for name in _FLOAT_COLUMNS}

    def get(self, name: str) -> np.ndarray:
        arr = self.floats[name] if name in self.floats else getattr(self, name)
        return arr[: self.n]

    def _arrays(self) -> list[tuple[str, np.ndarray]]:
        return [("step", self.step), ("tokens", self.tokens), ("arm", self.arm),
                *self.floats.items()]

    def reserve(self, total: int) -> None:
        """Room for ``total`` rows, exactly: a read that knows about how many rows are
        coming grows the columns once, not by doubling (pages not yet written cost no memory)."""
        if total > len(self.step):
            self._grow(total)

    def _reserve(self, total: int) -> None:
        if total > len(self.step):
            self._grow(max(total, 2 * len(self.step), 1024))

    def _grow(self, capacity: int) -> None:
        for name, old in self._arrays():
            new = np.empty(capacity, old.dtype)
            new[: self.n] = old[: self.n]
            self.replace(name, new)
            del old

    def replace(self, name: str, arr: np.ndarray) -> None:
        if name in self.floats:
            self.floats[name] = arr
        else:
            setattr(self, name, arr)

    def extend(self, block: dict[str, np.ndarray], superseded: "Superseded | None" = None, seq: int = 0) -> bool:
        """Add rows (in file order); returns True when that rewound over known steps. The
        rows that newer ones replace go to ``superseded`` with their replacement (whose
        place among all the step lines read is ``seq`` plus its index in the block)."""
        k = len(block["step"])
        if not k:
            return False
        steps = block["step"]
        old_n = self.n
        in_order = bool(np.all(steps[1:] > steps[:-1])) and (old_n == 0 or steps[0] > self.step[old_n - 1])
        self._reserve(old_n + k)
        for name, arr in self._arrays():
            arr[old_n:old_n + k] = block[name]
        self.n += k
        if not in_order:
            # Rows before the block's smallest step are sorted, unique and untouched by it.
            self._keep_newest_per_step(int(np.searchsorted(self.step[:old_n], steps.min())), superseded,
                                       seq - old_n)
        return not in_order

    def _keep_newest_per_step(self, lo: int = 0, superseded: "Superseded | None" = None, seq: int = 0) -> None:
        steps = self.step[lo: self.n]
        order = np.argsort(steps, kind="stable")      # equal steps stay in file order
        sorted_steps = steps[order]
        is_last = np.append(sorted_steps[1:] != sorted_steps[:-1], True)
        if superseded is not None:
            older = order[:-1][~is_last[:-1]] + lo    # each replaced row, and the next line for its step
            newer = order[1:][~is_last[:-1]] + lo
            loss, grad_norm = self.floats["loss"], self.floats["grad_norm"]
            superseded.add(self.step[newer], newer + seq, loss[older], grad_norm[older], loss[newer],
                           grad_norm[newer])
        keep = order[is_last] + lo
        for _, arr in self._arrays():
            arr[lo: lo + len(keep)] = arr[keep]
        self.n = lo + len(keep)


class Superseded:
    """Step lines that a newer line for the same step replaced, each beside its replacement:
    ``step``, ``row`` (the replacement's place among all step lines read, comparable with
    :attr:`HistoryEvent.row`), and loss and grad_norm of both. The newest
    :data:`MAX_SUPERSEDED` are kept, in the order their replacements were read."""

    NAMES = ("step", "row", "old_loss", "old_grad_norm", "new_loss", "new_grad_norm")

    def __init__(self) -> None:
        self.columns = {name: np.empty(0, np.int64 if name in ("step", "row") else np.float64)
                        for name in self.NAMES}

    def __len__(self) -> int:
        return len(self.columns["step"])

    def add(self, *values: np.ndarray) -> None:
        if not len(values[0]):
            return
        order = np.argsort(values[1], kind="stable")      # by the replacement's place
        for name, new in zip(self.NAMES, values):
            joined = np.concatenate([self.columns[name], new[order]])
            self.columns[name] = joined[-MAX_SUPERSEDED:]

    def get(self, name: str) -> np.ndarray:
        return self.columns[name]


class _Careful:
    """The state of a careful read of a JSON array's elements, whose bounds come from a
    scan of its structure: two unparsable elements in a row mean the scan lost its way
    (binary junk with a stray quote), and the reader looks for the next element anew."""

    __slots__ = ("failed",)

    def __init__(self) -> None:
        self.failed = False


class LossHistory:
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
        self._cols = _Columns()
        self._offset = 0
        self._lines = 0
        self._identity: tuple[int, int] | None = None
        self._array_mtime: tuple[int, int] | None = None
        self.format: str | None = None         # "jsonl" or "array" once known
        self.arm_names: list[str] = []
        self._arm_codes: dict[str, int] = {}
        self.events: list[HistoryEvent] = []
        self.bad_lines = 0
        self.problems: list[str] = []
        self.nonfinite = 0
        self.last_nonfinite_step: int | None = None   # in file order: a later line may have replaced it
        self.head_step: int | None = None       # the step of the last step line, in file order
        # Where the steps went back (a resume re-running steps, another engine's restart):
        # (the first step after the rewind, its time), in file order, the newest MAX_REWINDS.
        self.rewinds: list[tuple[int, float]] = []
        self.rewind_count = 0
        self.torn_tail = 0                      # bytes after the last newline, not yet a line
        self.error: str | None = None           # the file could not be read at all
        self.rows_read = 0                      # step lines read (replaced ones too)
        self.superseded = Superseded()          # replaced step lines, for resume verification

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
        columns = {name: arr[: self._cols.n] for name, arr in self._cols._arrays()}
        columns.update({f"superseded.{name}": arr for name, arr in self.superseded.columns.items()})
        return meta, columns

    @classmethod
    def from_state_dict(cls, meta: dict[str, Any], columns: dict[str, np.ndarray]) -> "LossHistory":
        """A reader that carries on from :meth:`state_dict`'s output: its next
        :meth:`refresh` reads only what was appended since."""
        history = cls(meta["path"])
        cols = history._cols
        cols.n = len(columns["step"])
        for name, empty in cols._arrays():
            given = columns[name]
            if isinstance(given, np.ndarray) and given.dtype == empty.dtype and not given.flags.writeable:
                # Read-only (over bytes received from another process): kept as it is, since
                # no one can change it, and the first rows appended move the columns to new
                # arrays (they are full). Half the memory of a copy for a large history.
                arr = given
            else:
                arr = np.array(given, empty.dtype)           # a copy of the right type: no shared rows
            if arr.shape != (cols.n,):
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
                detected = _detect_format(os.pread(fd, 64 << 10, 0))
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

    @property
    def _unit(self) -> str:
        return "element" if self.format == "array" else "line"

    # -- JSON Lines --------------------------------------------------------------
    def _read_lines(self, fd: int, size: int, update: HistoryUpdate) -> None:
        """Lines from the remembered offset to the end, a block of at most BLOCK_BYTES at a time."""
        pos = self._offset
        if self.torn_tail > MAX_LINE_BYTES:         # an over-long line: only its end is looked for
            pos = self._skip_long_line(fd, pos, pos + self.torn_tail, size, update)
        buf: bytearray | None = None
        estimated = False
        with _gc_paused():
            while 0 <= pos < size:
                want = min(BLOCK_BYTES, size - pos)
                if buf is None or len(buf) < want + 1:
                    buf = None
                    buf = bytearray(want + 1)       # byte 0: room for the "[" before the first line
                got = _read_into(fd, buf, 1, want, pos)
                last = buf.rfind(b"\n", 1, got + 1)
                if last < 0:
                    if got <= MAX_LINE_BYTES:
                        break                       # the unfinished last line
                    pos = self._skip_long_line(fd, pos, pos + got, size, update)
                    continue
                lines = self._ingest_lines(buf, last, update)
                pos += last
                self._offset = pos
                if got < want or (pos + got - last >= size and got - last <= MAX_LINE_BYTES):
                    break                           # the end (an unfinished line at most)
                if not estimated:
                    # About as many rows to come as the bytes left hold lines like these.
                    self._cols.reserve(self._cols.n + int((size - pos) * lines / last * 1.15) + 1024)
                    estimated = True
        self.torn_tail = max(0, size - self._offset)

    def _skip_long_line(self, fd: int, start: int, search_from: int, size: int, update: HistoryUpdate) -> int:
        """Step over the line at ``start``, longer than MAX_LINE_BYTES: where the next line
        starts, or -1 while its end is not written yet."""
        newline = _find_newline(fd, search_from, size)
        if newline < 0:
            self._offset = start
            return -1
        self._lines += 1
        self._problem(update, f"{self.path.name} line {self._lines}: longer than {_size(MAX_LINE_BYTES)}: skipped")
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

    # -- both ----------------------------------------------------------------------
    def _ingest_elements(self, buf: bytearray, view: memoryview, seps: np.ndarray, first: int,
                         update: HistoryUpdate, careful: _Careful | None) -> int | None:
        """Add the elements between consecutive separators ``seps`` (buffer offsets), the
        first numbered ``first``, a batch at a time. Careful: the index of an element that
        was not read because the one before it and it could not be parsed (else None)."""
        for i in range(0, len(seps) - 1, BLOCK_LINES):
            stop = self._ingest_span(buf, view, seps[i:i + BLOCK_LINES + 1], first + i, update, careful)
            if stop is not None:
                return i + stop
        return None

    def _ingest_span(self, buf: bytearray, view: memoryview, seps: np.ndarray, first: int,
                     update: HistoryUpdate, careful: _Careful | None) -> int | None:
        """One batch: a typed decode of it all, else of each half in turn, down to a few
        elements read one by one."""
        n = len(seps) - 1
        s, e = int(seps[0]), int(seps[-1])
        if e - s <= MAX_LINE_BYTES + 1 or int(np.diff(seps).max()) <= MAX_LINE_BYTES + 1:
            buf[s], buf[e] = 0x5B, 0x5D             # "[" and "]"
            if self._typed_block(view[s:e + 1], lambda i, _: bytes(view[seps[i] + 1:seps[i + 1]]), first, update,
                                 n) >= 0:
                if careful is not None:
                    careful.failed = False
                return None
        if n > LEAF_LINES:
            mid = n // 2
            stop = self._ingest_span(buf, view, seps[:mid + 1], first, update, careful)
            if stop is None:
                stop = self._ingest_span(buf, view, seps[mid:], first + mid, update, careful)
                stop = None if stop is None else mid + stop
            return stop
        records: list[Any] = []
        stop = None
        for i in range(n):
            a, b = int(seps[i]) + 1, int(seps[i + 1])
            record = _BadLine(f"longer than {_size(MAX_LINE_BYTES)}: skipped") if b - a > MAX_LINE_BYTES \
                else _parse_line(bytes(view[a:b]))
            if careful is not None:
                failed = isinstance(record, _BadLine)
                if failed and careful.failed:
                    stop = i
                    break
                careful.failed = failed
            records.append(record)
        block = self._slow_columns(records, first, update)
        if len(block["step"]):
            self._add_block(block, update)
        return stop

    def _typed_block(self, text: memoryview, element: Callable[[int, list[_Line]], bytes], first: int,
                     update: HistoryUpdate, n: int | None = None) -> int:
        """The fast path: one typed decode of a clean batch, added; its element count,
        or -1 (and nothing added) if anything is off."""
        try:
            decoded = _decode_block(text)
        except Exception:               # invalid, or nested deeper than the decoder goes
            return -1
        if n is not None and len(decoded) != n:
            return -1
        block = self._typed_columns(decoded, element, first, update)
        if block is None:
            return -1
        self._add_block(block, update)
        return len(decoded)

    def _typed_columns(self, decoded: list[_Line], element: Callable[[int, list[_Line]], bytes], first: int,
                       update: HistoryUpdate) -> dict[str, Any] | None:
        """Columns of decoded records, their events added (read whole by ``element``); None,
        with nothing added, when a record needs the careful path."""
        if not decoded:
            return _columns_from_rows([])
        step, tokens, arms, *floats, events = zip(*map(_get_row, decoded))
        try:
            block = {"step": np.array(step, np.int64), "tokens": np.array(tokens, np.int64), "arm_names": arms,
                     **{name: np.array(col, np.float64) for name, col in zip(_FLOAT_COLUMNS, floats)}}
        except OverflowError:           # a step or token count past 64 bits
            return None
        found: list[tuple[dict[str, Any], int]] = []
        rows_before: list[int] = []             # step lines before each event in this batch
        if events.count(None) != len(decoded):
            is_step = np.equal(np.array(events, object), None)
            for n_before, i in enumerate(np.flatnonzero(~is_step).tolist()):     # events are rare: read them whole
                record = _parse_line(element(i, decoded))
                if not isinstance(record, dict) or "event" not in record \
                        or _nested_deeper(record, MAX_EVENT_NESTING):
                    return None
                found.append((record, first + i))
                rows_before.append(i - n_before)
            block = {name: (col[is_step] if name != "arm_names" else np.array(col, object)[is_step].tolist())
                     for name, col in block.items()}
        if len(block["step"]) and block["step"].min() < 0:
            return None
        for (record, line), before in zip(found, rows_before):
            self._add_event(record, line, update, before)
        return block

    # -- JSON arrays -------------------------------------------------------------
    def _read_array(self, fd: int, size: int, update: HistoryUpdate) -> None:
        """The whole array (another engine rewrites it), a block at a time."""
        if len(self) or self.events or self.bad_lines:
            identity = self._identity
            self._reset_state()
            self._identity, self.format = identity, "array"
            update.reset = True
        pos = os.pread(fd, 64 << 10, 0).find(b"[")  # where the format was told: after whitespace only
        number = 1
        buf: bytearray | None = None
        with _gc_paused():
            while 0 <= pos < size:
                want = min(BLOCK_BYTES, size - pos)
                if buf is None or len(buf) < want:
                    buf = None
                    buf = bytearray(want)
                got = _read_into(fd, buf, 0, want, pos)
                if not got:
                    break
                at_eof = pos + got >= size
                close = _closing_bracket(buf, got) if at_eof else -1
                cur, number, state = self._array_block(buf, got, close, at_eof, number, update)
                if state == "done":
                    break
                if state == "more":
                    pos += cur
                elif state == "long":
                    pos, number = self._long_element(fd, pos + cur + 1, size, number, update)
                else:                                # junk past this block: find the next element
                    pos = _find_resync(fd, pos + cur + 1, size)

    def _long_element(self, fd: int, start: int, size: int, number: int, update: HistoryUpdate) -> tuple[int, int]:
        """The array element at ``start`` that goes on past a scan: followed through the
        file to its end, read if short enough, else counted. Where to go on (-1: the end)."""
        end, after = _skip_element(fd, start, size)
        where = f"{self.path.name} element {number}"
        if end < 0:         # torn at the end, or junk that opens more than it closes: start again after it
            self._problem(update, f"{where}: " + ("torn or invalid element at the end of the JSON array"
                                                  if after == "torn" else "not readable JSON: skipped"))
            return _find_resync(fd, start, size), number + 1
        if end - start <= MAX_LINE_BYTES:
            record = _parse_line(os.pread(fd, end - start, start))
            self._add_block(self._slow_columns([record], number, update), update)
        else:
            self._problem(update, f"{where}: longer than {_size(MAX_LINE_BYTES)}: skipped")
        return (-1 if after == "]" else end), number + 1

    def _array_block(self, buf: bytearray, end: int, close: int, at_eof: bool, number: int,
                     update: HistoryUpdate) -> tuple[int, int, str]:
        """The elements of ``buf[:end]``, which starts at a separator ("[" or ","): the
        offset of the separator to read on from, the next element's number, and "done",
        "more" (read on from there) or "lost" (no next element in this block)."""
        view = memoryview(buf)
        limit = close + 1 if close >= 0 else end
        cur = 0
        while True:
            if cur == close:
                return cur, number, "done"
            b = _piece_end(buf, cur, end, close)
            if 0 < b - cur <= min(2 * ARRAY_PIECE_BYTES, MAX_LINE_BYTES):
                buf[cur], buf[b] = 0x5B, 0x5D
                n = self._typed_block(view[cur:b + 1], _piece_elements(view[cur:b + 1]), number, update)
                if n >= 0:
                    number, cur = number + n, b
                    continue
                if b != close:
                    buf[b] = 0x2C                   # "," again, for the scan below
            elif b < 0 and cur > 0 and not at_eof:
                return cur, number, "more"
            # The careful path: the exact structure of the next stretch.
            scan_to = min(limit, cur + 1 + MAX_LINE_BYTES + 2 * ARRAY_PIECE_BYTES)
            commas, closed, broken, in_string = _array_separators(buf, cur, scan_to)
            seps = np.array([cur, *commas, *([closed] if closed >= 0 else [])], np.int64)
            if len(seps) > 1:
                stop = self._ingest_elements(buf, view, seps, number, update, _Careful())
                if stop is None:
                    number += len(seps) - 1
                    cur = int(seps[-1])
                    if closed >= 0:
                        if _has_content(buf, closed + 1, end):
                            self._problem(update, f"{self.path.name}: data after the end of the JSON array: ignored")
                        return cur, number, "done"
                    continue
                # Two elements in a row unparsable: the scan lost its way (a stray quote in
                # junk). The first is counted; look for a new start inside it, in the
                # bytes as they were (the batches' "[" and "]" made commas again).
                if commas:
                    np.frombuffer(buf, np.uint8)[commas] = 0x2C
                number += stop
                resync_from = int(seps[stop - 1]) + 1
                found = _resync(buf, resync_from, limit, at_eof)
                # The elements skipped from the second one on: as many as the scan saw if it
                # saw right (unreadable elements in a row), else one.
                m = int(np.searchsorted(seps, found)) if found >= 0 else len(seps) - 1
                skipped = m - stop if found < 0 or (m < len(seps) and seps[m] == found) else max(1, m - stop)
                for _ in range(max(0, skipped)):
                    self._problem(update, f"{self.path.name} element {number}: not readable JSON: skipped")
                    number += 1
            elif scan_to == limit and not at_eof and cur > 0 and not broken:
                return cur, number, "more"          # the element goes on in the next block
            elif not broken and ((not in_string and scan_to < limit) or (cur == 0 and not at_eof)):
                return cur, number, "long"          # an element that goes on past the scan: followed to its end
            else:
                # No element ends here: junk (not even delimited) or a torn end. It is
                # counted; the next one starts after a comma, with an object or array.
                resync_from = cur + 1
                found = _resync(buf, resync_from, limit, at_eof)
                if found < 0 and at_eof:
                    if _has_content(buf, cur + 1, limit):
                        self._problem(update, f"{self.path.name} element {number}: torn or invalid element at the "
                                              "end of the JSON array")
                    return cur, number, "done"
                self._problem(update, f"{self.path.name} element {number}: not readable JSON: skipped")
                number += 1
            if found < 0:
                return resync_from - 1, number, "done" if at_eof else "lost"
            cur = found

    # -- adding --------------------------------------------------------------------
    def _add_block(self, block: dict[str, Any], update: HistoryUpdate) -> None:
        arms = block.pop("arm_names")
        codes = self._arm_codes
        for name in sorted(set(arms).difference(codes)):
            codes[name] = len(self.arm_names)
            self.arm_names.append(name)
        block["arm"] = np.array(list(map(codes.__getitem__, arms)), np.int32)
        steps = block["step"]
        if not len(steps):
            return
        nonfinite = int((~np.isfinite(block["loss"])).sum())
        self.nonfinite += nonfinite
        update.new_nonfinite += nonfinite
        if nonfinite:
            self.last_nonfinite_step = int(steps[np.flatnonzero(~np.isfinite(block["loss"]))[-1]])
        update.new_steps += len(steps)
        # Where the steps go back, in file order (the columns keep only the newest line per step).
        before = self.head_step
        back = np.flatnonzero(steps[1:] <= steps[:-1]) + 1
        if before is not None and steps[0] <= before:
            back = np.concatenate(([0], back))
        if len(back):
            self.rewind_count += len(back)
            self.rewinds.extend(zip(steps[back[-MAX_REWINDS:]].tolist(), block["time"][back[-MAX_REWINDS:]].tolist()))
            del self.rewinds[:-MAX_REWINDS]
        self.head_step = int(steps[-1])
        if self._cols.extend(block, self.superseded, self.rows_read):
            update.rewound = True
            first = int(block["step"].min())
            update.rewound_from = first if update.rewound_from is None else min(first, update.rewound_from)
        self.rows_read += len(block["step"])

    def _add_event(self, record: dict[str, Any], line: int, update: HistoryUpdate, rows_before: int = 0) -> None:
        step = record.get("step")
        step = step if _is_int(step) else None
        t = record.get("time")
        t = _as_float(t) if isinstance(t, (int, float)) and not isinstance(t, bool) else None
        event = HistoryEvent(str(record["event"]), step, t, line, record, self.rows_read + rows_before)
        self.events.append(event)
        update.new_events.append(event)

    def _problem(self, update: HistoryUpdate, message: str) -> None:
        self.bad_lines += 1
        update.new_bad_lines += 1
        if len(update.new_problems) < MAX_UPDATE_PROBLEMS:
            update.new_problems.append(message)
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(message)

    def _bad(self, update: HistoryUpdate, number: int, reason: str) -> None:
        """Line (or element) ``number`` is unreadable; its message is made only if kept."""
        if len(update.new_problems) < MAX_UPDATE_PROBLEMS or len(self.problems) < MAX_PROBLEMS:
            self._problem(update, f"{self.path.name} {self._unit} {number}: {reason}")
        else:
            self.bad_lines += 1
            update.new_bad_lines += 1

    def _slow_columns(self, records: list[Any], first_line: int, update: HistoryUpdate) -> dict[str, Any]:
        """The careful path: every record checked on its own, bad ones counted with their line."""
        rows = []
        for i, rec in enumerate(records):
            if isinstance(rec, _BadLine):
                self._bad(update, first_line + i, rec.reason)
            elif not isinstance(rec, dict):
                self._bad(update, first_line + i, "not a JSON object")
            elif rec.get("event") is not None:
                if _nested_deeper(rec, MAX_EVENT_NESTING):
                    self._bad(update, first_line + i, f"an event nested more than {MAX_EVENT_NESTING} levels deep")
                else:
                    self._add_event(rec, first_line + i, update, len(rows))
            elif not _is_int(step := rec.get("step")) or step < 0:
                self._bad(update, first_line + i, f"no valid \"step\" (got {_short_repr(step)})")
            else:
                tokens, arm = rec.get("tokens"), rec.get("arm")
                rows.append((step, tokens if _is_int(tokens) else -1, arm if isinstance(arm, str) else "",
                             *(_as_float(rec.get(name)) for name in _FLOAT_COLUMNS)))
        return _columns_from_rows(rows)


def _detect_format(head: bytes) -> str | None:
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


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and -2**63 <= value < 2**63


def _as_float(value: Any) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            return float(value)
        except OverflowError:
            return math.inf
    return math.nan


def _short_repr(value: Any) -> str:
    if isinstance(value, (dict, list)):
        return f"a JSON {'object' if isinstance(value, dict) else 'array'}"
    if isinstance(value, int) and not isinstance(value, bool) and not -10**30 < value < 10**30:
        return "a number too large"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _nested_deeper(value: Any, limit: int) -> bool:
    """Whether a parsed JSON value nests objects and arrays more than ``limit`` deep
    (found without recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False


def _columns_from_rows(rows: list[tuple[Any, ...]]) -> dict[str, Any]:
    if not rows:
        return {"step": np.empty(0, np.int64), "tokens": np.empty(0, np.int64), "arm_names": [],
                **{name: np.empty(0, np.float64) for name in _FLOAT_COLUMNS}}
    step, tokens, arms, *floats = zip(*rows)
    return {"step": np.array(step, np.int64), "tokens": np.array(tokens, np.int64), "arm_names": arms,
            **{name: np.array(col, np.float64) for name, col in zip(_FLOAT_COLUMNS, floats)}}


class _gc_paused:
    """Pause the cyclic GC while short-lived, acyclic parse results exist: it has nothing
    to find in them and would otherwise rescan them thousands of times."""

    def __enter__(self) -> None:
        self._was_enabled = gc.isenabled()
        gc.disable()

    def __exit__(self, *exc: object) -> None:
        if self._was_enabled:
            gc.enable()


class _BadLine:
    __slots__ = ("reason",)

    def __init__(self, reason: str):
        self.reason = reason


_CONTROL = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f]")


def _parse_line(line: bytes) -> Any:
    """One line (or element) parsed, or a :class:`_BadLine` saying why not; never raises."""
    if not line.strip():
        return _BadLine("blank line")
    if _CONTROL.search(line) is not None:      # JSON has none, in strings or out: binary junk
        return _BadLine("not text (binary data)")
    try:
        return orjson.loads(line)       # caps nesting itself (1,024 levels)
    except (ValueError, RecursionError):
        pass
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        return _BadLine("not text (binary data)")
    try:        # NaN / Infinity tokens and numbers past 64 bits, which orjson refuses and the stdlib takes
        value = json.loads(text)
    except (ValueError, RecursionError) as err:
        return _BadLine(f"not valid JSON ({str(err)[:80]})")
    if "\\u" in text and not _encodable(value):
        return _BadLine("not valid JSON (an unpaired surrogate)")
    return value


def _encodable(value: Any) -> bool:
    """Whether a value from the stdlib's parser can be written as UTF-8 (no lone surrogates)."""
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
        return True
    except (ValueError, RecursionError):
        return False


# -- reading in blocks -------------------------------------------------------------
def _read_into(fd: int, buf: bytearray, at: int, want: int, pos: int) -> int:
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


_SCAN_BYTES = 1 << 20


def _next_data(fd: int, pos: int) -> int:
    """The first offset at or after ``pos`` that is not in a hole of a sparse file (a
    hole reads as zeros: nothing to find there); -1 if only a hole is left."""
    if not hasattr(os, "SEEK_DATA"):   # pragma: no cover
        return pos
    try:
        return os.lseek(fd, pos, os.SEEK_DATA)
    except OSError as err:
        return -1 if err.errno == errno.ENXIO else pos


def _scan(fd: int, pos: int, size: int, find: Callable[[bytes], int], overlap: int = 0) -> int:
    """The offset of the first match of ``find`` (an index into a chunk, or -1) at or after
    ``pos`` (before ``size``), reading bounded chunks and jumping sparse holes; -1 if none.
    ``overlap`` bytes are read again across chunks, for matches longer than one byte."""
    while pos < size:
        pos = _next_data(fd, pos)
        if pos < 0 or pos >= size:
            return -1
        chunk = os.pread(fd, min(_SCAN_BYTES, size - pos), pos)
        if not chunk:
            return -1
        i = find(chunk)
        if i >= 0:
            return pos + i
        if pos + len(chunk) >= size:
            return -1
        pos += max(1, len(chunk) - overlap)
    return -1


def _find_newline(fd: int, pos: int, size: int) -> int:
    """The offset of the first newline at or after ``pos`` (before ``size``), or -1."""
    return _scan(fd, pos, size, lambda chunk: chunk.find(b"\n"))


def _find_resync(fd: int, pos: int, size: int) -> int:
    """The offset of the next "," where an object or array ends and another begins, at
    or after ``pos``; -1 if none."""
    def find(chunk: bytes) -> int:
        found = _RESYNC.search(chunk)
        return found.start(1) if found is not None else -1
    return _scan(fd, pos, size, find, overlap=256)

_WS = b" \t\r\n"
# Where one object ends and the next begins: the fast path's cuts (checked by the decode).
_BOUNDARY = re.compile(rb"\}[ \t\r\n]*(,)[ \t\r\n]*\{")
# Where an object or array begins after a comma: a new start after junk.
_RESYNC = re.compile(rb"(,)[ \t\r\n]*[{\[]")


def _resync(buf: bytearray, start: int, limit: int, at_eof: bool, tries: int = 64) -> int:
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
        commas, closed, _, _ = _array_separators(buf, comma, window)
        end = commas[0] if commas else closed
        if end < 0 and window == limit and not at_eof:
            return comma                # the element goes on in the next block
        if end > 0 and not isinstance(_parse_line(bytes(buf[comma + 1:end])), _BadLine):
            return comma
        pos = comma + 1
    return -1


def _closing_bracket(buf: bytearray, end: int) -> int:
    """The offset of the "]" that ends ``buf[:end]`` (past trailing whitespace), or -1."""
    j = end - 1
    while j > 0 and buf[j] in _WS:
        j -= 1
    return j if j > 0 and buf[j] == 0x5D else -1


def _has_content(buf: bytearray, start: int, end: int) -> bool:
    return bool(bytes(buf[start:end]).strip()) if start < end else False


def _piece_end(buf: bytearray, cur: int, end: int, close: int) -> int:
    """The "," (or the closing "]") ending a piece of about ARRAY_PIECE_BYTES from ``cur``,
    cut where an object ends and the next begins; -1 if none in ``buf[cur:end]``."""
    target = cur + ARRAY_PIECE_BYTES
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


def _array_separators(buf: bytearray, at: int, end: int) -> tuple[list[int], int, bool, bool]:
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


def _skip_element(fd: int, pos: int, size: int) -> tuple[int, str]:
    """From the first byte of a JSON array's element at file offset ``pos``, its end:
    the offset of the "," or "]" after it and which one; or -1 and "torn" (the file ends
    first) or "broken" (a "}" closes what was not open)."""
    state = (0, 0, 0)
    while pos < size:
        chunk = os.pread(fd, min(_SCAN_BYTES, size - pos), pos)
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


_decode_raw_array = msgspec.json.Decoder(list[msgspec.Raw]).decode


def _piece_elements(text: memoryview) -> Callable[[int, list[_Line]], bytes]:
    """The i-th element's bytes of a decoded piece of a JSON array (``text`` is the piece
    as an array): found around event keys, or by splitting the piece, when first asked."""
    spans: dict[int, bytes] = {}

    def element(i: int, decoded: list[_Line]) -> bytes:
        if not spans:
            data = bytes(text)
            wanted = [(j, r.event, r.step) for j, r in enumerate(decoded) if r.event is not None]
            found = _event_elements(data, wanted)
            spans.update(found if found is not None else dict(enumerate(map(bytes, _decode_raw_array(data)))))
        return spans[i]

    return element


def _event_elements(data: bytes, wanted: list[tuple[int, str, int]]) -> dict[int, bytes] | None:
    """The bytes of a JSON array's event elements, found around each ``"event"`` key instead
    of by splitting the whole array (events are rare; a split costs as much as the typed
    decode). ``wanted`` lists ``(index, event, step)`` of every event element, as the typed
    decode read them; the result maps each index to its bytes, or is None unless each one
    was found, in order, as a whole element of the top-level array."""
    decoder = json.JSONDecoder()
    found: dict[int, bytes] = {}
    pending = iter(wanted)
    current = next(pending, None)
    pos = 0
    while current is not None:
        hit = data.find(b'"event"', pos)
        if hit < 0:
            return None
        pos = hit + 1
        element = _element_around(data, hit, decoder)
        if element is None:
            continue                    # the text "event" somewhere else, or a nested object
        record, start, end = element
        index, event, step = current
        if record.get("event") == event and record.get("step", -1) == step:
            found[index] = data[start:end]
            current = next(pending, None)
    return found


def _element_around(data: bytes, at: int, decoder: json.JSONDecoder,
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


def _next_byte(data: bytes, i: int, direction: int) -> int:
    """The first byte after (``direction`` 1) or before (-1) offset ``i`` that is not
    JSON whitespace; -1 at either end."""
    i += direction
    while 0 <= i < len(data):
        if data[i] not in b" \t\r\n":
            return data[i]
        i += direction
    return -1


# -- the newest lines only ------------------------------------------------------------
# A summary of many runs reads this many bytes at the end of each history, never more:
# a few thousand steps of JSON Lines, whatever the file's size.
TAIL_BYTES = 32 << 10
_FLAT_OBJECT = re.compile(rb"\{[^{}]*\}")


@dataclass(frozen=True)
class HistoryTail:
    """The newest steps of a history (the last :data:`TAIL_BYTES` of the file) up to where
    the run is, as columns sorted by step, and its events in file order. ``complete`` is True
    when the whole file fit in the tail (the columns are then the whole history). Steps after
    the head (the step of the newest step line), an earlier segment's that the current one has
    not run again, are not in the columns: ``steps_ahead`` counts them."""

    format: str | None
    step: np.ndarray
    loss: np.ndarray
    tokens: np.ndarray
    time: np.ndarray
    events: tuple[HistoryEvent, ...]
    size: int = 0
    mtime: float | None = None
    complete: bool = True
    bad_lines: int = 0
    torn_tail: int = 0
    error: str | None = None
    steps_ahead: int = 0


def _empty_tail(**fields: Any) -> HistoryTail:
    empty = np.empty(0)
    return HistoryTail(fields.pop("format", None), np.empty(0, np.int64), empty, np.empty(0, np.int64), empty, (),
                       **fields)


def read_history_tail(path: str | os.PathLike[str], max_bytes: int = TAIL_BYTES) -> HistoryTail:
    """The newest lines of ``.loss.json``: one bounded read at the end of the file, the
    first (cut) line of it dropped; never raises, never reads more than ``max_bytes``.
    A JSON array (another engine's history) gives its newest flat elements the same way."""
    path = Path(path)
    try:
        fd, st = open_regular(path)
    except FileNotFoundError:
        return _empty_tail()
    except ValueError as err:
        return _empty_tail(error=f"{path.name}: {err}")
    except OSError as err:
        return _empty_tail(error=f"{path.name}: cannot read: {err.strerror or err}")
    try:
        size = st.st_size
        start = max(0, size - max_bytes)
        head = os.pread(fd, min(size, 64 << 10), 0) if start else b""
        data = os.pread(fd, size - start, start)
    except OSError as err:
        return _empty_tail(error=f"{path.name}: cannot read: {err.strerror or err}", size=st.st_size)
    finally:
        os.close(fd)
    fmt = _detect_format(head if start else data)
    bad = torn = 0
    if fmt == "array":
        # Elements cut by the read, or nested, are not flat objects: only whole ones are taken.
        pieces = [match.group() for match in _FLAT_OBJECT.finditer(data)]
    else:
        pieces = data.split(b"\n")
        if start:
            pieces = pieces[1:]                    # cut by the read: not a whole line
        if pieces and pieces[-1].strip():
            torn = len(pieces[-1])                 # not a line until its newline lands
        pieces = [line for line in pieces[:-1] if line.strip()]
    parsed = _tail_typed(pieces) if pieces else ([], [], 0)
    steps, events, bad_pieces = parsed if parsed is not None else _tail_careful(pieces)
    bad += bad_pieces
    head = steps[-1][0] if steps else None
    steps.sort(key=lambda row: row[0])
    # The newest line for a step wins (a resumed run writes its steps again).
    unique = list({row[0]: row for row in steps}.values())
    behind = [row for row in unique if row[0] <= head] if head is not None else unique
    ahead, unique = len(unique) - len(behind), behind
    cols = list(zip(*unique)) if unique else [(), (), (), ()]
    return HistoryTail(fmt, np.array(cols[0], np.int64), np.array(cols[1], np.float64), np.array(cols[2], np.int64),
                       np.array(cols[3], np.float64), tuple(events), size=size, mtime=st.st_mtime,
                       complete=start == 0, bad_lines=bad, torn_tail=torn, steps_ahead=ahead)


def _tail_typed(pieces: list[bytes]) -> tuple[list[tuple[int, float, int, float]], list[HistoryEvent], int] | None:
    """``(steps, events, bad)`` through the typed decoder in one call; None when a piece
    needs the careful path (not JSON, NaN tokens, a field of another type)."""
    try:
        decoded = _decode_block(b"[" + b",".join(pieces) + b"]")
    except msgspec.DecodeError:
        return None
    if len(decoded) != len(pieces):                # a line holding a comma-joined pair
        return None
    steps, events, bad = [], [], 0
    for number, line in enumerate(decoded):
        if line.event is not None:
            record = orjson.loads(pieces[number])
            if not _nested_deeper(record, MAX_EVENT_NESTING):
                events.append(HistoryEvent(line.event, line.step if line.step != -1 else None, line.time, number,
                                           record))
        elif line.step == -1 or line.loss is None and b'"loss"' not in pieces[number]:
            bad += 1
        else:
            steps.append((line.step, math.nan if line.loss is None else line.loss, line.tokens, line.time))
    return steps, events, bad


def _tail_careful(pieces: list[bytes]) -> tuple[list[tuple[int, float, int, float]], list[HistoryEvent], int]:
    """``(steps, events, bad)``, piece by piece (each parsed on its own, checked field by field)."""
    steps, events, bad = [], [], 0
    for number, piece in enumerate(pieces):
        record = _parse_line(piece)
        if not isinstance(record, dict):
            bad += 1
            continue
        step = record.get("step")
        if "event" in record:
            if isinstance(record["event"], str) and not _nested_deeper(record, MAX_EVENT_NESTING):
                events.append(HistoryEvent(record["event"], step if _is_int(step) else None,
                                           _as_float(record.get("time")), number, record))
            continue
        if not _is_int(step) or "loss" not in record:
            bad += 1
            continue
        tokens = record.get("tokens")
        steps.append((int(step), _as_float(record.get("loss")), int(tokens) if _is_int(tokens) else -1,
                      _as_float(record.get("time"))))
    return steps, events, bad
