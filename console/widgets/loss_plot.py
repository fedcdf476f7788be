"""The loss plot pane: the whole cumulative history, raw plus a debiased-EMA line.

Drawn by :mod:`console.plot` (min/max envelope per pixel column, then braille), so no
spike is hidden at any width. ``log_y``, ``window`` and ``smoothing`` are reactive: the
app's keys flip them and the watchers repaint. The EMA is extended incrementally as
steps arrive and recomputed only when the history rewinds or the smoothing changes; the
rendered text is cached until the data, the size or an option changes.
"""

from __future__ import annotations

import numpy as np
from rich.segment import Segment
from textual.reactive import reactive
from textual.strip import Strip
from textual.widget import Widget

import time

from rich.style import Style

from rundir.abandoned import abandoned_mask
from rundir.layout import EVENT_ROLLBACK

from ..format import X_AXES
from ..plot import (ABANDONED_STYLE, MARKER_GLYPHS, RARE_MARKERS, Marker, PlotOptions, build_canvas, ema_debiased,
                    plot_x, render_runs)
from ..views import HistoryView

SMOOTHING_STEPS = (0.0, 0.9, 0.98, 0.995, 0.999)
LABEL_WIDTH = 8
# New steps redraw the plot at most this often (a key, a resize or a rewind: at once).
DATA_REPAINT_S = 1.0


class LossPlot(Widget):
    log_y: reactive[bool] = reactive(False)
    window: reactive[int | None] = reactive(None)          # None: all steps; N: the last N
    smoothing: reactive[float] = reactive(0.98)
    x_axis: reactive[str] = reactive("step")              # step | tokens | time

    def __init__(self, window_steps: int = 2000, smoothing: float = 0.98, **kwargs) -> None:
        super().__init__(**kwargs)
        self.border_title = "loss"
        self.window_steps = window_steps
        self.set_reactive(LossPlot.smoothing, smoothing)
        self._history: HistoryView | None = None
        self._markers: list[Marker] = []
        self._markers_version = 0           # bumped when the markers change: the render cache's key
        self._ema: np.ndarray | None = None
        self._ema_key: tuple | None = None
        self._ema_carry = (0.0, 0.0)
        self._cache_key: tuple | None = None
        self._strips: list[Strip] = []
        self._built_at = 0.0
        self._repaint_timer = None
        self._styles: dict[str | None, Style] = {}

    # -- data ------------------------------------------------------------------
    def show(self, history: HistoryView, markers: list[Marker]) -> None:
        """Plot ``history`` with ``markers``; a no-op when neither changed."""
        same_markers = markers is self._markers or markers == self._markers
        if history is self._history and same_markers:
            return
        grew_only = (self._history is not None and same_markers and history.rewinds == self._history.rewinds)
        if not same_markers:
            self._markers_version += 1
        self._history, self._markers = history, markers
        wait = self._built_at + DATA_REPAINT_S - time.monotonic()
        if not grew_only or wait <= 0:
            self.refresh()
        elif self._repaint_timer is None:
            self._repaint_timer = self.set_timer(wait, self._timed_refresh)

    def _timed_refresh(self) -> None:
        self._repaint_timer = None
        self.refresh()

    def _smooth(self, h: HistoryView) -> np.ndarray | None:
        beta = self.smoothing
        if beta <= 0:
            return None
        key = (h.rewinds, beta)
        n = len(h.loss)
        if self._ema is not None and self._ema_key == key and len(self._ema) <= n:
            k = len(self._ema)
            if k < n:
                tail, self._ema_carry = ema_debiased(h.loss[k:], beta, self._ema_carry)
                self._ema = np.concatenate([self._ema, tail])
        else:
            self._ema, self._ema_carry = ema_debiased(h.loss, beta)
            self._ema_key = key
        return self._ema

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

    def cycle_x_axis(self) -> None:
        self.x_axis = X_AXES[(X_AXES.index(self.x_axis) + 1) % len(X_AXES)]

    def toggle_window(self) -> None:
        self.window = None if self.window else self.window_steps

    def cycle_smoothing(self) -> None:
        steps = SMOOTHING_STEPS
        bigger = [s for s in steps if s > self.smoothing + 1e-12]
        self.smoothing = bigger[0] if bigger else steps[0]

    def describe(self) -> str:
        window = "all steps" if not self.window else f"last {self.window:,}"
        ema = f"EMA {self.smoothing:g}" if self.smoothing > 0 else "EMA off"
        axis = "" if self.x_axis == "step" else f" · x: {'wall clock' if self.x_axis == 'time' else 'tokens'}"
        return f"{window} · {ema} · {'log' if self.log_y else 'linear'} y{axis}"

    # -- drawing -----------------------------------------------------------------
    # The Line API: the plot is rendered to strips once per change of data, size or
    # option, and Textual asks for them line by line; no Visual conversion per frame.
    def render_line(self, y: int) -> Strip:
        self._build()
        if y < len(self._strips):
            return self._strips[y]
        return Strip.blank(self.size.width, self.rich_style)

    def _build(self) -> None:
        h = self._history
        width, height = self.size.width, self.size.height
        # Asked once per line of the pane: the key costs nothing however many markers there are.
        key = (h.version if h else None, id(h), self._markers_version, width, height,
               self.log_y, self.window, self.smoothing, self.x_axis)
        if key == self._cache_key:
            return
        self._cache_key = key
        self._built_at = time.monotonic()
        base = self.rich_style
        strips = []
        for runs in self.plot_runs(width, height)[:height]:
            segments = [Segment(chunk, base + self._style(style)) for chunk, style in runs]
            strips.append(Strip(segments).adjust_cell_length(width, base))
        self._strips = strips

    def _style(self, name: str | None) -> Style:
        style = self._styles.get(name)
        if style is None:
            style = self._styles[name] = Style.parse(name) if name else Style()
        return style

    def plot_runs(self, width: int, height: int) -> list[list[tuple[str, str | None]]]:
        """The pane's lines as ``(text, style)`` runs: a legend, then the plot."""
        h = self._history
        if h is None:
            return [[("reading .loss.json…", "grey50")]]
        options = PlotOptions(log_y=self.log_y, window=self.window, smoothing=self.smoothing)
        legend = [(" " * LABEL_WIDTH + "raw", "grey62"), (" ", None), ("smoothed", "bold green"), ("  ", None)]
        shown = {m.kind for m in self._markers}
        abandoned = abandoned_mask(h.step, h.time_column, h.events, h.last_step)
        if any(ev.event == EVENT_ROLLBACK for ev in h.events):
            shown.add("rollback")
        for kind, (glyph, style) in MARKER_GLYPHS.items():
            if kind not in RARE_MARKERS or kind in shown:
                legend += [(glyph, style), (f" {kind}  ", "grey62")]
        if abandoned is not None:
            legend += [("abandoned", ABANDONED_STYLE), ("  ", None)]
        plot_h = max(1, height - 3)
        x, axis = plot_x(self.x_axis, h.step, h.tokens_column, h.time_column)
        canvas = build_canvas(h.step, h.loss, self._smooth(h), max(1, width - LABEL_WIDTH), plot_h,
                              options, self._markers, x=x, x_axis=axis, abandoned=abandoned)
        return [legend, *render_runs(canvas, label_width=LABEL_WIDTH)]
