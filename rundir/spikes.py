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
the rows added (plus one baseline block), however long the history is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from .config import DEFAULT_K, DEFAULT_WINDOW, MIN_WINDOW  # noqa: F401  (W and k's defaults, run.toml [alerts])
from .history.records import nonfinite_mask

MAD_FLOOR = 1e-3            # the MAD of a flat loss, relative to its median
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
        self._finite = _Growing(np.float64)              # the finite losses read, in order
        self._finite_steps = _Growing(np.int64)          # the step of each
        self._nonfinite = _Growing(np.int64)             # steps of non-finite losses
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
            rows = int(np.searchsorted(steps[:rows], changed_from))
            self._rewind(int(steps[rows]) if rows < n else changed_from)
        if rows < n:
            self._read(np.asarray(steps[rows:n], np.int64), np.asarray(losses[rows:n], np.float64))
        self._rows = n
        self._last_step = int(steps[n - 1]) if n else None
        return self.version != version

    def _forget_all(self) -> None:
        had = len(self._flag_step) or len(self._nonfinite)
        version = self.version
        self._reset()
        self.version = version + bool(had)

    def _rewind(self, first: int) -> None:
        """Forget what was read from step ``first`` on."""
        self._finite.keep(self._finite_steps.search(first))
        self._finite_steps.keep(len(self._finite))
        dropped = self._nonfinite.keep(self._nonfinite.search(first))
        flags = self._flag_step.search(first)
        dropped += self._flag_step.keep(flags)
        for column in (self._flag_index, self._flag_loss, self._flag_base):
            column.keep(flags)
        if dropped:
            self._changed()

    def _changed(self) -> None:
        self._spikes = None
        self.version += 1

    def _read(self, steps: np.ndarray, losses: np.ndarray) -> None:
        ok = np.isfinite(losses)
        if not ok.all():
            bad = nonfinite_mask(losses)          # an absent loss is neither finite nor non-finite
            if bad.any():
                self._nonfinite.extend(steps[bad])
                self._changed()
        lo = len(self._finite)
        self._finite.extend(losses[ok])
        self._finite_steps.extend(steps[ok])
        finite = self._finite.view()
        index, base = _flag(finite, max(lo, self.window), len(finite), self.window, self.k)
        if len(index):
            self._flag_index.extend(index)
            self._flag_step.extend(self._finite_steps.view()[index])
            self._flag_loss.extend(finite[index])
            self._flag_base.extend(base)
            self._changed()

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
                "finite": len(self._finite),
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
        read = np.asarray(losses[:rows], np.float64)
        # Every row finite when it was scanned: the same rows (the caller's mirror says so) are
        # not looked at again (a grad-norm column no plot shows stays unread).
        ok = None if int(state["finite"]) == rows else np.isfinite(read)
        if ok is None:
            # The columns' own rows, borrowed (a 5M-step history's would be 80 MB copied): the
            # history never changes rows it has shared, and the first rows appended here move
            # them to an array of the detector's own.
            detector._finite.borrow(read)
            detector._finite_steps.borrow(np.asarray(steps[:rows], np.int64))
        else:           # taken as they are (fresh arrays, this detector's alone), not copied once more
            detector._finite.adopt(read[ok])
            detector._finite_steps.adopt(np.asarray(steps[:rows], np.int64)[ok])
        if len(detector._finite) != int(state["finite"]) or rows - len(detector._finite) != len(state["nonfinite"]):
            return None
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

    def keep(self, n: int) -> int:
        """Keep the first ``n`` values; how many were dropped."""
        dropped = max(0, self._n - n)
        self._n = min(self._n, n)
        return dropped

    def search(self, value: int) -> int:
        """Where ``value`` would go in this (ascending) column."""
        return int(np.searchsorted(self.view(), value))


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
