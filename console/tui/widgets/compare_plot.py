"""The comparison's plot: the marked runs' loss curves (or another series, ``metric``)
overlaid, each in its own colour, with a legend; every run decimated by the same min/max
envelope as the dashboard's plot. It works as the dashboard's plot does: the same smoothing
(each run's raw envelope dimmed under its EMA line), a series of some steps only (the eval
loss) joined into a line, zoom (``z``/``Z``, a drag), pan (``,``/``.``), ``0`` for all of it
again, and a cursor (``←``/``→``, a click) whose legend line reads every run's value there
in the series' unit; x by step, tokens, or time since each run's first step."""

from __future__ import annotations

import math

import numpy as np
from rich.text import Text
from textual.reactive import reactive

from ...model.format import printable
from ...model.series import UnknownSeries, available, is_sparse, on_rows, series_values, spec_of
from ...model.units import unit_of
from ...plot.canvas import LABEL_WIDTH
from ...plot.ema import ema_debiased, line_dtype
from ...plot.overlay import SERIES_STYLES, build_overlay, render_overlay_runs
from ...plot.view import joined, with_cursor
from .plot_pane import PlotPane

AXIS_WORDS = {"step": "step", "tokens": "tokens", "time": "time since start"}


class ComparePlot(PlotPane):
    metric: reactive[str] = reactive("loss")        # the series compared (console.model.series)

    def __init__(self, smoothing: float = 0.98, **kwargs) -> None:
        super().__init__(**kwargs)
        self.set_reactive(ComparePlot.smoothing, smoothing)
        self.border_title = "loss, compared"
        self.series: list[tuple] | None = None
        self._frame: tuple[float, float, int] | None = None      # (x0, x1, cells) as last drawn
        self._ema: dict[tuple, np.ndarray] = {}

    @property
    def by_tokens(self) -> bool:
        return self.x_axis == "tokens"

    def show(self, series: list[tuple]) -> None:
        """``series``: ``(name, steps, tokens, loss, view)`` per run, in legend order."""
        self.series = series
        self._ema.clear()
        self.refresh()

    def names(self) -> list[str]:
        """The series of any of the runs, the first run's order first."""
        out: list[str] = []
        for run in self.series or ():
            out += [n for n in available(run[4]) if n not in out] if len(run) > 4 else []
        return out or ["loss"]

    # -- options ---------------------------------------------------------------------
    def _changed(self) -> None:
        self.border_subtitle = self.describe()
        self.refresh()

    def on_mount(self) -> None:
        self.border_subtitle = self.describe()

    def watch_metric(self, name: str) -> None:
        self.border_title = Text(f"{spec_of(name).label}, compared")      # no markup: a name from a history
        self._changed()

    def watch_x_axis(self) -> None:
        self.zoom, self.cursor = None, None         # ranges on another axis mean nothing here
        self._changed()

    def watch_log_y(self) -> None:
        self._changed()

    def watch_smoothing(self) -> None:
        self._changed()

    def watch_zoom(self) -> None:
        self._changed()

    def watch_cursor(self) -> None:
        self.refresh()

    def describe(self) -> str:
        ema = f"EMA {self.smoothing:g}" if self.smoothing > 0 else "EMA off"
        zoom = f" · {self._x_text(self.zoom[0])}..{self._x_text(self.zoom[1])}" if self.zoom else ""
        symbol = unit_of(self.metric).symbol
        return (f"x: {AXIS_WORDS[self.x_axis]}{zoom} · {ema} · {'log' if self.log_y else 'linear'} y"
                + (f" in {symbol}" if symbol else ""))

    # -- values ----------------------------------------------------------------------
    def run_values(self, run: tuple) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """A run's ``(steps, tokens, values)`` of the series compared (empty: it has none)."""
        name, steps, tokens, loss = run[:4]
        if self.metric == "loss" or len(run) < 5:
            return steps, tokens, loss
        view = run[4]
        try:
            s, v = series_values(view, self.metric)
        except UnknownSeries:
            return np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0)
        return s, on_rows(view, s, view.tokens_column), v

    def xy(self, run: tuple) -> tuple[np.ndarray, np.ndarray, bool]:
        """A run's x on the axis (ascending), its values, and whether they are a series of
        some steps only (joined, not smoothed)."""
        steps, tokens, values = self.run_values(run)
        sparse = len(run) > 4 and is_sparse(run[4], self.metric, steps)
        if self.x_axis == "step":
            return steps, values, sparse
        if self.x_axis == "tokens":
            x = np.asarray(tokens, np.float64) if tokens is not None else np.full(len(steps), np.nan)
            x = np.where(x >= 0, x, np.nan)
        else:
            view = run[4] if len(run) > 4 else None
            times = on_rows(view, steps, view.time_column) if view is not None and view.time_column is not None \
                else None
            x = np.asarray(times, np.float64) if times is not None else np.full(len(steps), np.nan)
            first = x[np.isfinite(x)]
            x = x - first[0] if len(first) else x
        known = np.isfinite(x)
        x, y = x[known], values[known]
        order = np.argsort(x, kind="stable")                # a resumed run's tokens may step back
        return x[order], y[order], sparse

    def _smooth(self, i: int, y: np.ndarray) -> np.ndarray | None:
        if self.smoothing <= 0:
            return None
        key = (i, self.metric, self.x_axis, self.smoothing)
        if key not in self._ema:
            line, _ = ema_debiased(y, self.smoothing, dtype=line_dtype(y))
            self._ema[key] = np.asarray(line, np.float64)       # the overlay checks its range in float64
        return self._ema[key]

    def full_range(self) -> tuple[int, int] | None:
        xs = [x for x, _, _ in map(self.xy, self.series or ()) if len(x)]
        if not xs:
            return None
        return math.floor(min(float(x[0]) for x in xs)), math.ceil(max(float(x[-1]) for x in xs))

    # -- zoom, pan, cursor -----------------------------------------------------------
    def unzoom(self) -> None:
        self.zoom, self.cursor = None, None

    def move_cursor(self, cells: int) -> None:
        """The cursor ``cells`` columns on; it starts at the right end of the view."""
        if self._frame is None:
            return
        x0, x1, width = self._frame
        if self.cursor is None or not x0 <= self.cursor <= x1:
            self.cursor = x1
            return
        col = min(width - 1, int((self.cursor - x0) / max(x1 - x0, 1e-12) * width)) + cells
        col = min(max(col, 0), width - 1)
        self.cursor = x0 + (col + 0.5) / width * (x1 - x0) if 0 < col < width - 1 else (x0 if col == 0 else x1)

    def x_at_column(self, column: int) -> float | None:
        if self._frame is None:
            return None
        x0, x1, width = self._frame
        col = min(max(column, 0), width - 1)
        return x0 + (col + 0.5) / width * (x1 - x0)

    def set_cursor(self, x: float | None) -> None:
        self.cursor = x

    # -- drawing ---------------------------------------------------------------------
    def _x_text(self, x: float) -> str:
        if self.x_axis == "time":
            s = int(x)
            return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"
        return f"{int(x):,}"

    def _value_at(self, x: np.ndarray, y: np.ndarray, at: float) -> float:
        """The run's last value at or before ``at`` (a sparse series' last point before);
        none past the run's end or before its start."""
        cell = (self._frame[1] - self._frame[0]) / self._frame[2] if self._frame else 0.0
        if not len(x) or at > float(x[-1]) + cell:
            return math.nan
        ok = np.isfinite(y)
        x, y = x[ok], y[ok]
        i = int(np.searchsorted(x, at, side="right")) - 1
        return float(y[i]) if i >= 0 else math.nan

    def render(self) -> Text:
        width, height = self.size.width, self.size.height
        if self.series is None:
            return Text("reading the histories…", style="grey50")
        cells = max(1, width - LABEL_WIDTH)
        fmt = unit_of(self.metric).format
        legend = Text(no_wrap=True, overflow="ellipsis")
        if self.cursor is not None:
            legend.append(f"{AXIS_WORDS[self.x_axis]} {self._x_text(self.cursor)}  ", style="bold")
        back: list[tuple[np.ndarray, np.ndarray]] = []      # raw envelopes under their EMA line, dimmed
        front: list[tuple[np.ndarray, np.ndarray]] = []
        back_styles, front_styles = [], []
        for i, run in enumerate(self.series):
            x, y, sparse = self.xy(run)
            style = SERIES_STYLES[i % len(SERIES_STYLES)]
            legend.append("■ ", style=style)
            legend.append(printable(run[0], 40), style="grey85")
            if not len(x):
                legend.append(f" (no {AXIS_WORDS[self.x_axis]})" if self.x_axis != "step" else " (empty)",
                              style="grey85")
            elif self.cursor is not None:
                legend.append(f" {fmt(self._value_at(x, y, self.cursor))}", style="bold")
            legend.append("  ")
            line = None if sparse else self._smooth(i, y)
            if self.zoom is not None:
                lo, hi = np.searchsorted(x, self.zoom[0], "left"), np.searchsorted(x, self.zoom[1], "right")
                x, y, line = x[lo:hi], y[lo:hi], line[lo:hi] if line is not None else None
            if sparse:
                x, y = joined(x, y, 2 * cells)
            if line is not None:
                back.append((x, y))
                back_styles.append(f"dim {style}")
            front.append((x, line if line is not None else y))
            front_styles.append(style)
        overlay = build_overlay(back + front, cells, max(1, height - 3), self.log_y, x_range=self.zoom,
                                unit=unit_of(self.metric))
        self._frame = (overlay.x0, overlay.x1, cells) if not overlay.empty_reason else None
        lines = render_overlay_runs(overlay, styles=(*back_styles, *front_styles), label_width=LABEL_WIDTH,
                                    front=len(back), x_axis="elapsed" if self.x_axis == "time" else "step")
        if self.cursor is not None and self._frame is not None:
            x0, x1, _ = self._frame
            if x0 <= self.cursor <= x1:
                col = min(cells - 1, int((self.cursor - x0) / max(x1 - x0, 1e-12) * cells))
                with_cursor(lines, col, LABEL_WIDTH, range(0, len(lines) - 2))
        text = Text(no_wrap=True, overflow="crop")
        text.append(" " * (LABEL_WIDTH if self.cursor is None else 1))
        text.append_text(legend)
        for runs in lines[: max(0, height - 1)]:
            text.append("\n")
            for chunk, style in runs:
                text.append(chunk, style=style)
        return text
