"""The comparison's plot: the marked runs' loss curves (or another series, ``metric``)
overlaid, each in its own colour, with a legend; every run decimated by the same min/max
envelope as the dashboard's plot."""

from __future__ import annotations

import numpy as np
from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from ..format import printable
from ..model.series import UnknownSeries, available, series_values, spec_of
from ..series_report import on_rows
from ..plot import LABEL_WIDTH
from ..plot_overlay import SERIES_STYLES, build_overlay, render_overlay_runs


class ComparePlot(Widget):
    by_tokens: reactive[bool] = reactive(False)
    log_y: reactive[bool] = reactive(False)
    metric: reactive[str] = reactive("loss")        # the series compared (console.model.series)

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.border_title = "loss, compared"
        self.series: list[tuple] | None = None

    def show(self, series: list[tuple]) -> None:
        """``series``: ``(name, steps, tokens, loss, view)`` per run, in legend order."""
        self.series = series
        self.refresh()

    def names(self) -> list[str]:
        """The series of any of the runs, the first run's order first."""
        out: list[str] = []
        for run in self.series or ():
            out += [n for n in available(run[4]) if n not in out] if len(run) > 4 else []
        return out or ["loss"]

    def watch_metric(self, name: str) -> None:
        self.border_title = Text(f"{spec_of(name).label}, compared")      # no markup: a name from a history
        self.refresh()

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

    def on_mount(self) -> None:
        self.border_subtitle = self.describe()

    def watch_by_tokens(self) -> None:
        self.border_subtitle = self.describe()
        self.refresh()

    def watch_log_y(self) -> None:
        self.border_subtitle = self.describe()
        self.refresh()

    def describe(self) -> str:
        return f"x: {'tokens' if self.by_tokens else 'step'} · {'log' if self.log_y else 'linear'} y"

    def xy(self, steps: np.ndarray, tokens: np.ndarray, loss: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """A run's x (steps, or tokens where the history has them) and loss."""
        if not self.by_tokens:
            return steps, loss
        known = tokens >= 0
        x, y = tokens[known], loss[known]
        order = np.argsort(x, kind="stable")                # a resumed run's tokens may step back
        return x[order], y[order]

    def render(self) -> Text:
        width, height = self.size.width, self.size.height
        if self.series is None:
            return Text("reading the histories…", style="grey50")
        legend = Text(no_wrap=True, overflow="ellipsis")
        shown = []
        for i, run in enumerate(self.series):
            name = run[0]
            x, y = self.xy(*self.run_values(run))
            style = SERIES_STYLES[i % len(SERIES_STYLES)]
            legend.append("■ ", style=style)
            legend.append(printable(name, 40) + ("" if len(x) else " (no tokens)" if self.by_tokens else " (empty)"),
                          style="grey85")
            legend.append("  ")
            shown.append((x, y))
        overlay = build_overlay(shown, max(1, width - LABEL_WIDTH), max(1, height - 3), self.log_y)
        text = Text(no_wrap=True, overflow="crop")
        text.append(" " * LABEL_WIDTH)
        text.append_text(legend)
        for runs in render_overlay_runs(overlay, label_width=LABEL_WIDTH)[: max(0, height - 1)]:
            text.append("\n")
            for chunk, style in runs:
                text.append(chunk, style=style)
        return text
