"""Loss spikes: steps whose loss rises far above the recent median (torch-free, numpy).

A finite step is *flagged* when its loss exceeds the baseline, the median of the W
finite losses before it, by more than ``k`` median absolute deviations (MAD) of those
W losses. Consecutive flagged steps (in the order of the finite steps) form one
:class:`Spike`. Non-finite losses are never spikes and never part of a baseline: they
are listed on their own (:attr:`SpikeDetector.nonfinite_steps`).

Two choices keep the detector exact and cheap (1M steps in a few tens of milliseconds):

- The baseline is refreshed every ``W // 2`` finite steps: the finite steps are cut into
  blocks of that length after the first W, and every step of a block is measured against
  the median and MAD of the W finite losses just before its block. A spike of fewer than
  W/2 steps therefore never moves its own baseline (a 40-step plateau with W = 100 is one
  spike), and a lasting change of level becomes the new baseline within 1.5 W steps.
  The first W finite steps have no baseline and are never flagged.
- A flat loss has MAD 0, and any rise at all would be infinitely many MADs. The MAD is
  floored at :data:`MAD_FLOOR` times the baseline's magnitude (plus 1e-12), so a flat
  loss spikes only when it rises by more than ``k`` thousandths of itself.

:func:`find_spikes` reads a whole history; :class:`SpikeDetector` is fed the growing
history refresh after refresh and gives the same answer, at a cost proportional to
the rows added (plus one baseline block), however long the history is. Its memory is
bounded too: it keeps only the finite losses the rows to come are measured against (the
baseline window of the current block, about 1.5 W of them), what it found (the flagged
steps, the non-finite ones) and the steps with no loss; a rewind to before that window reads
the finite losses its baseline needs again from the history's columns it is given.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from rundir.config import DEFAULT_K, DEFAULT_WINDOW, MIN_WINDOW  # noqa: F401  (W and k's defaults, run.toml [alerts])
from rundir.history.records import nonfinite_mask
from rundir.step_rows import search_steps

MAD_FLOOR = 1e-3            # the MAD of a flat loss, relative to its median
READ_ROWS = 1 << 16         # new rows are read a chunk of this many at a time
TRIM_AT = 1 << 12           # the window's forgotten front is cut once it is this long (and as long as the rest)
_MAD_FLOOR_ABS = 1e-12


@dataclass(frozen=True)
class Spike:
    """Consecutive flagged steps: first and last step, the highest loss and where, and the
    baseline (median of the W finite losses before the spike's block) at its start."""

    start: int
    end: int
    peak_step: int
    peak_loss: float
    baseline: float

    def to_dict(self) -> dict[str, float | int]:
        """Plain data for ``--json``."""
        return {"start": self.start, "end": self.end, "peak_step": self.peak_step,
                "peak_loss": self.peak_loss, "baseline": self.baseline}


def _check(window: int, k: float) -> None:
    if isinstance(window, bool) or not isinstance(window, (int, np.integer)) or window < MIN_WINDOW:
        raise ValueError(f"spike window {window!r}: expected an integer >= {MIN_WINDOW}")
    if isinstance(k, bool) or not isinstance(k, (int, float)) or not np.isfinite(k) or k <= 0:
        raise ValueError(f"spike k {k!r}: expected a finite number > 0")


def _median_rows(sorted_part: np.ndarray, width: int) -> np.ndarray:
    """The median of rows whose order statistics at ``width // 2`` (and the one below, for
    an even width) are in place."""
    half = width // 2
    if width % 2:
        return sorted_part[:, half]
    return (sorted_part[:, half - 1] + sorted_part[:, half]) / 2


def _flag(finite: np.ndarray, lo: int, hi: int, window: int, k: float) -> tuple[np.ndarray, np.ndarray]:
    """The flagged finite indices in ``[lo, hi)`` (each ``>= window``) of the finite losses
    ``finite``, and the baseline median of each."""
    stride = window // 2
    if hi <= lo:
        return np.empty(0, np.int64), np.empty(0, np.float64)
    g0, g1 = (lo - window) // stride, (hi - 1 - window) // stride + 1
    blocks = np.arange(g0, g1)
    windows = sliding_window_view(finite, window)[blocks * stride]
    half = window // 2
    # Order statistics j and j + ceil(W/2) bound the MAD from below: fewer than W/2 values
    # lie strictly between them, and at least W/2 lie within one MAD of the median.
    j = max(1, window // 4) - 1
    l_rank = j + (window + 1) // 2
    kth = sorted({j, half - 1 if window % 2 == 0 else half, half, l_rank})
    part = np.partition(windows, kth, axis=1)
    med = _median_rows(part, window)
    mad_low = np.minimum(med - part[:, j], part[:, l_rank] - med)
    floor = MAD_FLOOR * np.abs(med) + _MAD_FLOOR_ABS
    # The block's members inside [lo, hi), and the largest of them.
    starts = np.maximum(window + blocks * stride, lo)
    ends = np.minimum(window + (blocks + 1) * stride, hi)
    block_max = np.maximum.reduceat(finite[:hi], starts)
    candidates = np.flatnonzero(block_max > med + k * np.maximum(mad_low, floor))
    if not len(candidates):
        return np.empty(0, np.int64), np.empty(0, np.float64)
    cand_windows = windows[candidates]
    deviation = np.abs(cand_windows - med[candidates, None])
    mad = _median_rows(np.partition(deviation, sorted({half - 1 if window % 2 == 0 else half, half}), axis=1),
                       window)
    threshold = med[candidates] + k * np.maximum(mad, floor[candidates])
    flagged, baselines = [], []
    for c, limit in zip(candidates.tolist(), threshold.tolist()):
        members = np.arange(starts[c], ends[c])
        hit = members[finite[members] > limit]
        if len(hit):
            flagged.append(hit)
            baselines.append(np.full(len(hit), med[c]))
    if not flagged:
        return np.empty(0, np.int64), np.empty(0, np.float64)
    return np.concatenate(flagged), np.concatenate(baselines)


class SpikeDetector:
    """Spikes of a growing history, updated incrementally.

    Call :meth:`update` with the history's step and loss columns (steps ascending and
    unique, as :class:`~rundir.history.LossHistory` keeps them) each time they may have
    grown. Rows already seen are not read again, unless ``changed_from`` says that rows
    from that step on were replaced (a resume re-ran them, a rollback changed them) or
    the columns no longer start the way they did (then everything is read again).
    """

    def __init__(self, window: int = DEFAULT_WINDOW, k: float = DEFAULT_K):
        _check(window, k)
        self.window, self.k = int(window), float(k)
        self._reset()

    def _reset(self) -> None:
        self._rows = 0                                   # rows of the columns read
        self._last_step: int | None = None               # the step of the last row read
        # The finite losses read, in order, from finite index ``_base`` on (the window the
        # next rows are measured against: see _trim), and the step of each; ``_count`` of them
        # were read in all.
        self._finite = _Growing(np.float64)
        self._finite_steps = _Growing(np.int64)
        self._base = 0
        self._count = 0
        self._nonfinite = _Growing(np.int64)             # steps of non-finite losses
        self._absent = _Growing(np.int64)                # steps with no loss (neither finite nor not)
        self._flag_index = _Growing(np.int64)            # finite indices of flagged steps
        self._flag_step = _Growing(np.int64)
        self._flag_loss = _Growing(np.float64)
        self._flag_base = _Growing(np.float64)
        self._spikes: list[Spike] | None = []
        self.version = 0                                 # bumped whenever spikes or non-finite steps change

    # -- reading ---------------------------------------------------------------------
    def update(self, steps: np.ndarray, losses: np.ndarray, changed_from: int | None = None) -> bool:
        """Read the rows added since the last call (and those from step ``changed_from``
        on, when given); whether the spikes or non-finite steps changed."""
        version = self.version
        n = len(steps)
        rows = self._rows
        if rows > n or (rows and int(steps[rows - 1]) != self._last_step):
            self._forget_all()                           # replaced or shrunk: read anew
            rows = 0
        if changed_from is not None and rows and changed_from <= self._last_step:
            rows = int(search_steps(steps[:rows], changed_from))
            self._rewind(int(steps[rows]) if rows < n else changed_from, rows, steps, losses)
        for lo in range(rows, n, READ_ROWS):            # a chunk at a time: no copy of a long history
            hi = min(n, lo + READ_ROWS)
            self._read(np.asarray(steps[lo:hi], np.int64), np.asarray(losses[lo:hi], np.float64))
        self._rows = n
        self._last_step = int(steps[n - 1]) if n else None
        return self.version != version

    def _forget_all(self) -> None:
        had = len(self._flag_step) or len(self._nonfinite)
        version = self.version
        self._reset()
        self.version = version + bool(had)

    def _rewind(self, first: int, rows: int, steps: np.ndarray, losses: np.ndarray) -> None:
        """Forget what was read from step ``first`` on: row ``rows`` of ``steps`` and ``losses``
        (the rows before it are those read before). The finite losses before it that the next
        rows are measured against and that the window no longer holds are read again from them."""
        dropped = self._nonfinite.keep(self._nonfinite.search(first))
        self._absent.keep(self._absent.search(first))
        # Every row before it is finite but for the non-finite and absent ones: no scan to count them.
        self._count = rows - len(self._nonfinite) - len(self._absent)
        start = self._window_start(self._count)
        if start >= self._base:
            self._finite.keep(self._count - self._base)
            self._finite_steps.keep(self._count - self._base)
        else:
            values, where = _last_finite(steps, losses, rows, self._count - start)
            self._finite.adopt(values)
            self._finite_steps.adopt(where)
            self._base = start
        flags = self._flag_step.search(first)
        dropped += self._flag_step.keep(flags)
        for column in (self._flag_index, self._flag_loss, self._flag_base):
            column.keep(flags)
        if dropped:
            self._changed()

    def _changed(self) -> None:
        self._spikes = None
        self.version += 1

    def _window_start(self, count: int) -> int:
        """The first finite index the finite losses after the first ``count`` are measured
        against: the start of the baseline of the block of finite index ``count`` (a multiple
        of the stride, W/2, as every block's baseline starts at one)."""
        stride = self.window // 2
        return max(0, (max(count, self.window) - self.window) // stride * stride)

    def _read(self, steps: np.ndarray, losses: np.ndarray) -> None:
        ok = np.isfinite(losses)
        if not ok.all():
            bad = nonfinite_mask(losses)          # an absent loss is neither finite nor non-finite
            self._absent.extend(steps[~ok & ~bad])
            if bad.any():
                self._nonfinite.extend(steps[bad])
                self._changed()
        lo = self._count
        self._finite.extend(losses[ok])
        self._finite_steps.extend(steps[ok])
        self._count += int(ok.sum())
        finite, base = self._finite.view(), self._base
        # The same blocks as over every finite loss: the window starts at a multiple of the stride.
        index, baseline = _flag(finite, max(lo, self.window) - base, self._count - base, self.window, self.k)
        if len(index):
            self._flag_index.extend(index + base)
            self._flag_step.extend(self._finite_steps.view()[index])
            self._flag_loss.extend(finite[index])
            self._flag_base.extend(baseline)
            self._changed()
        self._trim()

    def _trim(self) -> None:
        """Forget the finite losses no later row is measured against (those before the next
        block's baseline), once they are as many as those kept: the window stays bounded."""
        start = self._window_start(self._count)
        if start - self._base > max(self._count - start, TRIM_AT):
            cut = start - self._base
            self._finite.drop_front(cut)
            self._finite_steps.drop_front(cut)
            self._base = start

    # -- results ---------------------------------------------------------------------
    @property
    def rows(self) -> int:
        """How many rows of the columns it has read."""
        return self._rows

    @property
    def spikes(self) -> list[Spike]:
        """The spikes found so far, oldest first."""
        if self._spikes is None:
            self._spikes = _group(self._flag_index.view(), self._flag_step.view(), self._flag_loss.view(),
                                  self._flag_base.view())
        return list(self._spikes)

    @property
    def nonfinite_steps(self) -> list[int]:
        """Steps whose loss is NaN or infinite, ascending."""
        return self._nonfinite.view().tolist()

    @property
    def nonfinite_count(self) -> int:
        return len(self._nonfinite)

    def newest_nonfinite_steps(self, n: int) -> list[int]:
        """The newest ``n`` non-finite steps, ascending."""
        return self._nonfinite.view()[-n:].tolist() if n > 0 else []

    # -- hand-over ---------------------------------------------------------------------
    # What was found, not the finite losses themselves (the history's columns hold them): a
    # long history's detector is kept beside its mirror and carried on at the next open.
    _STATE_COLUMNS = ("nonfinite", "flag_index", "flag_step", "flag_loss", "flag_base")

    def state_dict(self) -> dict[str, Any]:
        """The rows read and what was found in them, as JSON-able data."""
        return {"window": self.window, "k": self.k, "rows": self._rows, "last_step": self._last_step,
                "finite": self._count,
                **{name: getattr(self, f"_{name}").view().tolist() for name in self._STATE_COLUMNS}}

    @classmethod
    def from_state_dict(cls, state: dict[str, Any], steps: np.ndarray, losses: np.ndarray) -> "SpikeDetector | None":
        """A detector that carries on from :meth:`state_dict`'s output, given the columns whose
        first ``state["rows"]`` rows it was made from (their finite losses are taken from them);
        None when they cannot be those rows."""
        rows, last_step = int(state["rows"]), state["last_step"]
        if rows > len(steps) or (rows and int(steps[rows - 1]) != last_step) or (not rows and last_step is not None):
            return None
        detector = cls(state["window"], state["k"])
        count = int(state["finite"])
        # Every row not finite is a non-finite one (a state with absent losses is not carried on).
        if not 0 <= count <= rows or rows - count != len(state["nonfinite"]):
            return None
        # Only the window the rows to come are measured against is read from the columns.
        start = detector._window_start(count)
        values, where = _last_finite(steps, losses, rows, count - start)
        if len(values) != count - start:
            return None
        detector._finite.adopt(values)
        detector._finite_steps.adopt(where)
        detector._base, detector._count = start, count
        for name in cls._STATE_COLUMNS:
            column = getattr(detector, f"_{name}")
            column.extend(np.asarray(state[name], column.view().dtype))
        detector._rows, detector._last_step = rows, last_step
        detector._spikes = None
        return detector


class _Growing:
    """A numpy column that grows by appending (amortised O(rows added)) and shrinks by
    forgetting its tail."""

    def __init__(self, dtype: type):
        self._data = np.empty(0, dtype)
        self._n = 0
        self._borrowed = False          # _data is someone else's: never written

    def __len__(self) -> int:
        return self._n

    def view(self) -> np.ndarray:
        return self._data[: self._n]

    def adopt(self, values: np.ndarray) -> None:
        """Become ``values``, an array no one else holds (so it is not copied)."""
        self._data, self._n, self._borrowed = values, len(values), False

    def borrow(self, values: np.ndarray) -> None:
        """Hold ``values``, an array someone else keeps unchanged, until the first extend."""
        self._data, self._n, self._borrowed = values, len(values), True

    def extend(self, values: np.ndarray) -> None:
        need = self._n + len(values)
        if need > len(self._data) or self._borrowed:
            self._borrowed = False
            grown = np.empty(max(need, 2 * len(self._data), 256), self._data.dtype)
            grown[: self._n] = self._data[: self._n]
            self._data = grown
        self._data[self._n: need] = values
        self._n = need

    def drop_front(self, n: int) -> None:
        """Forget the first ``n`` values: the rest moved to the front, in room for twice as
        many (a large read's room is given back)."""
        rest = self.view()[n:]
        room = 2 * max(len(rest), 1024)
        if self._borrowed or len(self._data) > 2 * room:
            grown = np.empty(room, self._data.dtype)
            grown[: len(rest)] = rest
            self.adopt(grown[: len(rest)])
            self._data = grown
            return
        self._data[: len(rest)] = rest
        self._n = len(rest)

    def keep(self, n: int) -> int:
        """Keep the first ``n`` values; how many were dropped."""
        dropped = max(0, self._n - n)
        self._n = min(self._n, n)
        return dropped

    def search(self, value: int) -> int:
        """Where ``value`` would go in this (ascending) column."""
        return int(np.searchsorted(self.view(), value))


def _last_finite(steps: np.ndarray, losses: np.ndarray, rows: int, count: int) -> tuple[np.ndarray, np.ndarray]:
    """The last ``count`` finite losses of the first ``rows`` rows and their steps (fewer when
    there are fewer), found looking back a chunk at a time (all of them finite: one slice)."""
    values, where, found, end = [], [], 0, rows
    chunk = max(count, 1)
    while found < count and end > 0:
        lo = max(0, end - chunk)
        part = np.asarray(losses[lo:end], np.float64)
        ok = np.isfinite(part)
        values.append(part[ok])
        where.append(np.asarray(steps[lo:end], np.int64)[ok])
        found += len(values[-1])
        end, chunk = lo, chunk * 2
    if not values:
        return np.empty(0, np.float64), np.empty(0, np.int64)
    kept_values = np.concatenate(values[::-1])[-count:] if count else np.empty(0, np.float64)
    kept_steps = np.concatenate(where[::-1])[-count:] if count else np.empty(0, np.int64)
    return kept_values.copy(), kept_steps.copy()


def _group(index: np.ndarray, steps: np.ndarray, losses: np.ndarray, baselines: np.ndarray) -> list[Spike]:
    """Flagged steps, consecutive ones (by finite index) joined into spikes."""
    if not len(index):
        return []
    cuts = np.flatnonzero(np.diff(index) != 1) + 1
    spikes = []
    for a, b in zip(np.concatenate([[0], cuts]).tolist(), np.concatenate([cuts, [len(index)]]).tolist()):
        peak = a + int(np.argmax(losses[a:b]))
        spikes.append(Spike(int(steps[a]), int(steps[b - 1]), int(steps[peak]), float(losses[peak]),
                            float(baselines[a])))
    return spikes


def find_spikes(steps: np.ndarray, losses: np.ndarray, window: int = DEFAULT_WINDOW,
                k: float = DEFAULT_K) -> list[Spike]:
    """The spikes of a whole history (``steps`` ascending): see the module's docstring."""
    detector = SpikeDetector(window, k)
    detector.update(np.asarray(steps), np.asarray(losses))
    return detector.spikes
