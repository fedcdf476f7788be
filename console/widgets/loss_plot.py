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

from ..format import AXIS_NEEDS, X_AXES
from ..model.markers import MARKER_KINDS, Marker
from ..plot import ABANDONED_STYLE, PlotOptions, build_canvas, ema_debiased, plot_x, render_runs
from ..model.snapshot import HistoryView, RunSnapshot

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
        self._markers: tuple[Marker, ...] = ()
        # The versions of the snapshot's history and markers drawn: the render cache's key.
        self._version: tuple[int | None, int | None] | None = None
        self._ema: np.ndarray | None = None
        self._ema_key: tuple | None = None
        self._ema_carry = (0.0, 0.0)
        self._cache_key: tuple | None = None
        self._strips: list[Strip] = []
        self._built_at = 0.0
        self._repaint_timer = None
        self._styles: dict[str | None, Style] = {}
        self._drawn_axis: tuple[str, str] | None = None     # (the x axis asked for, the one drawn)

    # -- data ------------------------------------------------------------------
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
        if self.x_axis != "step" and self._drawn_axis == (self.x_axis, "step"):
            # The history cannot give that axis for every step: the plot is by step, and says so.
            axis = f" · x: step (not every step has {AXIS_NEEDS[self.x_axis]})"
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
        width, height = self.size.width, self.size.height
        # Asked once per line of the pane: the key costs nothing however many markers there are,
        # and it holds what the drawing is made of (the snapshot's history and markers
        # versions, the size and the options), so no change can be missed.
        key = (self._version, width, height, self.log_y, self.window, self.smoothing, self.x_axis)
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
        shown = {m.kind for m in self._markers}
        abandoned = abandoned_mask(h.step, h.time_column, h.events, h.last_step)
        legend = legend_runs(shown, abandoned is not None, width)
        plot_h = max(1, height - 3)
        x, axis = plot_x(self.x_axis, h.step, h.tokens_column, h.time_column)
        if self._drawn_axis != (self.x_axis, axis):
            self._drawn_axis = (self.x_axis, axis)
            self.call_later(self._options_changed)          # the subtitle says which axis was drawn
        canvas = build_canvas(h.step, h.loss, self._smooth(h), max(1, width - LABEL_WIDTH), plot_h,
                              options, self._markers, x=x, x_axis=axis, abandoned=abandoned)
        return [legend, *render_runs(canvas, label_width=LABEL_WIDTH)]


def legend_runs(shown: set[str], abandoned: bool, width: int) -> list[tuple[str, str | None]]:
    """The legend line at ``width``: every entry whole or not at all (a cut "< rewind"
    would leave a "<" that says nothing). Where they do not all fit the entries move
    closer, then the common markers the plot does not show go, then "raw smoothed",
    then the common markers it shows; a rare marker (named only when the plot shows one)
    stays."""
    entries: list[tuple[list[tuple[str, str | None]], int]] = [     # (runs, how late it goes: higher first)
        ([("raw", "grey62"), (" ", None), ("smoothed", "bold green")], 2)]
    for kind, spec in MARKER_KINDS.items():
        if spec.rare and kind not in shown:
            continue
        drop = 0 if spec.rare else (1 if kind in shown else 3)
        entries.append(([(spec.glyph, spec.style), (f" {kind}", "grey62")], drop))
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
