"""The table of every series (LEET's and W&B's run summary): for each series of a history,
its value at the cursor, its last value, its min, max and mean over the steps in view, and
its best value with the step it was at (the min for a loss, the max for a throughput; none
for a series where neither is better, such as the learning rate).

Read by the series table screen (``t``), ``--once`` and ``--json``; every figure is the
stored value, and :mod:`console.model.units` says it in its unit at the edge.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from rundir.text import printable

from .series import available, on_rows, series_values, spec_of, value_at
from .units import unit_of

if TYPE_CHECKING:
    from .snapshot import HistoryView

# Which way is better, by series name (a family by the part before the separator);
# any other series named like a loss (``val_loss``, ``mlm_loss``) is better lower.
BETTER = {"loss": "min", "eval_loss": "min", "tokens_per_s": "max", "steps_per_s": "max"}


def better_of(name: str) -> str | None:
    """``"min"``, ``"max"`` or None (neither way is better) for series ``name``."""
    base = name.partition("/")[0]
    return BETTER.get(name) or BETTER.get(base) or ("min" if base.endswith("loss") else None)


@dataclass(frozen=True)
class SeriesRow:
    """One series' figures over a range of steps (NaN where it has no value)."""

    name: str
    label: str
    points: int                 # finite values in the range
    at_cursor: float            # the value at the cursor's step (a sparse series' last before it)
    last: float
    last_step: int | None
    min: float
    min_step: int | None
    max: float
    max_step: int | None
    mean: float
    best: float                 # min or max as :func:`better_of` says; NaN when neither
    best_step: int | None


def series_rows(h: "HistoryView", zoom: tuple[int, int] | None = None, cursor: int | None = None) -> list[SeriesRow]:
    """A row for every series of ``h`` over the steps of ``zoom`` (all of them without one)."""
    return [series_row(h, name, zoom, cursor) for name in available(h)]


# Below this magnitude a sum of values cannot overflow a float64 (2**53 of them at most).
PLAIN_SUM_BELOW = 1e290


def _mean(values: np.ndarray, largest: float) -> float:
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


def _kept(h: "HistoryView", name: str, steps: np.ndarray) -> np.ndarray | None:
    """Which points of series ``name`` (at ``steps``) are not abandoned (a rollback's, or after
    the head: :func:`rundir.abandoned.abandoned_mask`); None: all of them."""
    if name in h.series_names():
        abandoned = h.abandoned(name)
        if abandoned is not None and len(abandoned) != len(steps):
            abandoned = on_rows(h, steps, h.abandoned_rows)
    else:                                   # derived from the step lines: their rows' mask
        abandoned = on_rows(h, steps, h.abandoned_rows)
    return ~abandoned if abandoned is not None and abandoned.any() else None


def series_row(h: "HistoryView", name: str, zoom: tuple[int, int] | None = None,
               cursor: int | None = None) -> SeriesRow:
    """One series' figures over the steps of ``zoom``; a step the run left behind (a rollback
    abandoned it, or it lies after the head) is none of them: the last value is where the run is."""
    steps, values = series_values(h, name)
    kept = _kept(h, name, steps)
    if kept is not None:
        steps, values = steps[kept], values[kept]
    if zoom is not None:
        lo, hi = np.searchsorted(steps, zoom[0], "left"), np.searchsorted(steps, zoom[1], "right")
        steps, values = steps[lo:hi], values[lo:hi]
    finite = np.isfinite(values)
    at = value_at(h, name, cursor) if cursor is not None else math.nan
    vals, where = (values, steps) if finite.all() else (values[finite], steps[finite])     # mostly all: no copies
    if not len(vals):
        return SeriesRow(name, spec_of(name).label, 0, at, *(math.nan, None) * 3, math.nan, math.nan, None)
    i_min, i_max = _first(vals, np.min), _first(vals, np.max)
    best = better_of(name)
    i_best = i_min if best == "min" else i_max if best == "max" else None
    return SeriesRow(name, spec_of(name).label, len(vals), at, float(vals[-1]), int(where[-1]),
                     float(vals[i_min]), int(where[i_min]), float(vals[i_max]), int(where[i_max]),
                     _mean(vals, max(abs(float(vals[i_min])), abs(float(vals[i_max])))),
                     float(vals[i_best]) if i_best is not None else math.nan,
                     int(where[i_best]) if i_best is not None else None)


def row_cells(row: SeriesRow, cursor: bool = True) -> tuple[str, ...]:
    """One series' figures as a table's cells, each in the series' unit: name, (at the
    cursor,) last, min, its step, max, its step, mean, best, its step."""
    fmt = unit_of(row.name).format

    def at(step: int | None) -> str:
        return f"{step:,}" if step is not None else "-"
    return (printable(row.name), *((fmt(row.at_cursor),) if cursor else ()), fmt(row.last), fmt(row.min), at(row.min_step),
            fmt(row.max), at(row.max_step), fmt(row.mean), fmt(row.best), at(row.best_step))


# The status pane's GPU line, from the history where nvidia-smi cannot say: these series' last values.
GPU_SERIES = ("gpu_mem_used", "gpu_util", "gpu_power_w", "gpu_temp_c")


def gpu_text(h: "HistoryView") -> str | None:
    """The newest GPU figures the history holds, one text (``27.9 GiB · 87.0% · 300.5 W ·
    61 °C``); None when it holds none."""
    names = set(available(h)) if h.last_step is not None else set()
    parts = [unit_of(name).format(value_at(h, name, h.last_step)) for name in GPU_SERIES if name in names]
    return " · ".join(part for part in parts if part != "-") or None
