"""The comparison: the marked runs' whole histories read (in a worker thread) through their
mirrors (:mod:`console.history_mirror`: mapped when valid, else parsed and the mirror written),
their loss curves (or any series: ``m``) overlaid. ``x`` plots by step or by tokens, ``l``
switches log y, Escape returns."""

from __future__ import annotations

from pathlib import Path

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.screen import Screen
from textual.widgets import Static

from rundir.layout import LOSS_JSON

from ..format import LINE_LIMIT, printable
from ..history_mirror import HistoryMirror
from ..keys import COMPARE_KEYS, bindings
from ..messages import CompareReady
from ..widgets import KeyBar
from ..widgets.compare_plot import ComparePlot
from ..series_report import plain_view
from .series_picker import SeriesPicker


def read_series(runs: list[tuple[str, Path]]) -> CompareReady:
    """Each run's whole history: ``(name, steps, tokens, loss, view)`` and the problems met (a
    mirror rebuilt or not saved among them)."""
    series, problems = [], []
    for name, path in runs:
        mirror = HistoryMirror(path / LOSS_JSON)
        history, update, note = mirror.open()
        saved = mirror.keep_up(history, update)
        if history.error:
            problems.append(f"{name}: {history.error}")
        problems.extend(f"{name}: {n.text()}" for n in (note, saved) if n is not None)
        view = plain_view(history)
        series.append((name, view.step, view.tokens_column, view.loss, view))
    return CompareReady(series, problems)


class CompareScreen(Screen):
    BINDINGS = bindings(COMPARE_KEYS)

    def __init__(self, runs: list[tuple[str, Path]]) -> None:
        super().__init__(id="compare")
        self.runs = runs

    def compose(self) -> ComposeResult:
        yield ComparePlot(id="compare-plot", classes="pane")
        yield Static("", id="compare-problems")
        yield KeyBar()

    def on_mount(self) -> None:
        self.load()

    @work(thread=True, exclusive=True, group="compare", exit_on_error=False)
    def load(self) -> None:
        self.post_message(read_series(self.runs))

    def on_compare_ready(self, message: CompareReady) -> None:
        self.query_one(ComparePlot).show(message.series)
        self.query_one("#compare-problems", Static).update(
            Text("; ".join(printable(p, LINE_LIMIT) for p in message.problems), style="red"))

    def action_x_axis(self) -> None:
        plot = self.query_one(ComparePlot)
        plot.by_tokens = not plot.by_tokens

    def action_log_y(self) -> None:
        plot = self.query_one(ComparePlot)
        plot.log_y = not plot.log_y

    def action_series(self) -> None:
        """m: the series the runs are compared on."""
        plot = self.query_one(ComparePlot)

        def picked(name: str | None) -> None:
            if name is not None:
                plot.metric = name
        self.app.push_screen(SeriesPicker(plot.names(), plot.metric, "series compared"), picked)

    def action_back(self) -> None:
        self.dismiss(None)
