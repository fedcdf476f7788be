"""The loss plot pane: the whole cumulative history, raw plus a debiased-EMA line.

Drawn by :mod:`console.plot` (min/max envelope per pixel column, then braille), so no
spike is hidden at any width. ``log_y``, ``window`` and ``smoothing`` are reactive: the
app's keys flip them and the watchers repaint. The EMA is extended incrementally as
steps arrive and recomputed only when the history rewinds or the smoothing changes; the
rendered text is cached until the data, the size or an option changes.
"""

from __future__ import annotations

import numpy as np
from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from ..plot import MARKER_GLYPHS, Marker, PlotOptions, build_canvas, ema_debiased, render
from ..snapshot import HistoryView, RunSnapshot, plot_markers

SMOOTHING_STEPS = (0.0, 0.9, 0.98, 0.995, 0.999)
LABEL_WIDTH = 8


class LossPlot(Widget):
    log_y: reactive[bool] = reactive(False)
    window: reactive[int | None] = reactive(None)          # None: all steps; N: the last N
    smoothing: reactive[float] = reactive(0.98)

    def __init__(self, window_steps: int = 2000, smoothing: float = 0.98, **kwargs) -> None:
        super().__init__(**kwargs)
        self.border_title = "loss"
        self.window_steps = window_steps
        self.set_reactive(LossPlot.smoothing, smoothing)
        self._history: HistoryView | None = None
        self._markers: list[Marker] = []
        self._ema: np.ndarray | None = None
        self._ema_key: tuple | None = None
        self._ema_carry = (0.0, 0.0)
        self._cache_key: tuple | None = None
        self._cache: Text | None = None

    # -- data ------------------------------------------------------------------
    def show(self, snap: RunSnapshot) -> None:
        markers = [Marker(s, k) for s, k in plot_markers(snap)]
        if snap.history is self._history and markers == self._markers:
            return
        self._history, self._markers = snap.history, markers
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

    def toggle_window(self) -> None:
        self.window = None if self.window else self.window_steps

    def cycle_smoothing(self) -> None:
        steps = SMOOTHING_STEPS
        bigger = [s for s in steps if s > self.smoothing + 1e-12]
        self.smoothing = bigger[0] if bigger else steps[0]

    def describe(self) -> str:
        window = "all steps" if not self.window else f"last {self.window:,}"
        ema = f"EMA {self.smoothing:g}" if self.smoothing > 0 else "EMA off"
        return f"{window} · {ema} · {'log' if self.log_y else 'linear'} y"

    # -- drawing -----------------------------------------------------------------
    def render(self) -> Text:
        h = self._history
        width, height = self.content_size.width, self.content_size.height
        key = (h.version if h else None, id(h), tuple((m.step, m.kind) for m in self._markers), width, height,
               self.log_y, self.window, self.smoothing)
        if key == self._cache_key and self._cache is not None:
            return self._cache
        if h is None:
            text = Text("reading .loss.json…", style="grey50")
        else:
            options = PlotOptions(log_y=self.log_y, window=self.window, smoothing=self.smoothing)
            legend = Text.assemble(("raw", "grey62"), " ", ("smoothed", "bold green"), "  ",
                                   *(part for kind, (glyph, style) in MARKER_GLYPHS.items()
                                     for part in ((glyph, style), (f" {kind}  ", "grey62"))))
            plot_h = max(1, height - 3)
            canvas = build_canvas(h.step, h.loss, self._smooth(h), max(1, width - LABEL_WIDTH), plot_h,
                                  options, self._markers)
            text = Text(no_wrap=True, overflow="crop")
            text.append(" " * LABEL_WIDTH)
            text.append_text(legend)
            text.append("\n")
            text.append_text(render(canvas, label_width=LABEL_WIDTH))
        self._cache_key, self._cache = key, text
        return text
