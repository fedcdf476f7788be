"""Where a step lies in a history's step column (ascending, unique): the one search every
reader of the columns asks. A column with no gap (every integer from its first step to its
last, as most runs' are) is searched by arithmetic, reading its first and last rows only: a
binary search of a long column mapped from a file faults in a page and the pages around it at
each probe (six searches of a 5M-step column made 6 MB of it resident)."""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

# Integer steps are searched for with integer needles: a float needle makes numpy convert the
# whole column to float first (an O(n) copy for every search).
_INT_SAFE = float(2 ** 62)


def gapless_from(steps: np.ndarray) -> int | None:
    """The first step when ``steps`` (ascending, unique when integers) are every integer
    from it to the last, as a history without gaps has: then ``steps[i]`` is ``first + i``."""
    n = len(steps)
    if steps.dtype.kind not in "iu" or not n:
        return None
    first = int(steps[0])
    return first if int(steps[-1]) - first == n - 1 else None


def search_steps(steps: np.ndarray, x: Any, side: Literal["left", "right"] = "left") -> np.ndarray:
    """``np.searchsorted(steps, x, side)`` for needles ``x`` of any number type, without
    converting ``steps`` and, where the column has no gap, without reading it."""
    needles = np.asarray(x)
    n = len(steps)
    if steps.dtype.kind not in "iu" or not n or not needles.size:
        return np.asarray(np.searchsorted(steps, needles, side=side))
    if needles.dtype.kind in "iu" and needles.dtype.itemsize <= 8 and needles.dtype != np.uint64:
        whole = needles.astype(np.int64)                        # exact, however large
    elif needles.dtype.kind in "iuf" and bool(np.all(np.abs(needles.astype(np.float64)) < _INT_SAFE)):
        # A step is >= x where it is >= ceil(x), and > x where it is > floor(x): integer
        # needles, and one side, from here on.
        floats = needles.astype(np.float64)
        whole = (np.ceil(floats) if side == "left" else np.floor(floats)).astype(np.int64)
    else:
        return np.asarray(np.searchsorted(steps, needles, side=side))
    first = gapless_from(steps)
    if first is None:
        return np.asarray(np.searchsorted(steps, whole, side=side))
    last = first + n - 1
    inside = np.clip(whole, first, last) - first                # the row of the step, when inside
    if side == "left":                                          # the rows of steps < x
        return np.asarray(np.where(whole > last, n, inside))
    return np.asarray(np.where(whole < first, 0, inside + 1))   # the rows of steps <= x
