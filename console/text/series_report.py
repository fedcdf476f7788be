"""The headless series: ``--once --metric NAME [--range A:B]``, ``--json --metric NAME
[--range A:B] [--points N]``, ``--csv`` (the same choices, as CSV) and the ``series`` list of
``--json``.

Every answer comes from :mod:`console.model.series` and the plot's min/max envelope
(:func:`console.plot.envelope.envelope`), so a script sees every spike the dashboard would show:
each bucket of steps gives the smallest and the largest value in it, never a sample.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from typing import IO, Any

import numpy as np

from rundir.step_rows import search_steps

from ..model.series import UnknownSeries, on_rows, series_values, spec_of
from ..model.snapshot import HistoryView


@dataclass(frozen=True)
class StepRange:
    """``--range A:B``: the steps from A to B, both included; either side may be left open."""

    first: int | None = None
    last: int | None = None

    @classmethod
    def parse(cls, text: str) -> "StepRange":
        """``1000:5000``, ``1000:`` or ``:5000``; ValueError naming what is wrong."""
        a, sep, b = text.partition(":")
        if not sep:
            raise ValueError(f"--range {text!r}: expected A:B (steps; either may be left out, as in 1000:)")
        try:
            first = int(a) if a.strip() else None
            last = int(b) if b.strip() else None
        except ValueError:
            raise ValueError(f"--range {text!r}: A and B must be whole step numbers") from None
        if (first is not None and first < 0) or (last is not None and last < 0):
            raise ValueError(f"--range {text!r}: steps are >= 0")
        if first is not None and last is not None and last < first:
            raise ValueError(f"--range {text!r}: B ({last:,}) is before A ({first:,})")
        return cls(first, last)

    def rows(self, steps: np.ndarray) -> slice:
        """The rows of ``steps`` (ascending) inside the range."""
        lo = 0 if self.first is None else int(search_steps(steps, self.first))
        hi = len(steps) if self.last is None else int(search_steps(steps, self.last, side="right"))
        return slice(lo, max(lo, hi))


def series_list(h: HistoryView) -> list[dict[str, Any]]:
    """``--json``'s ``series``: each series with its number of points (finite values), its
    first and last step that has one, and its summary over the whole history
    (:mod:`console.model.series_summary`: last, min, max, mean, best, with their steps), where
    a step the run left behind (a rollback abandoned it) counts for none but ``first_step``."""
    from ..model.series_summary import first_step, series_rows

    out = []
    for row in series_rows(h):
        out.append({"name": row.name, "label": row.label, "points": row.points,
                    "first_step": first_step(h, row.name),
                    "last_step": row.last_step,
                    "unit": spec_of(row.name).unit, "last": _num(row.last), "min": _num(row.min),
                    "min_step": row.min_step, "max": _num(row.max), "max_step": row.max_step, "mean": _num(row.mean),
                    "best": _num(row.best), "best_step": row.best_step})
    return out


def _num(value: float) -> float | None:
    """A figure for strict JSON: None where there is none (NaN)."""
    return value if np.isfinite(value) else None


def series_table_lines(h: HistoryView, only: str | None = None) -> list[str]:
    """``--once``'s table of every series (or of series ``only``), one a row, in its unit (the
    dashboard's ``t``)."""
    from ..model.series_summary import row_cells, series_row, series_rows

    summaries = series_rows(h) if only is None else [series_row(h, only)]
    rows = [row_cells(row, cursor=False) for row in summaries]
    if not rows:
        return []
    head = ("series", "last", "min", "min at", "max", "max at", "mean", "best", "best at")
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    fmt = lambda r: "  " + "  ".join(c.ljust(w) if i == 0 else c.rjust(w)       # noqa: E731
                                     for i, (c, w) in enumerate(zip(r, widths))).rstrip()
    title = f"series ({len(rows)}; over every step)" if only is None else "over every step"
    return [title, fmt(head), *map(fmt, rows), ""]


def metric_values(h: HistoryView, name: str, step_range: StepRange) -> tuple[np.ndarray, np.ndarray]:
    """The series inside the range; :class:`UnknownSeries` for a name the history lacks."""
    steps, values = series_values(h, name)
    rows = step_range.rows(steps)
    return steps[rows], values[rows]


def metric_json(h: HistoryView, name: str, step_range: StepRange, points: int) -> dict[str, Any]:
    """The decimated envelope of one series: ``points`` equal spans of steps over the range,
    each with data giving its first and last step, its first, last and mean value, and its
    min and max with the step of each (:func:`bucket_table`)."""
    spec = spec_of(name)
    table = bucket_table(h, name, step_range, points)
    return {"metric": name, "label": spec.label, "unit": spec.unit, "range": [step_range.first, step_range.last],
            "points": points, "buckets": [dict(zip(BUCKET_FIELDS, row)) for row in table]}


# A bucket's fields, in --json's and --csv's order.
BUCKET_FIELDS = ("first_step", "last_step", "n", "first", "last", "mean", "min", "min_step", "max", "max_step")


def bucket_table(h: HistoryView, name: str, step_range: StepRange, points: int) -> list[tuple]:
    """Each bucket of steps with data, as a row of :data:`BUCKET_FIELDS`: the range cut into
    ``points`` equal spans of steps, as the plot's columns are (:func:`console.plot.envelope.column_of`),
    so each bucket's min and max are its column's envelope (a one-step spike is in its max)."""
    from ..plot.envelope import column_of  # not for --json's list: it draws nothing

    steps, values = metric_values(h, name, step_range)
    ok = np.isfinite(values)
    steps, values = steps[ok], values[ok].astype(np.float64)
    if not len(steps):
        return []
    x0 = float(step_range.first if step_range.first is not None else steps[0])
    x1 = float(step_range.last if step_range.last is not None else steps[-1])
    col = column_of(steps, x0, x1 if x1 > x0 else x0 + 1.0, points)
    starts = np.flatnonzero(np.r_[True, col[1:] != col[:-1]])
    ends = np.r_[starts[1:], len(col)] - 1
    n = ends - starts + 1
    lo, hi = np.minimum.reduceat(values, starts), np.maximum.reduceat(values, starts)
    # Summed as fractions of each bucket's largest magnitude: a sum of finite values never overflows.
    largest = np.maximum(np.abs(lo), np.abs(hi))
    largest[largest == 0.0] = 1.0
    mean = largest * (np.add.reduceat(values / np.repeat(largest, n), starts) / n)
    # The first row of each bucket that holds its min (max): the first match at or after its start.
    at_lo = np.flatnonzero(values == np.repeat(lo, n))
    at_hi = np.flatnonzero(values == np.repeat(hi, n))
    lo_rows, hi_rows = at_lo[np.searchsorted(at_lo, starts)], at_hi[np.searchsorted(at_hi, starts)]
    return list(zip(steps[starts].tolist(), steps[ends].tolist(), n.tolist(), values[starts].tolist(),
                    values[ends].tolist(), mean.tolist(), lo.tolist(), steps[lo_rows].tolist(), hi.tolist(),
                    steps[hi_rows].tolist()))


def metric_csv(h: HistoryView, name: str, step_range: StepRange, points: int | None, out: IO[str]) -> None:
    """``--csv``: the series over the range as CSV, a header line first: every step that has
    a value (``step,tokens,time,NAME``; tokens and time empty where the history has none), or
    with ``points``, one row per bucket of :data:`BUCKET_FIELDS`."""
    writer = csv.writer(out, lineterminator="\n")
    if points is not None:
        writer.writerow(BUCKET_FIELDS)
        writer.writerows(bucket_table(h, name, step_range, points))
        return
    steps, values = metric_values(h, name, step_range)
    ok = np.isfinite(values)
    steps, values = steps[ok], values[ok]
    tokens = on_rows(h, steps, h.tokens_column) if h.tokens_column is not None else None
    times = on_rows(h, steps, h.time_column) if h.time_column is not None else None
    writer.writerow(("step", "tokens", "time", name))
    blank = [None] * len(steps)
    writer.writerows(zip(steps.tolist(), _cells(tokens, blank, int), _cells(times, blank, float), values.tolist()))


def _cells(column: np.ndarray | None, blank: list, kind: type) -> list:
    """A column as CSV cells: empty where it holds no value (NaN, or a history without it)."""
    if column is None or len(column) != len(blank):
        return blank
    ok = np.isfinite(column) if column.dtype.kind == "f" else np.ones(len(column), bool)
    return [kind(v) if good else None for v, good in zip(column.tolist(), ok.tolist())]


def check_metric(h: HistoryView, name: str) -> str | None:
    """Why ``name`` is no series of this history, in one line (None: it is one)."""
    try:
        series_values(h, name)
    except UnknownSeries as err:
        return str(err)
    return None
