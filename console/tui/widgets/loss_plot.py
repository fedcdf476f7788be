"""The plot pane: a series (the loss unless ``m`` picked another) of the whole cumulative
history or of the steps zoomed into, raw plus a debiased-EMA line, and a cursor that reads
every series at its step (:mod:`console.plot.view`).

Drawn by :mod:`console.plot.canvas` (min/max envelope per pixel column, then braille), so no
spike is hidden at any width. ``log_y``, ``window`` and ``smoothing`` are reactive: the
app's keys flip them and the watchers repaint. The EMA is extended incrementally as
steps arrive and recomputed only when the history rewinds or the smoothing changes; the
rendered text is cached until the data, the size or an option changes.
"""

from __future__ import annotations

import time

import numpy as np
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.message import Message
from textual.reactive import reactive, var
from textual.strip import Strip

from ...model.format import AXIS_NEEDS
from ...model.markers import MARKER_KINDS, Marker
from ...model.series import UnknownSeries, is_sparse, on_rows, series_values, spec_of, value_at
from ...model.snapshot import HistoryView, RunSnapshot
from ...model.units import unit_of
from ...plot.canvas import ABANDONED_STYLE, LABEL_WIDTH, PlotOptions, build_canvas, plot_x, render_runs
from ...plot.ema import SmoothedLine, SmoothedLines
from ...plot.view import cursor_column, joined, readout, step_at, visible_rows, with_cursor, zoom_text
from ..keys import PLOT_KEYS, bindings
from .plot_pane import PlotPane

# New steps redraw the plot at most this often (a key, a resize or a rewind: at once).
DATA_REPAINT_S = 1.0


class LossPlot(PlotPane):
    """A plot of one series (the loss by default: ``m`` picks another), with its zoom and
    cursor. ``small``: a cell of the full layout's grid, with no legend line."""

    can_focus = True
    BINDINGS = bindings(PLOT_KEYS)
    window: reactive[int | None] = reactive(None)          # None: all steps; N: the last N
    series: reactive[str] = reactive("loss")              # a name of console.model.series
    cursor: reactive[int | None] = reactive(None)          # the cursor's step

    class ViewChanged(Message):
        """The zoom or the cursor changed: the dashboard gives every plot the same."""

        def __init__(self, plot: "LossPlot") -> None:
            super().__init__()
            self.plot = plot

    def __init__(self, window_steps: int = 2000, smoothing: float = 0.98, series: str = "loss",
                 small: bool = False, lines: SmoothedLines | None = None, **kwargs) -> None:
        super().__init__(**kwargs)
        self.small = small
        self.window_steps = window_steps
        self.set_reactive(LossPlot.smoothing, smoothing)
        self.set_reactive(LossPlot.series, series)
        self.border_title = Text(spec_of(series).label)      # no markup: a name from the history
        self._history: HistoryView | None = None
        self._markers: tuple[Marker, ...] = ()
        # The versions of the snapshot's history and markers drawn: the render cache's key.
        self._version: tuple[int | None, int | None] | None = None
        # The smoothed line drawn, shared with the dashboard's other plots of the same series.
        self._lines = lines if lines is not None else SmoothedLines()
        self._line: SmoothedLine | None = None
        self._line_of = series
        self._cache_key: tuple | None = None
        self._strips: list[Strip] = []
        self._strips_key: tuple | None = None     # (the drawing's key, the cursor) of the strips
        self._runs: list[list[tuple[str, str | None]]] = []
        self._frame: tuple | None = None      # what the last canvas showed: (x0, x1, cells, steps, x)
        self._abandoned: tuple[tuple, np.ndarray | None] | None = None
        self._built_at = 0.0
        self._repaint_timer = None
        self._styles: dict[str | None, Style] = {}
        self._drawn_axis: tuple[str, str] | None = None     # (the x axis asked for, the one drawn)
        self._sparse = False            # the series drawn has some steps only: its points joined, not smoothed

    # -- data ------------------------------------------------------------------
    # The dashboard's snapshot, bound to it (``data_bind``): each new one is plotted straight
    # from the app's handler of the read, with no pass through the dashboard.
    snapshot: var[RunSnapshot | None] = var(None, always_update=True, init=False)

    def watch_snapshot(self, snap: RunSnapshot | None) -> None:
        if snap is not None:
            self.show(snap)

    def show(self, snap: RunSnapshot) -> None:
        """Plot the snapshot's history with its markers; a no-op when neither part changed."""
        version = (snap.versions.get("history"), snap.versions.get("markers"))
        if version == self._version:
            return
        history = snap.history
        same_markers = self._version is not None and version[1] == self._version[1]
        grew_only = (self._history is not None and same_markers and history.rewinds == self._history.rewinds)
        self._version = version
        self._history, self._markers = history, snap.markers
        wait = self._built_at + DATA_REPAINT_S - time.monotonic()
        if not grew_only or wait <= 0:
            self.refresh()
        elif self._repaint_timer is None:
            self._repaint_timer = self.set_timer(wait, self._timed_refresh)

    def _timed_refresh(self) -> None:
        self._repaint_timer = None
        self.refresh()

    def values(self, h: HistoryView) -> tuple[np.ndarray, np.ndarray]:
        """The plotted series' ``(steps, values)`` (empty when the history has none)."""
        if self.series == "loss":
            return h.step, h.loss
        try:
            return series_values(h, self.series)
        except UnknownSeries:
            return np.empty(0, np.int64), np.empty(0)

    def _smooth(self, h: HistoryView, values: np.ndarray) -> np.ndarray | None:
        beta = self.smoothing
        if beta <= 0:
            self._line = None
            return None
        if self._line is None or (self._line_of, self._line.beta) != (self.series, beta):
            self._line, self._line_of = self._lines.line(self.series, beta), self.series
        return self._line.of(values, h.rewinds)

    def _abandoned_rows(self, h: HistoryView, steps: np.ndarray) -> np.ndarray | None:
        """The abandoned-steps mask at ``steps``, computed once per history version."""
        key = (self._version, self.series)
        if self._abandoned is None or self._abandoned[0] != key:
            self._abandoned = (key, on_rows(h, steps, h.abandoned_rows))
        return self._abandoned[1]

    # -- reactive options --------------------------------------------------------
    def on_mount(self) -> None:
        self.border_subtitle = self.describe()

    def _options_changed(self) -> None:
        self.border_subtitle = self.describe()
        self.refresh()

    def watch_log_y(self) -> None:
        self._options_changed()

    def watch_window(self) -> None:
        self._options_changed()

    def watch_smoothing(self) -> None:
        self._options_changed()

    def watch_x_axis(self) -> None:
        self._options_changed()

    def watch_series(self, name: str) -> None:
        self.border_title = Text(spec_of(name).label)
        self._options_changed()

    def watch_zoom(self) -> None:
        self._options_changed()
        self.post_message(self.ViewChanged(self))

    def watch_cursor(self) -> None:
        self._options_changed()
        self.post_message(self.ViewChanged(self))

    def toggle_window(self) -> None:
        self.window = None if self.window else self.window_steps

    def describe(self) -> str:
        if self.small:
            value = self._cursor_value()
            return zoom_text(self.zoom) + (f" · {value}" if value and self.zoom else value)
        window = "all steps" if not self.window else f"last {self.window:,}"
        if self.zoom is not None:
            window = zoom_text(self.zoom)
        ema = f"EMA {self.smoothing:g}" if self.smoothing > 0 else "EMA off"
        if self._sparse:
            ema = "points joined, not smoothed"
        axis = "" if self.x_axis == "step" else f" · x: {'wall clock' if self.x_axis == 'time' else 'tokens'}"
        if self.x_axis != "step" and self._drawn_axis == (self.x_axis, "step"):
            # The history cannot give that axis for every step: the plot is by step, and says so.
            axis = f" · x: step (not every step has {AXIS_NEEDS[self.x_axis]})"
        symbol = unit_of(self.series).symbol
        return f"{window} · {ema} · {'log' if self.log_y else 'linear'} y{f' in {symbol}' if symbol else ''}{axis}"

    def _cursor_value(self) -> str:
        h = self._history
        if self.cursor is None or h is None:
            return ""
        spec = spec_of(self.series)
        try:
            return f"{spec.format(value_at(h, self.series, self.cursor))} at {self.cursor:,}"
        except UnknownSeries:
            return ""

    # -- zoom, pan and cursor ------------------------------------------------------
    def full_range(self) -> tuple[int, int] | None:
        h = self._history
        if h is None or not len(h.step):
            return None
        return int(h.step[0]), int(h.step[-1])

    def move_cursor(self, cells: int) -> None:
        """The cursor ``cells`` cell columns on (it starts at the newest step in view)."""
        frame = self._frame
        if frame is None:
            return
        x0, x1, width, steps, x = frame
        if not len(steps):
            return
        if self.cursor is None:
            self.set_cursor(int(steps[-1]))
            return
        col = cursor_column(self.cursor, x0, x1, width, steps, x)
        col = (width - 1 if cells < 0 else 0) if col is None else col + cells
        self.set_cursor(step_at(col, x0, x1, width, steps, x))

    def set_cursor(self, step: float | None) -> None:
        self.cursor = None if step is None else int(step)

    def action_cursor(self, cells: int) -> None:
        self.move_cursor(cells)

    def x_at_column(self, column: int) -> int | None:
        frame = self._frame
        if frame is None:
            return None
        x0, x1, width, steps, x = frame
        return step_at(column, x0, x1, width, steps, x)

    # -- drawing -----------------------------------------------------------------
    # The Line API: the plot is rendered to strips once per change of data, size or
    # option, and Textual asks for them line by line; no Visual conversion per frame.
    def render_line(self, y: int) -> Strip:
        self._build()
        if y < len(self._strips):
            return self._strips[y]
        return Strip.blank(self.size.width, self.rich_style)

    def _build(self) -> None:
        width, height = self.size.width, self.size.height
        # Asked once per line of the pane: the key costs nothing however many markers there are,
        # and it holds what the drawing is made of (the snapshot's history and markers
        # versions, the size and the options), so no change can be missed.
        key = (self._version, width, height, self.log_y, self.window, self.smoothing, self.x_axis, self.series,
               self.zoom)
        if key != self._cache_key:
            self._cache_key = key
            self._built_at = time.monotonic()
            self._runs = self.plot_runs(width, height)[:height]
            self._strips_key = None
        if self._strips_key == (key, self.cursor):
            return
        self._strips_key = (key, self.cursor)
        runs = self._runs
        if self.cursor is not None and self._frame is not None:     # the cursor costs no new canvas
            runs = list(runs)
            self._add_cursor(runs, width)
        base = self.rich_style
        self._strips = [Strip([Segment(chunk, base + self._style(style)) for chunk, style in line]
                              ).adjust_cell_length(width, base) for line in runs]

    def _add_cursor(self, runs: list[list[tuple[str, str | None]]], width: int) -> None:
        x0, x1, cells, steps, x = self._frame
        col = cursor_column(self.cursor, x0, x1, cells, steps, x)
        top = 0 if self.small else 1
        if col is not None:
            with_cursor(runs, col, LABEL_WIDTH, range(top, len(runs) - 2))
        if not self.small and self._history is not None and runs:
            near = int((x1 - x0) / max(cells, 1) / 2) if x is None else 0
            runs[0] = [(readout(self._history, self.cursor, self._markers, near=near, width=width, first=self.series),
                        "bold")]

    def view_span(self, h: HistoryView) -> tuple[int, int] | None:
        """The steps every plot spans, from the history's step lines whatever the series: the
        zoom, else the last N steps (the window), else all (None: the history has no step)."""
        if not len(h.step):
            return None
        if self.zoom is not None:
            return self.zoom
        last = int(h.step[-1])
        return (max(int(h.step[0]), last - self.window + 1) if self.window else int(h.step[0])), last

    @staticmethod
    def _x_span(h: HistoryView, view: tuple[int, int] | None, axis: str):
        """``view`` in steps and on the drawn axis (None where a column lacks its ends), so
        that the grid's cells and the main plot span the same x (:func:`build_canvas`)."""
        if view is None:
            return None
        if axis == "step":
            return view, view
        ends = on_rows(h, np.asarray(view, np.int64), h.tokens_column if axis == "tokens" else h.time_column)
        ok = ends is not None and len(ends) == 2 and bool(np.all(np.isfinite(ends.astype(np.float64))))
        return view, (float(ends[0]), float(ends[1])) if ok else None

    def _style(self, name: str | None) -> Style:
        style = self._styles.get(name)
        if style is None:
            style = self._styles[name] = Style.parse(name) if name else Style()
        return style

    def _x_columns(self, h: HistoryView, steps: np.ndarray) -> tuple[np.ndarray | None, np.ndarray | None]:
        """The tokens and times at ``steps``, for the tokens or time axis (none on the step axis)."""
        if self.x_axis == "step":
            return None, None
        return on_rows(h, steps, h.tokens_column), on_rows(h, steps, h.time_column)

    def plot_runs(self, width: int, height: int) -> list[list[tuple[str, str | None]]]:
        """The pane's lines as ``(text, style)`` runs: a legend (not in a small plot), then the plot."""
        h = self._history
        if h is None:
            return [[("reading .loss.json…", "grey50")]]
        steps, values = self.values(h)
        cells = max(1, width - LABEL_WIDTH)
        view = self.view_span(h)
        rows = visible_rows(steps, view)
        options = PlotOptions(log_y=self.log_y, window=None, smoothing=self.smoothing)
        plot_h = max(1, height - (2 if self.small else 3))
        sparse = is_sparse(h, self.series, steps)
        if sparse != self._sparse:
            self._sparse = sparse
            self.call_later(self._options_changed)          # the subtitle says it is not smoothed
        if sparse:
            # A series of some steps only (the eval lines): the steps in view joined into a
            # line (not dots), not smoothed, and not dimmed (a rollback's steps are the step lines').
            shown_steps, shown_values = joined(steps[rows], values[rows], 2 * cells)
            smooth, abandoned = None, None
            tokens, times = self._x_columns(h, shown_steps)
        else:
            shown_steps, shown_values = steps[rows], values[rows]
            tokens, times = (c[rows] if c is not None else None for c in self._x_columns(h, steps))
            smooth = self._smooth(h, values)
            smooth = smooth[rows] if smooth is not None else None
            abandoned = self._abandoned_rows(h, steps)
            abandoned = abandoned[rows] if abandoned is not None else None
        x, axis = plot_x(self.x_axis, shown_steps, tokens, times)
        if self._drawn_axis != (self.x_axis, axis):
            self._drawn_axis = (self.x_axis, axis)
            self.call_later(self._options_changed)          # the subtitle says which axis was drawn
        canvas = build_canvas(shown_steps, shown_values, smooth, cells, plot_h, options, self._markers, x=x,
                              x_axis=axis, abandoned=abandoned, span=self._x_span(h, view, axis))
        canvas.unit = unit_of(self.series)
        if canvas.empty_reason and not len(steps) and self.series != "loss":
            canvas.empty_reason = f"no {spec_of(self.series).label} in this history"
        self._frame = (canvas.x0, canvas.x1, cells, shown_steps, x)
        lines = render_runs(canvas, label_width=LABEL_WIDTH)
        if self.small:
            return lines
        legend = legend_runs({m.kind for m in self._markers}, abandoned is not None and abandoned.any(), width,
                             sparse)
        return [legend, *lines]


def legend_runs(shown: set[str], abandoned: bool, width: int, sparse: bool = False) -> list[tuple[str, str | None]]:
    """The legend line at ``width``: every entry whole or not at all (a cut "< rewind"
    would leave a "<" that says nothing). Where they do not all fit the entries move
    closer, then the common markers the plot does not show go, then "raw smoothed",
    then the common markers it shows; a rare marker (named only when the plot shows one)
    stays. A ``sparse`` series (the eval loss) is its points joined, not raw and smoothed."""
    lines = [("points joined", "grey62")] if sparse else [("raw", "grey62"), (" ", None), ("smoothed", "bold green")]
    entries: list[tuple[list[tuple[str, str | None]], int]] = [(lines, 2)]     # (runs, how late it goes: higher first)
    for kind, spec in MARKER_KINDS.items():
        if spec.rare and kind not in shown:
            continue
        drop = 0 if spec.rare else (1 if kind in shown else 3)
        entries.append(([(spec.glyph, spec.style), (f" {spec.legend}", "grey62")], drop))
    if abandoned:
        entries.append(([("abandoned", ABANDONED_STYLE)], 0))

    def length(kept: list, indent: int, gap: int) -> int:
        return indent + sum(sum(len(text) for text, _ in runs) for runs, _ in kept) + gap * (len(kept) - 1)

    for indent, gap in ((LABEL_WIDTH, 2), (1, 2), (1, 1)):
        if length(entries, indent, gap) <= width:
            break
    while length(entries, indent, gap) > width and any(late for _, late in entries):
        latest = max(late for _, late in entries)
        entries.pop(max(i for i, (_, late) in enumerate(entries) if late == latest))     # the last of them
    line: list[tuple[str, str | None]] = [(" " * indent, None)]
    for i, (runs, _) in enumerate(entries):
        if i:
            line.append((" " * gap, None))
        line += runs
    return line
