"""The table of every series (LEET's and W&B's run summary): for each series of a history,
its value at the cursor, its last value, its min, max and mean over the steps in view, and
its best value with the step it was at (the min for a loss, the max for a throughput; none
for a series where neither is better, such as the learning rate).

Read by the series table screen (``t``), ``--once`` and ``--json``; every figure is the
stored value, and :mod:`console.model.units` says it in its unit at the edge.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import numpy as np

from rundir.step_rows import search_steps
from rundir.text import printable

from .series import RATE_WINDOW, SHARE_WINDOW, arm_groups, available, on_rows, series_values, spec_of, value_at
from .series_blocks import Stats, stats_of, stats_of_rows
from .units import FAMILY_SEP, unit_of

if TYPE_CHECKING:
    from .snapshot import HistoryView

# Which way is better, by series name (a family by the part before the separator);
# any other series named like a loss (``val_loss``, ``mlm_loss``) is better lower.
BETTER = {"loss": "min", "eval_loss": "min", "tokens_per_s": "max", "steps_per_s": "max"}


# A derived series' value at a row is made of the rows this many before it at most.
PAD = max(SHARE_WINDOW, RATE_WINDOW)


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


def _row_aligned(h: "HistoryView", name: str) -> bool:
    """Whether series ``name`` has one value per step line (``step``'s rows), each made of its
    own line and those just before it, whatever the other arms: every series but the eval
    series, ``p/<arm>`` (the steps that drew the arm) and the share of several arms together
    (which arms those are changes with the pulls)."""
    family, _, arm = name.partition(FAMILY_SEP)
    if family in ("eval_loss", "p"):
        return False
    return family != "share" or len(arm_groups(h).get(arm, ())) == 1


def _rows_view(h: "HistoryView", lo: int, hi: int) -> "HistoryView":
    """The view of rows ``[lo, hi)`` of ``h`` alone (a derived series made of them is that of
    ``h`` from row ``lo + PAD`` on); the arms' grouping is ``h``'s."""
    def cut(column: np.ndarray | None) -> np.ndarray | None:
        return column[lo:hi] if column is not None and len(column) == len(h.step) else column
    data = dataclasses.replace(h.series, step_columns={k: v[lo:hi] for k, v in h.series.step_columns.items()})
    view = dataclasses.replace(h, step=h.step[lo:hi], loss=h.loss[lo:hi], tokens_column=cut(h.tokens_column),
                               time_column=cut(h.time_column), arm_column=cut(h.arm_column), series=data)
    view.__dict__["_series_memo"] = {"arm_groups": arm_groups(h)}
    return view


def values_on_rows(h: "HistoryView", name: str) -> Callable[[int, int], np.ndarray]:
    """``values(lo, hi)``: the values of row-aligned series ``name`` on rows ``[lo, hi)``,
    made of those rows (and the :data:`PAD` before them) alone."""
    spec = spec_of(name)
    if spec.derive is None:
        column = series_values(h, name)[1]
        return lambda lo, hi: column[lo:hi]

    def derived(lo: int, hi: int) -> np.ndarray:
        start = max(0, lo - PAD)
        return spec.derive(_rows_view(h, start, hi), name)[1][lo - start:]   # type: ignore[misc]
    return derived


def _finite_near(values: Callable[[int, int], np.ndarray], start: int, stop: int) -> int | None:
    """The row of the finite value nearest ``start`` going towards ``stop`` (either way), looked
    for in growing chunks (not a mask of the whole column); None when there is none."""
    step, chunk, pos = (1 if stop >= start else -1), 64, start
    while pos != stop:
        end = min(stop, pos + chunk) if step > 0 else max(stop, pos - chunk)
        lo, hi = (pos, end) if step > 0 else (end, pos)
        ok = np.flatnonzero(np.isfinite(values(lo, hi)))
        if len(ok):
            return lo + int(ok[0] if step > 0 else ok[-1])
        pos, chunk = end, chunk * 4
    return None


def first_step(h: "HistoryView", name: str) -> int | None:
    """The first step where series ``name`` has a finite value (left behind or not)."""
    if _row_aligned(h, name):
        row = _finite_near(values_on_rows(h, name), 0, len(h.step))
        return int(h.step[row]) if row is not None else None
    steps, values = series_values(h, name)
    ok = np.flatnonzero(np.isfinite(values))
    return int(steps[ok[0]]) if len(ok) else None


def _at_cursor(h: "HistoryView", name: str, cursor: int | None) -> float:
    """The series' last finite value at or before step ``cursor``; NaN without a cursor."""
    if cursor is None:
        return math.nan
    if not _row_aligned(h, name):
        return value_at(h, name, cursor)
    values = values_on_rows(h, name)
    row = _finite_near(values, int(search_steps(h.step, cursor, side="right")), 0)
    return float(values(row, row + 1)[0]) if row is not None else math.nan


def _stats(h: "HistoryView", name: str, zoom: tuple[int, int] | None) -> Stats:
    """The figures of series ``name`` over ``zoom`` (every step without one), its left-behind
    steps left out: a row-aligned series' from the kept blocks, or from its rows in the zoom."""
    if _row_aligned(h, name):
        values = values_on_rows(h, name)
        if zoom is None and h.summaries is not None:
            kept, stats = h.summaries.summary(h, name, values)
            if kept:
                return stats
        lo, hi = (0, len(h.step)) if zoom is None else \
            (int(search_steps(h.step, zoom[0])), int(search_steps(h.step, zoom[1], "right")))
        return stats_of_rows(h, lo, hi, values)
    steps, values = series_values(h, name)
    kept = _kept(h, name, steps)
    if kept is not None:
        steps, values = steps[kept], values[kept]
    if zoom is not None:
        lo, hi = int(search_steps(steps, zoom[0])), int(search_steps(steps, zoom[1], "right"))
        steps, values = steps[lo:hi], values[lo:hi]
    return stats_of(steps, values)


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
    stats = _stats(h, name, zoom)
    at = _at_cursor(h, name, cursor)
    if stats is None:
        return SeriesRow(name, spec_of(name).label, 0, at, *(math.nan, None) * 3, math.nan, math.nan, None)
    count, mean, lo, lo_step, hi, hi_step, last, last_step = stats
    best = better_of(name)
    i_best = (lo, lo_step) if best == "min" else (hi, hi_step) if best == "max" else (math.nan, None)
    return SeriesRow(name, spec_of(name).label, count, at, last, last_step, lo, lo_step, hi, hi_step, mean, *i_best)


def row_cells(row: SeriesRow, cursor: bool = True) -> tuple[str, ...]:
    """One series' figures as a table's cells, each in the series' unit: name, (at the
    cursor,) last, min, its step, max, its step, mean, best, its step."""
    fmt = unit_of(row.name).format

    def at(step: int | None) -> str:
        return f"{step:,}" if step is not None else "-"
    return (printable(row.name), *((fmt(row.at_cursor),) if cursor else ()), fmt(row.last),
            fmt(row.min), at(row.min_step), fmt(row.max), at(row.max_step), fmt(row.mean), fmt(row.best),
            at(row.best_step))


# The status pane's GPU line, from the history where nvidia-smi cannot say: these series' last values.
GPU_SERIES = ("gpu_mem_used", "gpu_util", "gpu_power_w", "gpu_temp_c")


def gpu_text(h: "HistoryView") -> str | None:
    """The newest GPU figures the history holds, one text (``27.9 GiB · 87.0% · 300.5 W ·
    61 °C``); None when it holds none."""
    names = set(available(h)) if h.last_step is not None else set()
    parts = [unit_of(name).format(_at_cursor(h, name, h.last_step)) for name in GPU_SERIES if name in names]
    return " · ".join(part for part in parts if part != "-") or None
