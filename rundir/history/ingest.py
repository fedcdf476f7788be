"""Lines into columns: what the JSON Lines reader and the JSON-array reader share.

Both cut the file into elements (lines, or an array's elements) and hand them here by
their separators' offsets; :class:`Ingest` decodes them a batch at a time and adds the
step lines to the columns, the events to the events and the unreadable ones to the count,
with their reasons. A batch goes down once and comes back as columns:

- **the C scanner** (``rundir/_line_scan.c``, :func:`scanned_columns`) reads a batch of
  step lines straight into the columns, with no Python object per line, in about half the
  time of the typed decode (``python -m bench mirror``). It reads the lines as that decode
  does or not at all: on anything else (a key never seen, a value of another type, escapes,
  nesting; the C file's comment lists them) it gives up. Optional: built at install when a
  C compiler is there;
- else **the typed decode** of the batch (:func:`~.records.typed_series_batch`), else of
  each half in turn, down to a few elements read one by one, :mod:`.records` saying what
  each one is.
"""

from __future__ import annotations

import functools
from bisect import bisect_left
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from . import limits
from .blocks import size_text
from .columns import Columns, Superseded
from .evals import EvalSeries
from .keys import BASE_KEYS, SeriesKeys
from .records import (
    EVENT_KEY,
    BadLine,
    Batch,
    HistoryEvent,
    batch_events,
    careful_batch,
    event_of,
    nonfinite_mask,
    parse_line,
    typed_series_batch,
)

try:
    from .._line_scan import scan as _scan
except ImportError:                 # no C compiler at install: the typed decode reads every batch
    _scan = None

# The C scanner's code of each key a step line's columns take (rundir/_line_scan.c).
_BASE_CODES = {"step": 0, "tokens": 1, "arm": 2, "loss": 3, "lr": 4, "grad_norm": 5, "time": 6, "event": 7}
_OTHER_CODE, _SERIES_CODE = 8, 16
assert set(_BASE_CODES) == BASE_KEYS


@dataclass
class HistoryUpdate:
    """What one :meth:`LossHistory.refresh` picked up. ``new_problems`` holds the first
    :data:`~.limits.MAX_UPDATE_PROBLEMS` reasons; ``new_bad_lines`` counts them all."""

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
                             (self.new_problems + later.new_problems)[:limits.MAX_UPDATE_PROBLEMS],
                             self.new_nonfinite + later.new_nonfinite, self.rewound or later.rewound,
                             self.reset or later.reset, self.new_bad_lines + later.new_bad_lines,
                             min(froms) if froms else None)


class Careful:
    """The state of a careful read of a JSON array's elements, whose bounds come from a
    scan of its structure: two unparsable elements in a row mean the scan lost its way
    (binary junk with a stray quote), and the reader looks for the next element anew."""

    __slots__ = ("failed",)

    def __init__(self) -> None:
        self.failed = False


class Ingest:
    """What a history's lines are added to: the step columns, the arm names, the events,
    the unreadable lines' count and first reasons, and what the step lines said on the way
    (non-finite losses, rewinds, the head). :class:`~.reader.LossHistory` is one."""

    path: Path
    format: str | None

    def _reset_rows(self) -> None:
        self._cols = Columns()
        self._lines = 0                         # lines (or elements) numbered so far
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
        self.rows_read = 0                      # step lines read (replaced ones too)
        self.superseded = Superseded()          # replaced step lines, for resume verification
        self.keys = SeriesKeys()                # the step lines' keys: which are series
        self.evals = EvalSeries()               # the eval events, as series

    @property
    def _unit(self) -> str:
        return "element" if self.format == "array" else "line"

    # -- decoding ------------------------------------------------------------------
    def _ingest_elements(self, buf: bytearray, view: memoryview, seps: np.ndarray, first: int,
                         update: HistoryUpdate, careful: Careful | None) -> int | None:
        """Add the elements between consecutive separators ``seps`` (buffer offsets), the
        first numbered ``first``, a batch at a time. Careful: the index of an element that
        was not read because the one before it and it could not be parsed (else None)."""
        for i in range(0, len(seps) - 1, limits.BLOCK_LINES):
            stop = self._ingest_span(buf, view, seps[i:i + limits.BLOCK_LINES + 1], first + i, update, careful)
            if stop is not None:
                return i + stop
        return None

    def _ingest_span(self, buf: bytearray, view: memoryview, seps: np.ndarray, first: int,
                     update: HistoryUpdate, careful: Careful | None) -> int | None:
        """One batch: a typed decode of it all, else of each half in turn, down to a few
        elements read one by one."""
        n = len(seps) - 1
        s, e = int(seps[0]), int(seps[-1])
        max_line = limits.MAX_LINE_BYTES
        if e - s <= max_line + 1 or int(np.diff(seps).max()) <= max_line + 1:
            buf[s], buf[e] = 0x5B, 0x5D             # "[" and "]"

            def event_at(offset: int) -> tuple[int, int]:
                i = bisect_left(seps, offset) - 1          # the line holding it (few events: no numpy call)
                return int(seps[i]), int(seps[i + 1])

            if self._typed_block(buf, s, e, first, update, n, event_at) >= 0:
                if careful is not None:
                    careful.failed = False
                return None
        if n > limits.LEAF_LINES:
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
            record = BadLine(f"longer than {size_text(max_line)}: skipped") if b - a > max_line \
                else parse_line(bytes(view[a:b]))
            if careful is not None:
                failed = isinstance(record, BadLine)
                if failed and careful.failed:
                    stop = i
                    break
                careful.failed = failed
            records.append(record)
        self._add_batch(careful_batch(records, first, self.keys), update)
        return stop

    def _typed_block(self, buf: bytearray, start: int, end: int, first: int, update: HistoryUpdate,
                     n: int | None, event_at: Callable[[int], tuple[int, int] | None]) -> int:
        """The fast path: the clean batch in ``buf[start:end + 1]`` read by the C scanner, else
        by the typed decode (:func:`~.records.typed_series_batch`), and added; its element
        count, or -1 (and nothing added) if anything is off."""
        batch = self._scanned_batch(buf, start, end, first, n, event_at) if n is not None else None
        if batch is None:
            batch = typed_series_batch(buf, start, end, first, self.keys, n, event_at)
        if batch is None:
            return -1
        self._add_batch(batch, update)
        return len(batch.columns["step"]) + len(batch.events) + len(batch.bad)

    def _scanned_batch(self, buf: bytearray, start: int, end: int, first: int, n: int,
                       event_at: Callable[[int], tuple[int, int] | None]) -> Batch | None:
        """The batch as the C scanner reads it, its event lines (rare) read whole; None when
        it gave up or is not built."""
        if _scan is None:
            return None
        found = ([], []) if buf.find(EVENT_KEY, start, end) < 0 else batch_events(buf, start, end, event_at)
        if found is None:
            return None
        spans, records = found
        scanned = scanned_columns(buf, start, end, n, self.keys, spans)
        if scanned is None:
            return None
        block, at = scanned
        return Batch(block, [(record, first + i, i - k) for k, (record, i) in enumerate(zip(records, at))], [])

    # -- adding --------------------------------------------------------------------
    def _add_batch(self, batch: Batch, update: HistoryUpdate) -> None:
        """A batch's events, unreadable lines and step lines, in that order."""
        for record, line, rows_before in batch.events:
            event = event_of(record, line, self.rows_read + rows_before)
            self.events.append(event)
            self.evals.add(event)
            update.new_events.append(event)
        for line, why in batch.bad:
            self._bad(update, line, why)
        self._add_block(batch.columns, update)

    def _add_block(self, block: dict[str, Any], update: HistoryUpdate) -> None:
        # The arms: a name per row, or (from the C scanner) a table of names and an index into it.
        table = block.pop("arm_table", None)
        arms = block.pop("arm_names") if table is None else table
        codes = self._arm_codes
        for name in sorted(set(arms).difference(codes)):
            codes[name] = len(self.arm_names)
            self.arm_names.append(name)
        if table is None:
            block["arm"] = np.array(list(map(codes.__getitem__, arms)), np.int32)
        else:
            index = block.pop("arm_index")         # no rows: no names either
            block["arm"] = np.array([codes[name] for name in table], np.int32)[index] if table else index
        steps = block["step"]
        if not len(steps):
            return
        bad = nonfinite_mask(block["loss"])
        nonfinite = int(bad.sum())
        self.nonfinite += nonfinite
        update.new_nonfinite += nonfinite
        if nonfinite:
            self.last_nonfinite_step = int(steps[np.flatnonzero(bad)[-1]])
        update.new_steps += len(steps)
        # Where the steps go back, in file order (the columns keep only the newest line per step).
        # A step logged again right after itself (a step's values in several calls) goes nowhere.
        before = self.head_step
        back = np.flatnonzero(steps[1:] < steps[:-1]) + 1
        if before is not None and steps[0] < before:
            back = np.concatenate(([0], back))
        if len(back):
            keep = back[-limits.MAX_REWINDS:]
            self.rewind_count += len(back)
            self.rewinds.extend(zip(steps[keep].tolist(), block["time"][keep].tolist()))
            del self.rewinds[:-limits.MAX_REWINDS]
        self.head_step = int(steps[-1])
        if self._cols.extend(block, self.superseded, self.rows_read):
            update.rewound = True
            first = int(block["step"].min())
            update.rewound_from = first if update.rewound_from is None else min(first, update.rewound_from)
        self.rows_read += len(block["step"])

    def _problem(self, update: HistoryUpdate, message: str) -> None:
        self.bad_lines += 1
        update.new_bad_lines += 1
        if len(update.new_problems) < limits.MAX_UPDATE_PROBLEMS:
            update.new_problems.append(message)
        if len(self.problems) < limits.MAX_PROBLEMS:
            self.problems.append(message)

    def _bad(self, update: HistoryUpdate, number: int, reason: str) -> None:
        """Line (or element) ``number`` is unreadable; its message is made only if kept."""
        if len(update.new_problems) < limits.MAX_UPDATE_PROBLEMS or len(self.problems) < limits.MAX_PROBLEMS:
            self._problem(update, f"{self.path.name} {self._unit} {number}: {reason}")
        else:
            self.bad_lines += 1
            update.new_bad_lines += 1


@functools.lru_cache(maxsize=16)
def _key_table(series: tuple[str, ...], other: tuple[str, ...]) -> tuple[tuple[bytes, ...], tuple[int, ...]]:
    table = [(name.encode(), code) for name, code in _BASE_CODES.items()]
    table += [(name.encode(), _SERIES_CODE + j) for j, name in enumerate(series)]
    table += [(name.encode(), _OTHER_CODE) for name in other]
    return tuple(key for key, _ in table), tuple(code for _, code in table)


def scanned_columns(buf: bytearray, start: int, end: int, n: int, keys: SeriesKeys,
                    event_spans: list[tuple[int, int]]) -> tuple[dict[str, Any], list[int]] | None:
    """The C scanner's read of the step columns of the ``n`` elements of the JSON array
    ``buf[start:end + 1]``, the event elements (between the separators of ``event_spans``)
    left out, and the index of each of those among the ``n``; None when the scanner gave up
    (or is not built). The columns are a block as :meth:`Ingest._add_block` takes it, the
    arms as ``arm_table`` (names) and ``arm_index`` (into it)."""
    if _scan is None or n <= 0:
        return None
    key_bytes, codes = _key_table(tuple(keys.series), tuple(sorted(keys.other)))
    step, tokens = np.empty(n, np.int64), np.empty(n, np.int64)
    arm = np.empty(n, np.int32)
    floats = [np.empty(n, np.float64) for _ in range(4)]
    series = np.empty((len(keys.series), n), np.float64)
    got = _scan(buf, start, end, n, key_bytes, codes, keys.full, tuple(event_spans),
                (step, tokens, arm, *floats, series))
    if got is None:
        return None
    rows, event_elements, arm_table = got
    block: dict[str, Any] = {"step": step[:rows], "tokens": tokens[:rows], "arm_index": arm[:rows],
                             "arm_table": arm_table}
    block.update(zip(("loss", "lr", "grad_norm", "time"), (column[:rows] for column in floats)))
    block["series"] = {name: series[j, :rows] for j, name in enumerate(keys.series)}
    return block, event_elements
