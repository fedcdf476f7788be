"""The comparison: the marked runs' whole histories read (in a worker thread) through their
mirrors (:mod:`console.read.history_mirror`: mapped when valid, else parsed and the mirror written),
their loss curves (or any series: ``m``) overlaid, and under them the table of what differs
between their ``run.toml`` and start events (:mod:`console.model.run_diff`; it scrolls). The plot
works as the dashboard's (:class:`~console.tui.widgets.compare_plot.ComparePlot`): ``x`` step, tokens
or time since start, ``l`` log y, ``e`` smoothing, ``z``/``Z``/``,``/``.``/``0`` zoom and pan,
``←``/``→`` a cursor reading every run; Escape returns."""

from __future__ import annotations

from pathlib import Path

from rich.table import Table
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Static

from rundir import ConfigError, load_run_config
from rundir.layout import LOSS_JSON

from ...model.format import LINE_LIMIT, printable
from ...model.run_diff import DiffRow, run_diff, start_data
from ...model.snapshot import plain_view
from ...read.history_mirror import HistoryMirror
from ..keys import COMPARE_KEYS, bindings
from ..messages import CompareReady
from ..widgets import KeyBar
from ..widgets.compare_plot import ComparePlot
from .series_picker import SeriesPicker


def read_series(runs: list[tuple[str, Path]]) -> CompareReady:
    """Each run's whole history: ``(name, steps, tokens, loss, view)``, the problems met (a
    mirror rebuilt or not saved among them), and what differs between the runs' ``run.toml``
    and start events."""
    series, problems, settings = [], [], []
    for name, path in runs:
        mirror = HistoryMirror(path / LOSS_JSON)
        history, update, note = mirror.open()
        saved = mirror.keep_up(history, update)
        if history.error:
            problems.append(f"{name}: {history.error}")
        problems.extend(f"{name}: {n.text()}" for n in (note, saved) if n is not None)
        view = plain_view(history)
        series.append((name, view.step, view.tokens_column, view.loss, view))
        try:
            loaded = load_run_config(path)
            config = loaded.to_dict()
            # Unset, the eval cadence follows the checkpoints': the value the run evaluated at.
            config["run"]["eval_every"] = loaded.run.eval_cadence
        except (ConfigError, OSError):
            config = None                   # another engine's run, or one the dashboard says is broken
        settings.append((config, start_data(history.events)))
    return CompareReady(series, problems, run_diff(settings))


def differences_table(names: list[str], rows: list[DiffRow]) -> Table | Text:
    """The table of what differs: a row a setting, a column a run."""
    if not rows:
        return Text("run.toml and start events: the same in every run compared", style="grey50")
    table = Table(box=None, expand=True, padding=(0, 1), header_style="bold")
    table.add_column("differs", style="cyan", no_wrap=True, overflow="ellipsis", ratio=3)
    # Text, not str: a Table parses a str as markup, and a key or value from a file may look like it.
    for name in names:
        table.add_column(Text(printable(name, 30)), no_wrap=True, overflow="ellipsis", ratio=2)
    for row in rows:
        table.add_row(Text(printable(row.key, LINE_LIMIT)), *(Text(printable(v, LINE_LIMIT)) for v in row.values))
    return table


class CompareScreen(Screen):
    BINDINGS = bindings(COMPARE_KEYS)

    def __init__(self, runs: list[tuple[str, Path]], smoothing: float) -> None:
        super().__init__(id="compare")
        self.runs, self.smoothing = runs, smoothing

    def compose(self) -> ComposeResult:
        yield ComparePlot(self.smoothing, id="compare-plot", classes="pane")
        with VerticalScroll(id="compare-differences", classes="pane"):
            yield Static("", id="compare-differences-table")
        yield Static("", id="compare-problems")
        yield KeyBar()

    def on_mount(self) -> None:
        self.query_one("#compare-differences").border_title = "what differs: run.toml, start events"
        self.load()

    @work(thread=True, exclusive=True, group="compare", exit_on_error=False)
    def load(self) -> None:
        self.post_message(read_series(self.runs))

    def on_compare_ready(self, message: CompareReady) -> None:
        self.query_one(ComparePlot).show(message.series)
        self.query_one("#compare-differences-table", Static).update(
            differences_table([name for name, _ in self.runs], message.differences))
        self.query_one("#compare-problems", Static).update(
            Text("; ".join(printable(p, LINE_LIMIT) for p in message.problems), style="red"))

    def action_x_axis(self) -> None:
        self.query_one(ComparePlot).cycle_x_axis()

    def action_smoothing(self) -> None:
        self.query_one(ComparePlot).cycle_smoothing()

    def action_zoom(self, factor: float) -> None:
        self.query_one(ComparePlot).zoom_by(factor)

    def action_pan(self, direction: int) -> None:
        self.query_one(ComparePlot).pan(direction)

    def action_unzoom(self) -> None:
        self.query_one(ComparePlot).unzoom()

    def action_cursor(self, cells: int) -> None:
        self.query_one(ComparePlot).move_cursor(cells)

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
