"""``.loss.json``: the append-only training history (DESIGN.md section 4).

:class:`LossHistoryWriter` appends one JSON line per ``write``; :class:`LossHistory`
reads incrementally, remembering a byte offset and parsing only new bytes, and keeps
the step lines as numpy columns sorted by step with the newest line for a step winning.
It also reads a whole-file JSON array (other engines write that), ``NaN``/``Infinity``
tokens, unknown keys and a torn last line.
"""

from __future__ import annotations

import gc
import json
import math
import os
from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path
from typing import Any, Callable

import msgspec
import numpy as np
import orjson


# Lines are parsed in blocks this size, so one bad line sends only its block down the
# slow per-line path.
BLOCK_LINES = 4096
MAX_PROBLEMS = 20

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


class LossHistoryWriter:
    """Appends history lines: one ``write`` per line (so a reader sees whole lines or a torn
    tail, never interleaving), flushed at once, fsynced on demand (at every checkpoint)."""

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        # A torn last line from a crashed writer must not swallow our first line.
        size = os.fstat(self._fd).st_size
        if size:
            with open(self.path, "rb") as fh:
                fh.seek(size - 1)
                if fh.read(1) != b"\n":
                    os.write(self._fd, b"\n")

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


@dataclass
class HistoryUpdate:
    """What one :meth:`LossHistory.refresh` picked up."""

    new_steps: int = 0
    new_events: list[HistoryEvent] = field(default_factory=list)
    new_problems: list[str] = field(default_factory=list)
    new_nonfinite: int = 0
    rewound: bool = False      # a step at or before one already seen (a resume re-ran steps)
    reset: bool = False        # the file shrank or was replaced: everything was re-read

    @property
    def changed(self) -> bool:
        return bool(self.new_steps or self.new_events or self.new_problems or self.reset)

    def then(self, later: "HistoryUpdate") -> "HistoryUpdate":
        """This update followed by ``later``, as if one refresh had picked up both."""
        return HistoryUpdate(self.new_steps + later.new_steps, self.new_events + later.new_events,
                             self.new_problems + later.new_problems, self.new_nonfinite + later.new_nonfinite,
                             self.rewound or later.rewound, self.reset or later.reset)


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

    def _reserve(self, total: int) -> None:
        if total <= len(self.step):
            return
        capacity = max(total, 2 * len(self.step), 1024)
        for name, old in self._arrays():
            new = np.empty(capacity, old.dtype)
            new[: self.n] = old[: self.n]
            self.replace(name, new)

    def replace(self, name: str, arr: np.ndarray) -> None:
        if name in self.floats:
            self.floats[name] = arr
        else:
            setattr(self, name, arr)

    def extend(self, block: dict[str, np.ndarray]) -> bool:
        """Add rows (in file order); returns True when that rewound over known steps."""
        k = len(block["step"])
        if not k:
            return False
        steps = block["step"]
        in_order = bool(np.all(steps[1:] > steps[:-1])) and (self.n == 0 or steps[0] > self.step[self.n - 1])
        self._reserve(self.n + k)
        for name, arr in self._arrays():
            arr[self.n:self.n + k] = block[name]
        self.n += k
        if not in_order:
            self._keep_newest_per_step()
        return not in_order

    def _keep_newest_per_step(self) -> None:
        steps = self.step[: self.n]
        order = np.argsort(steps, kind="stable")      # equal steps stay in file order
        sorted_steps = steps[order]
        is_last = np.append(sorted_steps[1:] != sorted_steps[:-1], True)
        keep = order[is_last]
        for _, arr in self._arrays():
            arr[: len(keep)] = arr[: self.n][keep]
        self.n = len(keep)


class LossHistory:
    """Incremental reader of ``.loss.json``.

    Call :meth:`refresh` whenever the file may have grown; it reads only the bytes
    after the remembered offset. Columns (``step``, ``loss``, ``lr``, ``grad_norm``,
    ``tokens``, ``time``, ``arm`` codes into ``arm_names``) are numpy views sorted by
    step, one row per step (the newest line for a step wins). A null loss is NaN.
    Events are kept in file order in ``events``; lines that cannot be read are counted
    in ``bad_lines`` with the first few reasons in ``problems``.
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
                "events": [[e.event, e.step, e.time, e.line, e.data] for e in self.events]}
        return meta, {name: arr[: self._cols.n] for name, arr in self._cols._arrays()}

    @classmethod
    def from_state_dict(cls, meta: dict[str, Any], columns: dict[str, np.ndarray]) -> "LossHistory":
        """A reader that carries on from :meth:`state_dict`'s output: its next
        :meth:`refresh` reads only what was appended since."""
        history = cls(meta["path"])
        cols = history._cols
        cols.n = len(columns["step"])
        for name, empty in cols._arrays():
            arr = np.array(columns[name], empty.dtype)       # a writable copy of the right type
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
        """Read what was appended since the last call; never raises."""
        update = HistoryUpdate()
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            if self._identity is not None:
                self._reset_state()
                update.reset = True
            self.error = None
            return update
        except OSError as err:
            self.error = f"cannot read {self.path.name}: {err.strerror}"
            return update
        try:
            st = os.fstat(fd)
            identity = (st.st_dev, st.st_ino)
            shrank = st.st_size < self._offset + self.torn_tail
            if self._identity is not None and (identity != self._identity or shrank):
                self._reset_state()
                update.reset = True
            self._identity = identity
            self.error = None
            if self.format is None and st.st_size:
                head = os.pread(fd, 64, 0).lstrip()
                if head:
                    self.format = "array" if head[:1] == b"[" else "jsonl"
            if self.format == "array":
                if self._array_mtime != (st.st_mtime_ns, st.st_size):
                    self._read_array(os.pread(fd, st.st_size, 0), update)
                    self._array_mtime = (st.st_mtime_ns, st.st_size)
            elif st.st_size > self._offset:
                self._read_lines(os.pread(fd, st.st_size - self._offset, self._offset), update)
        except OSError as err:
            self.error = f"cannot read {self.path.name}: {err.strerror}"
        finally:
            os.close(fd)
        return update

    def _read_lines(self, data: bytes, update: HistoryUpdate) -> None:
        end = data.rfind(b"\n") + 1
        self.torn_tail = len(data) - end
        if not end:
            return
        self._offset += end
        newlines = np.flatnonzero(np.frombuffer(data, np.uint8, end) == 10)
        # One translated copy serves every block: with a pad byte in front, the byte
        # before a block and its last newline become "[" and "]", so each block of
        # lines decodes as one JSON array without being copied again.
        buf = bytearray(b" ")
        buf += data[:end].replace(b"\n", b",")
        view = memoryview(buf)
        with _gc_paused():
            start = 0
            for first in range(0, len(newlines), BLOCK_LINES):
                ends = newlines[first:first + BLOCK_LINES]
                last = int(ends[-1]) + 1          # one past the block's last newline
                buf[start], buf[last] = 0x5B, 0x5D  # "[" and "]"
                self._ingest(view[start:last + 1], len(ends),
                             lambda i, s=start, e=ends: data[(e[i - 1] + 1 if i else s):e[i]], update)
                self._lines += len(ends)
                start = last
        view.release()

    def _read_array(self, data: bytes, update: HistoryUpdate) -> None:
        if len(self) or self.events or self.bad_lines:
            self._reset_state()
            self.format = "array"
            update.reset = True
        with _gc_paused():
            try:
                decoded = _decode_block(data)
            except (msgspec.DecodeError, msgspec.ValidationError):
                records = _parse_array(data)
                if isinstance(records, str):
                    self._problem(update, f"{self.path.name}: {records}")
                else:
                    self._add_block(self._slow_columns(records, 1, update), update)
                return
            wanted = [(i, r.event, r.step) for i, r in enumerate(decoded) if r.event is not None]
            spans = _event_elements(data, wanted) if wanted else {}
            elements: list[msgspec.Raw] = []

            def element(i: int) -> bytes:
                if spans is not None:
                    return spans[i]
                if not elements:         # events not found for certain: split the whole array
                    elements.extend(_decode_raw_array(data))
                return bytes(elements[i])

            # Columns are taken a cache-sized batch of records at a time, as for lines.
            for first in range(0, len(decoded), BLOCK_LINES):
                block = self._typed_columns(decoded[first:first + BLOCK_LINES], lambda i, f=first: element(f + i),
                                            first + 1, update)
                self._add_block(block if block is not None else _columns_from_rows([]), update)

    def _ingest(self, text: memoryview, n: int, line_at: Callable[[int], bytes], update: HistoryUpdate) -> None:
        """Add a block of ``n`` lines, ``text`` being them as one JSON array and
        ``line_at(i)`` the i-th line alone."""
        first_line = self._lines + 1
        block = self._typed_block(text, n, line_at, first_line, update)
        if block is None:
            block = self._slow_columns([_parse_line(line_at(i)) for i in range(n)], first_line, update)
        self._add_block(block, update)

    def _typed_block(self, text: bytes | memoryview, n: int, line_at: Callable[[int], bytes],
                     first_line: int, update: HistoryUpdate) -> dict[str, Any] | None:
        """The fast path: one typed decode of a clean block (None if anything is off)."""
        try:
            decoded = _decode_block(text)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return None
        if len(decoded) != n:
            return None
        return self._typed_columns(decoded, line_at, first_line, update)

    def _typed_columns(self, decoded: list[_Line], line_at: Callable[[int], bytes], first_line: int,
                       update: HistoryUpdate) -> dict[str, Any] | None:
        """Columns of decoded records; their events are added (read whole by ``line_at``)."""
        if not decoded:
            return _columns_from_rows([])
        step, tokens, arms, *floats, events = zip(*map(_get_row, decoded))
        block = {"step": np.array(step, np.int64), "tokens": np.array(tokens, np.int64), "arm_names": arms,
                 **{name: np.array(col, np.float64) for name, col in zip(_FLOAT_COLUMNS, floats)}}
        if events.count(None) != len(decoded):
            is_step = np.equal(np.array(events, object), None)
            for i in np.flatnonzero(~is_step):     # events are rare: read them whole
                self._add_event(orjson.loads(line_at(int(i))), first_line + int(i), update)
            block = {name: (col[is_step] if name != "arm_names" else np.array(col, object)[is_step].tolist())
                     for name, col in block.items()}
        if len(block["step"]) and block["step"].min() < 0:
            return None
        return block

    def _add_block(self, block: dict[str, Any], update: HistoryUpdate) -> None:
        arms = block.pop("arm_names")
        codes = self._arm_codes
        for name in sorted(set(arms).difference(codes)):
            codes[name] = len(self.arm_names)
            self.arm_names.append(name)
        block["arm"] = np.array(list(map(codes.__getitem__, arms)), np.int32)
        nonfinite = int((~np.isfinite(block["loss"])).sum())
        self.nonfinite += nonfinite
        update.new_nonfinite += nonfinite
        update.new_steps += len(block["step"])
        if self._cols.extend(block):
            update.rewound = True

    def _add_event(self, record: dict[str, Any], line: int, update: HistoryUpdate) -> None:
        step = record.get("step")
        step = step if isinstance(step, int) and not isinstance(step, bool) else None
        t = record.get("time")
        t = float(t) if isinstance(t, (int, float)) and not isinstance(t, bool) else None
        event = HistoryEvent(str(record["event"]), step, t, line, record)
        self.events.append(event)
        update.new_events.append(event)

    def _problem(self, update: HistoryUpdate, message: str) -> None:
        self.bad_lines += 1
        update.new_problems.append(message)
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(message)

    def _slow_columns(self, records: list[Any], first_line: int, update: HistoryUpdate) -> dict[str, Any]:
        """The careful path: every record checked on its own, bad ones counted with their line."""
        rows = []
        for i, rec in enumerate(records):
            line = first_line + i
            if isinstance(rec, _BadLine):
                self._problem(update, f"{self.path.name} line {line}: {rec.reason}")
            elif not isinstance(rec, dict):
                self._problem(update, f"{self.path.name} line {line}: not a JSON object")
            elif "event" in rec:
                self._add_event(rec, line, update)
            elif not _is_int(step := rec.get("step")) or step < 0:
                self._problem(update, f"{self.path.name} line {line}: no valid \"step\" (got {step!r})")
            else:
                tokens, arm = rec.get("tokens"), rec.get("arm")
                rows.append((step, tokens if _is_int(tokens) else -1, arm if isinstance(arm, str) else "",
                             *(_as_float(rec.get(name)) for name in _FLOAT_COLUMNS)))
        return _columns_from_rows(rows)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and -2**63 <= value < 2**63


def _as_float(value: Any) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            return float(value)
        except OverflowError:
            return math.inf
    return math.nan


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


def _parse_line(line: bytes) -> Any:
    if not line.strip():
        return _BadLine("blank line")
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError:
        pass
    try:  # NaN / Infinity tokens, which orjson rejects and the stdlib accepts
        return json.loads(line)
    except (ValueError, RecursionError) as err:
        return _BadLine(f"not valid JSON ({str(err)[:80]})")


_decode_raw_array = msgspec.json.Decoder(list[msgspec.Raw]).decode


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
        except ValueError:
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


def _parse_array(data: bytes) -> list[Any] | str:
    """A whole-file JSON array the fast path refused: NaN tokens, or a torn end."""
    try:
        value = json.loads(data)
    except (ValueError, RecursionError):
        pass
    else:
        return value if isinstance(value, list) else "a JSON array file whose top level is not an array"
    # Torn: keep every complete element before the break.
    decoder = json.JSONDecoder()
    text = data.decode("utf-8", errors="replace")
    pos = text.find("[") + 1
    out: list[Any] = []
    while True:
        while pos < len(text) and text[pos] in " \t\r\n,":
            pos += 1
        if pos >= len(text) or text[pos] == "]":
            break
        try:
            value, pos = decoder.raw_decode(text, pos)
        except (ValueError, RecursionError):
            out.append(_BadLine("torn or invalid element at the end of the JSON array"))
            break
        out.append(value)
    return out
