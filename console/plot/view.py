"""What a plot is looking at: its zoom (a range of steps), its pan, its cursor, and what
the cursor reads. Torch- and Textual-free arithmetic, shared by every plot of the dashboard.

A zoom is a pair of steps ``(first, last)``; None shows the whole history. Only the rows
inside it are decimated (:func:`visible_rows`: two binary searches), so that zooming,
panning and moving the cursor cost what the visible steps cost, not the history.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Iterable

import numpy as np

from rundir.step_rows import search_steps

from ..model.markers import MARKER_KINDS, Marker
from ..model.series import available, spec_of, value_at

if TYPE_CHECKING:
    from ..model.snapshot import HistoryView

ZOOM_FACTOR = 2.0           # z halves the steps in view, Z doubles them
PAN_FRACTION = 0.25         # , and . move the view by a quarter of it
MIN_SPAN = 8                # the narrowest zoom, in steps
CURSOR_STYLE = "reverse"

StepRange = tuple[int, int]


def visible_rows(steps: np.ndarray, zoom: StepRange | None) -> slice:
    """The rows of ``steps`` (ascending) inside the zoom: all of them without one."""
    if zoom is None or not len(steps):
        return slice(0, len(steps))
    lo, hi = int(search_steps(steps, zoom[0])), int(search_steps(steps, zoom[1], side="right"))
    return slice(int(lo), max(int(lo), hi))


def zoomed(zoom: StepRange | None, full: StepRange, factor: float, center: float | None = None) -> StepRange | None:
    """The zoom ``factor`` times narrower (``factor`` < 1: wider) around ``center`` (default:
    the middle of the view), kept inside ``full``; None once it covers the whole history."""
    first, last = zoom if zoom is not None else full
    span = max(last - first, 1)
    new_span = max(MIN_SPAN, int(round(span / factor)))
    if new_span >= full[1] - full[0]:
        return None
    mid = (first + last) / 2 if center is None else center
    # The center keeps its place in the view: a cursor near the right edge stays there.
    share = (mid - first) / span if span else 0.5
    start = int(round(mid - share * new_span))
    return _clamped(start, new_span, full)


def panned(zoom: StepRange | None, full: StepRange, direction: int) -> StepRange | None:
    """The zoom moved by :data:`PAN_FRACTION` of itself, left (-1) or right (+1), inside ``full``."""
    if zoom is None:
        return None
    span = zoom[1] - zoom[0]
    return _clamped(zoom[0] + direction * max(1, int(span * PAN_FRACTION)), span, full)


def _clamped(start: int, span: int, full: StepRange) -> StepRange:
    start = max(full[0], min(start, full[1] - span))
    return start, min(full[1], start + span)


def cursor_column(cursor: int, x0: float, x1: float, width: int, steps: np.ndarray | None = None,
                  x: np.ndarray | None = None) -> int | None:
    """The cell column of the cursor's step on a plot ``width`` cells wide over ``[x0, x1]``
    (``x``: the x of each of ``steps`` on another axis); None outside it."""
    where = float(cursor)
    if x is not None and steps is not None and len(steps):
        where = float(np.interp(cursor, steps.astype(np.float64), x.astype(np.float64)))
    if not x0 <= where <= x1 or width <= 0:
        return None
    return min(width - 1, int((where - x0) / max(x1 - x0, 1e-12) * width))


def step_at(column: int, x0: float, x1: float, width: int, steps: np.ndarray,
            x: np.ndarray | None = None) -> int | None:
    """The step shown at cell ``column`` (the history's step nearest to its middle)."""
    if not len(steps) or width <= 0:
        return None
    where = x0 + (min(max(column, 0), width - 1) + 0.5) / width * (x1 - x0)
    axis = steps if x is None else x
    i = int(np.searchsorted(axis, where))
    if i >= len(axis) or (i > 0 and where - axis[i - 1] <= axis[i] - where):
        i -= 1
    return int(steps[max(i, 0)])


def with_cursor(lines: list[list[tuple[str, str | None]]], column: int, label_width: int,
                rows: Iterable[int]) -> None:
    """Show the cursor's cell column reversed on the plot's ``rows`` (in place)."""
    at = label_width + column
    for row in rows:
        if row >= len(lines):
            continue
        out: list[tuple[str, str | None]] = []
        pos = 0
        for text, style in lines[row]:
            end = pos + len(text)
            if pos <= at < end:
                k = at - pos
                mark = text[k] if text[k] != " " else "│"
                out += [(text[:k], style), (mark, f"{style or ''} {CURSOR_STYLE}".strip()), (text[k + 1:], style)]
            else:
                out.append((text, style))
            pos = end
        lines[row] = [(t, s) for t, s in out if t]


MORE_HINT = "t: every series"       # said where the readout leaves series out


def readout(h: "HistoryView", step: int, markers: Iterable[Marker], names: list[str] | None = None,
            near: int = 0, width: int | None = None, first: str | None = None) -> str:
    """What the cursor reads at ``step``, in at most ``width`` characters and never cut in
    a part: the step, series ``first``'s value (the plotted one), the markers within ``near``
    steps (the steps its cell column covers), the time and tokens there, then every other
    series' value (``names``: default all the history has) in its unit, while they fit; where
    some do not, :data:`MORE_HINT` says where they all are."""
    row = int(search_steps(h.step, step))
    head, rest = [f"step {step:,}"], []
    if row < len(h.step) and int(h.step[row]) == step:
        if h.time_column is not None and math.isfinite(h.time_column[row]):
            try:
                rest.append(time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(h.time_column[row]))))
            except (OverflowError, ValueError, OSError):
                pass
        if h.tokens_column is not None and h.tokens_column[row] >= 0:
            rest.append(f"{int(h.tokens_column[row]):,} tok")
    here = sorted({m.kind for m in markers if abs(m.step - step) <= near}, key=lambda k: -MARKER_KINDS[k].priority)
    names = list(names if names is not None else available(h))
    if first is not None and first in names:
        names.remove(first)
        names.insert(0, first)
    values = [f"{spec_of(name).label} {spec_of(name).format(value_at(h, name, step))}" for name in names]
    parts = [*head, *values[:1], *(f"{MARKER_KINDS[k].glyph} {MARKER_KINDS[k].legend}" for k in here), *rest,
             *values[1:]]
    if width is None or len(" · ".join(parts)) <= width:
        return " · ".join(parts)
    kept: list[str] = []
    for part in parts:
        if len(" · ".join([*kept, part, MORE_HINT])) <= width:
            kept.append(part)
    return " · ".join([*kept, MORE_HINT]) if len(" · ".join([*kept, MORE_HINT])) <= width else " · ".join(kept)


def zoom_text(zoom: StepRange | None) -> str:
    return "" if zoom is None else f"steps {zoom[0]:,}..{zoom[1]:,}"


def joined(steps: np.ndarray, values: np.ndarray, columns: int) -> tuple[np.ndarray, np.ndarray]:
    """A sparse series (an eval every N steps: fewer points than pixel columns) with points
    added on the straight line between each two of its own, one per pixel column, so that
    it is drawn as a line, not as dots; its own points are all kept (the envelope still
    holds each one's value exactly)."""
    ok = np.isfinite(values)
    steps, values = steps[ok].astype(np.float64), values[ok]
    if len(steps) < 2 or len(steps) >= columns:
        return steps, values
    between = np.linspace(steps[0], steps[-1], columns)
    dense = np.union1d(steps, between)
    return dense, np.interp(dense, steps, values)
