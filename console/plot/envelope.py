"""The loss plot's decimation, before anything is drawn: every pixel column gets the min
and the max of all the points that fall in it (:func:`envelope`), so a single-step spike is
never hidden, whatever the width (reservoir or stride sampling would drop it). Also the
largest magnitude the plot draws (:data:`PLOT_LIMIT`), which the smoothed line keeps to too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from rundir.step_rows import gapless_from, search_steps
from rundir.text import counted

# The largest magnitude the plot draws. Spans and means of values up to it stay finite in
# float64 (1e308 - -1e308 overflows), so no tick, label or column can overflow; a value
# beyond it (no trainer writes one, a file can hold one) is left out like a non-finite one,
# and the plot says how many.
PLOT_LIMIT = 1e300


def beyond_limit(values: np.ndarray) -> np.ndarray:
    """Which values are finite but too large in magnitude to plot (see PLOT_LIMIT)."""
    with np.errstate(invalid="ignore"):
        return np.isfinite(values) & (np.abs(values) > PLOT_LIMIT)


def within_limit(values: np.ndarray, limit: float = PLOT_LIMIT) -> bool:
    """Whether every value that is not NaN lies within ±``limit`` (no infinity): two
    reductions, no temporary array (a 5M-step column's would be 40 MB)."""
    if not len(values):
        return True
    lo, hi = float(np.fmin.reduce(values)), float(np.fmax.reduce(values))     # (a float32 line's too)
    return (-limit <= lo and hi <= limit) or math.isnan(hi)                    # NaN: all NaN


def beyond_note(count: int) -> str:
    return f"{counted(count, 'value')} beyond ±{PLOT_LIMIT:.0e} not plotted" if count else ""


@dataclass
class Envelope:
    """Per-column min and max (NaN where a column holds no finite point)."""

    lo: np.ndarray
    hi: np.ndarray

    @property
    def filled(self) -> np.ndarray:
        return np.isfinite(self.lo)


def as_floats(values: np.ndarray) -> np.ndarray:
    """``values`` as floats: a float32 line stays one (no copy), anything else is float64."""
    values = np.asarray(values)
    return values if values.dtype == np.float32 else values.astype(np.float64, copy=False)


def column_of(steps: np.ndarray, x0: float, x1: float, columns: int) -> np.ndarray:
    """The pixel column of each step for an x range ``[x0, x1]`` over ``columns`` columns."""
    span = max(x1 - x0, 1e-12)
    col = ((np.asarray(steps, dtype=np.float64) - x0) / span * columns).astype(np.int64)
    return np.clip(col, 0, columns - 1)


def column_starts(steps: np.ndarray, x0: float, x1: float, columns: int) -> np.ndarray:
    """For each pixel column, the first index of ``steps`` (ascending, within ``[x0, x1]``)
    that :func:`column_of` puts in it or after it: the same columns, found by searching the
    columns' left edges in ``steps`` (O(columns log n)) instead of placing every step (O(n)).
    An edge and the per-step formula can round apart for a step on the edge: each start is
    moved until :func:`column_of` agrees (the formula is monotonic, so this ends at once)."""
    span = max(x1 - x0, 1e-12)
    wanted = np.arange(columns)
    starts = search_steps(steps, x0 + wanted * (span / columns))
    n = len(steps)
    if n == 0:
        return starts
    first = gapless_from(steps)
    # A gapless step column's values are computed, not read: each read of a mapped column
    # maps 64 KiB around it (5M steps: 20 MB more resident for a frame).
    at = (lambda rows: first + rows) if first is not None else (lambda rows: steps[rows])
    for _ in range(n + 1):
        late = (starts > 0) & (column_of(at(np.maximum(starts - 1, 0)), x0, x1, columns) >= wanted)
        early = (starts < n) & (column_of(at(np.minimum(starts, n - 1)), x0, x1, columns) < wanted)
        if not (late.any() or early.any()):
            return starts
        starts = starts - late + early
    raise AssertionError("column starts did not settle")     # unreachable: the formula is monotonic


def envelope(steps: np.ndarray, values: np.ndarray, x0: float, x1: float, columns: int) -> Envelope:
    """Min/max of ``values`` per pixel column; ``steps`` ascending. Non-finite values are
    left out (the status pane counts them). Vectorised: the columns' starts searched for
    (:func:`column_starts`) and two ``reduceat``, so the cost is one O(n) pass of numpy
    work whatever ``columns``."""
    lo = np.full(columns, np.nan)
    hi = np.full(columns, np.nan)
    steps = np.asarray(steps)
    values = as_floats(values)
    keep = np.isfinite(values)
    if not keep.all():
        steps, values = steps[keep], values[keep]
    if len(steps) == 0 or columns <= 0:
        return Envelope(lo, hi)
    # Only the steps inside [x0, x1]; then each one's column, by the same formula as the
    # markers use, and the first index of each column (columns are ascending with steps).
    first, stop = int(search_steps(steps, x0)), int(search_steps(steps, x1, side="right"))
    steps, values = steps[first:stop], values[first:stop]
    if len(steps) == 0:
        return Envelope(lo, hi)
    starts = column_starts(steps, x0, x1, columns)
    ends = np.append(starts[1:], len(steps))
    nonempty = ends > starts
    if not nonempty.any():
        return Envelope(lo, hi)
    idx = starts[nonempty]
    lo[nonempty] = np.minimum.reduceat(values, idx)[: len(idx)]
    hi[nonempty] = np.maximum.reduceat(values, idx)[: len(idx)]
    # reduceat over index i reduces values[i:next]; the last nonempty column must stop at
    # its own end, not the array's: recompute it exactly.
    last = np.flatnonzero(nonempty)[-1]
    seg = values[starts[last]:ends[last]]
    lo[last], hi[last] = seg.min(), seg.max()
    return Envelope(lo, hi)
