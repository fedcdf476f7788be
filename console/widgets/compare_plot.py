"""The comparison's plot: the marked runs' loss curves overlaid, each in its own colour, with
a legend; every run decimated by the same min/max envelope as the dashboard's plot."""

from __future__ import annotations

import numpy as np
from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from ..format import printable
from ..plot import SERIES_STYLES, build_overlay, render_overlay_runs

LABEL_WIDTH = 8


class ComparePlot(Widget):
    by_tokens: reactive[bool] = reactive(False)
    log_y: reactive[bool] = reactive(False)

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.border_title = "loss, compared"
        self.series: list[tuple[str, np.ndarray, np.ndarray, np.ndarray]] | None = None

    def show(self, series: list[tuple[str, np.ndarray, np.ndarray, np.ndarray]]) -> None:
        """``series``: ``(name, steps, tokens, loss)`` per run, in legend order."""
        self.series = series
        self.refresh()

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
        for i, (name, steps, tokens, loss) in enumerate(self.series):
            x, y = self.xy(steps, tokens, loss)
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
