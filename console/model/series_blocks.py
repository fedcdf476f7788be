"""The series table's figures kept, not recomputed: each series' count, mean, min, max and
last (with their steps) over every block of :data:`BLOCK_ROWS` step lines, computed once per
block and merged, so that the table (``t``, ``--once``, ``--json``) costs the blocks' number
plus the rows since the last whole one, not every value of every series.

A block's figures leave out the steps the run left behind as the table always did
(:func:`rundir.abandoned.abandoned_mask`: a rollback's abandoned steps), and only blocks
wholly at or before the head are kept (the steps after it are none of the figures). What
changes rows or which of them are abandoned forgets the blocks from there on
(:meth:`SeriesBlocks.follow`): a rewind (the rows from its first step), a new ``rollback``
event (the rows after its ``to_step``), a history replaced (all). The blocks of the rows a
history's mirror holds are kept beside it (:mod:`console.read.history_mirror`) and carried on
at the next open, so that a long run's table costs a second open almost nothing.

Series that are not one value per step line (the eval series, ``p/<arm>``) are short or
sparse: they are summarized whole, as before.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Callable, Iterable, Optional

import numpy as np

from rundir.abandoned import abandoned_mask, head_rows
from rundir.history.limits import MAX_SUPERSEDED
from rundir.layout import EVENT_ROLLBACK
from rundir.step_rows import search_steps

if TYPE_CHECKING:
    from rundir import HistoryEvent, HistoryUpdate, LossHistory

    from .snapshot import HistoryView

BLOCK_ROWS = 1 << 16
PULLS = "\0pulls"                # the arms' pulls' blocks, beside the series'
# (count, mean, min, min step, max, max step, last, last step) of a block's finite values;
# None: a block with none.
Stats = Optional[tuple[int, float, float, int, float, int, float, int]]
# Below this magnitude a sum of values cannot overflow a float64 (2**53 of them at most).
PLAIN_SUM_BELOW = 1e290


def mean_of(values: np.ndarray, largest: float) -> float:
    """The mean of finite ``values`` whose largest magnitude is ``largest``, without overflow:
    near a float's range summed as fractions of it (two values of 1e308 have the mean 1e308,
    not inf), else as they are (no temporary copy of a long column)."""
    if largest < PLAIN_SUM_BELOW:
        return float(np.mean(values, dtype=np.float64))
    return largest * float(np.mean(values / largest, dtype=np.float64))


def _first(values: np.ndarray, extreme) -> int:
    """The index of the first of ``values`` at their ``extreme`` (``np.min`` or ``np.max``), as
    ``np.argmin`` says, without its copy of a read-only column (a snapshot's are)."""
    return int(np.argmax(values == extreme(values)))


def stats_of(steps: np.ndarray, values: np.ndarray) -> Stats:
    """The figures of ``values`` (at ``steps``, ascending), their non-finite ones left out."""
    finite = np.isfinite(values)
    vals, where = (values, steps) if finite.all() else (values[finite], steps[finite])     # mostly all: no copies
    if not len(vals):
        return None
    i_min, i_max = _first(vals, np.min), _first(vals, np.max)
    lo, hi = float(vals[i_min]), float(vals[i_max])
    return (len(vals), mean_of(vals, max(abs(lo), abs(hi))), lo, int(where[i_min]), hi, int(where[i_max]),
            float(vals[-1]), int(where[-1]))


def merged(parts: Iterable[Stats]) -> Stats:
    """The figures of consecutive blocks (in step order) as one: the first min and max win."""
    out: Stats = None
    for part in parts:
        if part is None:
            continue
        if out is None:
            out = part
            continue
        count = out[0] + part[0]
        # The mean as the weighted mean of the means: never a sum that overflows.
        mean = out[1] * (out[0] / count) + part[1] * (part[0] / count)
        lo = out[2:4] if out[2] <= part[2] else part[2:4]
        hi = out[4:6] if out[4] >= part[4] else part[4:6]
        out = (count, mean, *lo, *hi, part[6], part[7])
    return out


def pulls_of(arms: np.ndarray, n: int) -> np.ndarray:
    """How many of the rows ``arms`` (codes; -1: none) drew each of ``n`` arms."""
    total = np.zeros(n, np.int64)
    for lo in range(0, len(arms), BLOCK_ROWS):      # a block at a time: no copy of a long column
        part = arms[lo:lo + BLOCK_ROWS]
        total += np.bincount(part[(part >= 0) & (part < n)], minlength=n)[:n]
    return total


def rollback_rows(steps: np.ndarray, events: Iterable["HistoryEvent"]) -> Iterable[int]:
    """The first row each ``rollback`` event among ``events`` may abandon (after its ``to_step``)."""
    for ev in events:
        to_step = ev.data.get("to_step") if ev.event == EVENT_ROLLBACK else None
        if isinstance(to_step, int) and not isinstance(to_step, bool):
            yield int(search_steps(steps, to_step + 1))


class SeriesBlocks:
    """The blocks' figures of one history's row-aligned series, as its reader goes on (one per
    :class:`~console.read.history_part.HistoryPart`; its views share it). Thread-safe: the
    reader's thread forgets, the thread that shows a view computes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.blocks: dict[str, list[Stats]] = {}
        self.valid_rows = 0             # rows unchanged since the blocks before them were computed
        # What the reader had read when the blocks were last known good, to tell what changed
        # since at a later open: its rewinds, step lines and rollback events.
        self.marks = {"rewind_count": 0, "rows_read": 0, "rollbacks": 0}
        self.generation = 0             # bumped whenever blocks are forgotten: a view of before does not use them
        self.on_computed: Callable[["SeriesBlocks"], None] | None = None    # new blocks (to keep them)

    # -- the reader's side ---------------------------------------------------------------
    def follow(self, h: "LossHistory", update: "HistoryUpdate") -> None:
        """After a read of ``h``: forget the blocks its changes touch (see the module's docstring)."""
        rows = [int(search_steps(h.step, update.rewound_from))] if update.rewound_from is not None else []
        rows += rollback_rows(h.step, update.new_events)
        if rows or update.reset:
            self.forget_from(0 if update.reset else min(rows))
        self._mark(h)

    def _mark(self, h: "LossHistory") -> None:
        with self._lock:
            self.valid_rows = len(h)            # the rows as they are now: blocks are made of them
            self.marks = {"rewind_count": h.rewind_count, "rows_read": h.rows_read,
                          "rollbacks": sum(ev.event == EVENT_ROLLBACK for ev in h.events)}

    def forget_from(self, row: int) -> None:
        """The rows from ``row`` on changed (or may be abandoned now): their blocks are forgotten."""
        with self._lock:
            keep = row // BLOCK_ROWS
            if any(len(b) > keep for b in self.blocks.values()) or self.valid_rows > row:
                self.generation += 1
            self.blocks = {name: b[:keep] for name, b in self.blocks.items()}
            self.valid_rows = min(self.valid_rows, row)

    def adopt(self, h: "LossHistory", blocks: dict[str, list[Stats]], rows: int) -> None:
        """Blocks kept from an earlier open of ``h``, good for its rows before ``rows``."""
        with self._lock:
            keep = rows // BLOCK_ROWS
            self.blocks = {name: list(b[:keep]) for name, b in blocks.items()}
            self.generation += 1
        self._mark(h)

    # -- the view's side ------------------------------------------------------------------
    def summary(self, h: "HistoryView", name: str,
                values_of: Callable[[int, int], np.ndarray]) -> tuple[bool, Stats]:
        """Series ``name``'s figures over every step of view ``h`` at or before its head, left
        behind ones left out; ``values_of(lo, hi)``: its values on rows ``[lo, hi)``. First
        False when the blocks are not this view's (it is older than a change): the caller
        computes the figures itself."""
        ahead = head_rows(h.step, h.last_step)
        kept = self._kept(h, name, ahead, lambda lo, hi: stats_of_rows(h, lo, hi, values_of))
        if kept is None:
            return False, None
        blocks, lo = kept
        return True, merged([*blocks, stats_of_rows(h, lo, ahead, values_of) if ahead > lo else None])

    def arm_pulls(self, h: "HistoryView") -> np.ndarray | None:
        """How many step lines of view ``h`` drew each arm (by code into ``arm_names``); None
        when the blocks are not this view's."""
        arms, n = h.arm_column, len(h.arm_names)
        if arms is None or len(arms) != len(h.step):
            return None
        kept = self._kept(h, PULLS, len(arms), lambda lo, hi: pulls_of(arms[lo:hi], n))
        if kept is None:
            return None
        blocks, lo = kept
        total = pulls_of(arms[lo:], n)
        for block in blocks:
            total[:len(block)] += block      # an older block knows fewer arms
        return total

    def _kept(self, h: "HistoryView", name: str, rows: int,
              make: Callable[[int, int], Any]) -> tuple[list[Any], int] | None:
        """The blocks of ``name`` wholly in view ``h``'s first ``rows`` rows (made by ``make(lo,
        hi)`` where not kept yet) and the first row after them; None when the blocks are not
        this view's."""
        with self._lock:
            if h.summary_generation != self.generation or h.n_steps > self.valid_rows:
                return None
            have = list(self.blocks.get(name, ()))
        whole = rows // BLOCK_ROWS
        new = [make(b * BLOCK_ROWS, (b + 1) * BLOCK_ROWS) for b in range(len(have), whole)]
        if new:
            with self._lock:
                computed = h.summary_generation == self.generation and len(self.blocks.get(name, ())) == len(have)
                if computed:
                    self.blocks[name] = have + new
            if computed and self.on_computed is not None:
                self.on_computed(self)
        return [*have[:whole], *new], whole * BLOCK_ROWS

    def state(self, rows: int) -> dict[str, Any]:
        """The blocks of the rows before ``rows`` and the marks they are good for, as plain data
        (a block with no value: None)."""
        with self._lock:
            keep = min(rows, self.valid_rows) // BLOCK_ROWS
            return {"block_rows": BLOCK_ROWS, "rows": keep * BLOCK_ROWS, "marks": dict(self.marks),
                    "series": {name: [_plain(s) for s in b[:keep]]
                               for name, b in self.blocks.items()}}

    @staticmethod
    def blocks_of(state: dict[str, Any]) -> dict[str, list[Any]]:
        """The blocks of a kept :meth:`state`, each checked (a file in the cache may hold
        anything): ValueError for one that is not the figures (or the pulls) of a block."""
        out: dict[str, list[Any]] = {}
        for name, blocks in state["series"].items():
            if not isinstance(name, str) or not isinstance(blocks, list):
                raise ValueError("series blocks: not a list by name")
            out[name] = [_pulls_block(b) if name == PULLS else _stats_block(b) for b in blocks]
        return out

    @staticmethod
    def good_rows(h: "LossHistory", state: dict[str, Any]) -> int:
        """How many of ``h``'s first rows blocks kept as :meth:`state` made them are still good
        for: those before what changed since (a rewind, a step logged again, a rollback)."""
        marks, rows = state["marks"], int(state["rows"])
        new_rewinds = h.rewind_count - int(marks["rewind_count"])
        if new_rewinds < 0 or new_rewinds > len(h.rewinds):
            return 0
        steps = h.step
        changed = [int(search_steps(steps, step)) for step, _ in h.rewinds[len(h.rewinds) - new_rewinds:]]
        since = h.superseded.get("row") >= int(marks["rows_read"])
        if since.all() and len(since) >= MAX_SUPERSEDED:
            return 0                            # older ones replaced since may be forgotten
        replaced = h.superseded.get("step")[since]
        if len(replaced):
            changed.append(int(search_steps(steps, int(replaced.min()))))
        rollbacks = [ev for ev in h.events if ev.event == EVENT_ROLLBACK][int(marks["rollbacks"]):]
        changed += rollback_rows(steps, rollbacks)
        return max(0, min([rows, *changed]))


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _stats_block(block: Any) -> Stats:
    """A kept block's figures, checked: None, or 8 numbers (the count, steps: integers)."""
    if block is None:
        return None
    if not isinstance(block, list) or len(block) != 8 or not all(_is_int(block[i]) for i in (0, 3, 5, 7)) \
            or block[0] <= 0 or not all(isinstance(block[i], float) and np.isfinite(block[i]) for i in (1, 2, 4, 6)):
        raise ValueError("series blocks: a block is not its figures")
    return tuple(block)     # type: ignore[return-value]


def _pulls_block(block: Any) -> np.ndarray:
    """A kept block's pulls, checked: integers >= 0."""
    if not isinstance(block, list) or not all(_is_int(v) and v >= 0 for v in block):
        raise ValueError("series blocks: a block's pulls are not counts")
    return np.array(block, np.int64)


def _plain(block: Any) -> list | None:
    """A block as JSON has it: a list (its figures, or its arms' pulls), None for no value."""
    return None if block is None else block.tolist() if isinstance(block, np.ndarray) else list(block)


def stats_of_rows(h: "HistoryView", lo: int, hi: int, values_of: Callable[[int, int], np.ndarray]) -> Stats:
    """The figures of rows ``[lo, hi)`` of a row-aligned series, its left-behind steps left out."""
    steps = h.step[lo:hi]
    if not len(steps):
        return None
    values = values_of(lo, hi)
    times = h.time_column[lo:hi] if h.time_column is not None and len(h.time_column) == len(h.step) else None
    abandoned = abandoned_mask(steps, times, h.events, h.last_step)
    if abandoned is not None:
        steps, values = steps[~abandoned], values[~abandoned]
    return stats_of(steps, values)
