"""The dashboard: the panes, each repainted only when its part of the snapshot changed.

Two layouts of the same panes. From FULL_FROM (140x40) every pane is in view at once.
Below it (an SSH session opens at 80x24) the layout is compact: two status lines and the
loss plot always in view, and under the plot one pane at a time, chosen with the number
keys (the tab strip in that pane's top border names them). The number keys also focus a
pane in the full layout; a focused pane takes ↑/↓ and Enter (:mod:`console.tui.widgets.rows`).
"""

from __future__ import annotations

from textual import events
from textual.app import ComposeResult
from textual.containers import Grid, Horizontal, Vertical, VerticalScroll
from textual.geometry import Size
from textual.reactive import var
from textual.screen import Screen
from textual.widget import Widget

from ...model.series import DEFAULT_GRID, available, spec_of
from ...model.snapshot import Notice, RunSnapshot
from ...plot.ema import SmoothedLines
from ..keys import BACK_TO_OVERVIEW, JOB_KEYS, RUN_KEYS, VIEW_KEYS, bindings, hints, pane_keys
from ..messages import DetailRequested
from ..widgets import (
    ArmsPane,
    CheckpointsPane,
    EventLog,
    KeyBar,
    LossPlot,
    ProblemsBar,
    SamplesPane,
    StatusLine,
    StatusPane,
)
from ..widgets.problems import ALL, SHOWN
from .detail import DetailScreen
from .series_picker import SeriesPicker

# The full layout's fixed rows (status and plot 17, checkpoints and arms 12, the events
# at least 10, the key bar 1) need 40 lines; its arms table needs 140 columns beside the
# 48 of the checkpoints to keep its status and source columns. Below either, compact.
FULL_FROM = Size(140, 40)
# (key, name, widget id) of the panes, in the order of the tab strip.
PANES = (("1", "events", "events"), ("2", "checkpoints", "checkpoints"), ("3", "arms", "arms"),
         ("4", "samples", "samples"), ("5", "problems", "problems"), ("6", "status", "status"))
PANE_IDS = {name: wid for _, name, wid in PANES}
FIRST_PANE = "events"
# The dashboard's keys: the run's, then those that move among the panes (README's key
# table ends with the hints the key bar says after the keys).
DASHBOARD_KEYS = (*RUN_KEYS, *pane_keys(PANES, f"{FULL_FROM.width}x{FULL_FROM.height}"), *VIEW_KEYS, *JOB_KEYS)
# The key bar's hints in the order it keeps them as the width shrinks: Tab last (the number
# keys do what it does), so that at 160 columns the plot's keys are named.
BAR_HINTS = hints(tuple(sorted(DASHBOARD_KEYS, key=lambda k: k.key == "tab")))


class DashboardScreen(Screen):
    AUTO_FOCUS = None           # no pane is focused until a number key (or Tab, or a click) picks one
    BINDINGS = bindings(DASHBOARD_KEYS)

    # A var, not a reactive: setting it must not repaint the whole screen, only the panes
    # whose part changed (they refresh themselves).
    snapshot: var[RunSnapshot | None] = var(None, always_update=True, init=False)
    # How the watcher follows the run (console.read.watcher): shown by the status pane, and by the
    # status line where it polls.
    watched_by: var[str] = var("", init=False)

    def __init__(self, window_steps: int, smoothing: float, grid_series: tuple[str, ...] = DEFAULT_GRID) -> None:
        super().__init__(id="dashboard")
        self.grid_series = grid_series
        self.grid = False               # g: the grid of small plots in the main plot's place (full layout)
        self._grid_config: tuple[str, ...] | None = None     # run.toml's [console] plots, as applied
        self._grid_unknown: set[str] = set()                 # names said to be no series of the history
        self.window_steps = window_steps
        self.smoothing = smoothing
        self.pane = FIRST_PANE
        self.compact: bool | None = None
        self._applied: tuple[bool, str] | None = None       # (compact, pane) the panes were set up for
        self._titles: dict[str, str] = {}
        self.smoothed_lines = SmoothedLines()       # the plots of one series share its smoothed line

    def compose(self) -> ComposeResult:
        # The layout's classes from the start: the first resize would otherwise add them
        # after the panes are styled, and restyle every one of them.
        self._set_layout_classes(self.app.size)
        yield StatusLine(id="status-line")
        with VerticalScroll(id="body"):
            with Horizontal(id="row-top", classes="row"):
                # The plot comes first: under it, in the compact layout, the status pane
                # (key 6); in the full one the status is docked to the plot's left.
                # The plots are bound to the snapshot: each plots a new one itself.
                yield LossPlot(self.window_steps, self.smoothing, id="plot", lines=self.smoothed_lines,
                               classes="pane").data_bind(DashboardScreen.snapshot)
                with Grid(id="plot-grid"):
                    for i, name in enumerate(self.grid_series):
                        yield LossPlot(self.window_steps, self.smoothing, series=name, small=True, id=f"grid-{i}",
                                       lines=self.smoothed_lines,
                                       classes="pane small-plot").data_bind(DashboardScreen.snapshot)
                yield StatusPane(id="status", classes="pane")
            with Horizontal(id="row-middle", classes="row"):
                yield CheckpointsPane(id="checkpoints", classes="pane")
                yield ArmsPane(id="arms", classes="pane")
            with Horizontal(id="row-bottom", classes="row"):
                # The current problems are pinned above the event log: log lines scroll
                # the log, never them.
                with Vertical(id="events-box"):
                    yield ProblemsBar(id="problems")
                    yield EventLog(id="events", classes="pane")
                yield SamplesPane(id="samples", classes="pane")
        # The panes' and the plot's keys are said where there is room (BAR_HINTS); in the
        # compact layout the tab strip says the panes too.
        yield KeyBar(hints=BAR_HINTS)

    _ready = False
    _early_notices: list[Notice]

    def on_mount(self) -> None:
        # A read can finish before the panes exist (the reader is a thread): what came
        # early is applied once they are mounted.
        self._ready = True
        self._titles = {wid: str(self.query_one(f"#{wid}").border_title or "") for _, _, wid in PANES}
        self._apply_layout()
        for notice in getattr(self, "_early_notices", []):
            self.notice(notice)
        self._early_notices = []
        if self.watched_by:
            self.watch_watched_by(self.watched_by)
        if self.snapshot is not None:
            self.watch_snapshot(self.snapshot)

    # -- the two layouts -------------------------------------------------------------
    def _set_layout_classes(self, size: Size) -> bool:
        compact = size.width < FULL_FROM.width or size.height < FULL_FROM.height
        # One batch: each class changed on its own would restyle every pane.
        classes = {"-compact": compact, "-full": not compact, "-grid": self.grid}
        classes.update((f"-tab-{name}", compact and name == self.pane) for _, name, _ in PANES)
        self.update_classes(classes, animate=False)
        return compact

    def _apply_layout(self) -> None:
        """The layout for the app's size now, and the compact layout's tab strip."""
        was = self.compact
        compact = self._set_layout_classes(self.app.size)
        if (compact, self.pane) == self._applied:
            return
        self._applied = (compact, self.pane)
        self.compact = compact
        self.query_one(ProblemsBar).set_limit(ALL if compact else SHOWN)
        for key, name, wid in PANES:
            widget = self.query_one(f"#{wid}")
            title = self._tab_strip() if compact and name == self.pane else self._titles[wid]
            if widget.border_title != title:
                widget.border_title = title
        if compact and was is not True:
            self._focus_pane()
            if self.snapshot is not None:
                self.query_one(StatusLine).show(self.snapshot, self.app.now())

    def _tab_strip(self) -> str:
        return " ".join(f"[reverse] {key} {name} [/]" if name == self.pane else f"{key} {name}"
                        for key, name, _ in PANES)

    def on_resize(self, event: events.Resize) -> None:
        if self._ready:
            self._apply_layout()

    def on_screen_resume(self) -> None:
        # A resize while a modal screen was in front reached this screen's size, not its
        # layout: catch up on the way back.
        if self._ready:
            self._apply_layout()

    def _focus_pane(self) -> None:
        widget = self.query_one(f"#{PANE_IDS[self.pane]}")
        if widget.focusable and widget.display:
            widget.focus()

    # -- the loss plot's keys ------------------------------------------------------
    def action_log_y(self) -> None:
        self.plot.log_y = not self.plot.log_y

    def action_window(self) -> None:
        self.plot.toggle_window()

    def action_smoothing(self) -> None:
        self.plot.cycle_smoothing()

    def action_x_axis(self) -> None:
        self.plot.cycle_x_axis()

    def action_series(self) -> None:
        """m: the series picker for the focused plot (else the main plot, or the grid's first)."""
        plot = self.active_plot
        h = self.snapshot.history if self.snapshot is not None else None
        names = available(h) if h is not None else []

        def picked(name: str | None) -> None:
            if name is not None:
                plot.series = name
        self.app.push_screen(SeriesPicker(names, plot.series, f"series of the {spec_of(plot.series).label} plot"),
                             picked)

    def action_series_table(self) -> None:
        """t: every series in a table (its value at the cursor, last, min, max, mean, best)."""
        from .series_table import SeriesTable

        self.app.push_screen(SeriesTable(self))

    def action_zoom(self, factor: float) -> None:
        self.active_plot.zoom_by(factor)

    def action_pan(self, direction: int) -> None:
        self.active_plot.pan(direction)

    def action_cursor(self, cells: int) -> None:
        self.active_plot.move_cursor(cells)

    def action_unzoom(self) -> None:
        plot = self.active_plot
        plot.zoom, plot.cursor = None, None

    def action_grid(self) -> None:
        if self.compact:
            self.app.bell()
            self.notify(f"the grid of plots needs the full layout ({FULL_FROM.width}x{FULL_FROM.height} or more)")
            return
        self.grid = not self.grid
        self._set_layout_classes(self.app.size)

    def _configure_grid(self, snap: RunSnapshot) -> None:
        """The grid's series from run.toml's ``[console] plots`` (when it changes), and once
        per name one line in the event log for a name that is no series of the history."""
        wanted = tuple(snap.config.console.plots) if snap.config is not None and snap.config.console else None
        if wanted is not None and wanted != self._grid_config:
            self._grid_config = wanted
            cells = list(self.query(".small-plot").results(LossPlot))
            for cell, name in zip(cells, wanted):
                cell.series = name
            for cell in cells[len(wanted):]:
                cell.display = False
        if wanted and snap.history.n_steps:
            have = available(snap.history)
            for name in wanted:
                if name not in have and name not in self._grid_unknown:
                    self._grid_unknown.add(name)
                    self.notice(Notice(self.app.now(), f"run.toml [console] plots: no series {name!r} in this "
                                       f"history (yet); it has: {', '.join(have)}", "warning"))

    @property
    def active_plot(self) -> LossPlot:
        """The plot the plot keys act on: the focused one, else the one in view."""
        if isinstance(self.focused, LossPlot) and self.focused.display:
            return self.focused
        if self.grid and not self.compact:
            return self.query_one("#grid-0", LossPlot)
        return self.plot

    def on_loss_plot_view_changed(self, message: LossPlot.ViewChanged) -> None:
        """Every plot shows the same steps and the same cursor (the x axes line up)."""
        source = message.plot
        for plot in self.query(LossPlot):
            if plot is not source:
                plot.zoom, plot.cursor = source.zoom, source.cursor

    def action_pane(self, name: str) -> None:
        """Key 1-6: the compact layout shows that pane under the plot; both layouts focus it."""
        self.pane = name
        self._apply_layout()
        widget: Widget = self.query_one(f"#{PANE_IDS[name]}")
        if not self.compact and not widget.display:         # the problems line, with no problem
            self.app.bell()
            return
        self._focus_pane()

    def action_next_pane(self, step: int) -> None:
        """Tab (``step`` 1) or Shift+Tab (-1): the next or previous pane, as its number key
        would; from no focused pane (the full layout at start), the current one. The
        problems pane is passed over where it is hidden (no problem, full layout)."""
        names = [name for _, name, _ in PANES]
        focused = self.focused
        current = next((name for name in names if focused is not None
                        and self.query_one(f"#{PANE_IDS[name]}") in focused.ancestors_with_self), None)
        at = names.index(current if current is not None else self.pane)
        if current is None and not self.compact:
            step = 0
        for _ in names:
            at = (at + step) % len(names)
            if self.compact or self.query_one(f"#{PANE_IDS[names[at]]}").display:
                break
            step = step or 1
        self.action_pane(names[at])

    def on_detail_requested(self, message: DetailRequested) -> None:
        self.app.push_screen(DetailScreen(message.title, message.body))

    # -- data --------------------------------------------------------------------------
    def watch_watched_by(self, watched_by: str) -> None:
        if not self._ready or self._closing_down():
            return
        self.query_one(StatusPane).watched_by = self.query_one(StatusLine).watched_by = watched_by
        if self.snapshot is not None:
            self.watch_snapshot(self.snapshot)

    def watch_snapshot(self, snap: RunSnapshot | None) -> None:
        if snap is None or not self._ready or self._closing_down():
            return
        now = self.app.now()
        self.query_one(StatusPane).show(snap, now)
        if self.compact:                    # hidden in the full layout: drawn when it is shown
            self.query_one(StatusLine).show(snap, now)
        self.query_one(ProblemsBar).show(snap.problems)
        self._configure_grid(snap)          # before the plots (bound) plot it: they may change series
        self.query_one(CheckpointsPane).show(snap.checkpoints, snap.pivots, now, snap.retention,
                                              snap.external_checkpoints)
        self.query_one(ArmsPane).show(snap.arms)
        self.query_one(SamplesPane).show(snap.samples, snap.samples_error)
        self.query_one(EventLog).log_lines(snap.log_tail, snap.log_seen)

    def notice(self, notice: Notice) -> None:
        if not self._ready:
            self._early_notices = [*getattr(self, "_early_notices", []), notice]
            return
        if self._closing_down():
            return
        self.query_one(EventLog).notice(notice)

    def _closing_down(self) -> bool:
        """The app is quitting: a read that lands now is dropped. Checked on the app, which
        stops running before it removes any pane: Textual removes the panes concurrently, so
        one pane still there says nothing of the others."""
        return not self.app.is_running

    @property
    def plot(self) -> LossPlot:
        return self.query_one("#plot", LossPlot)


class RunDashboardScreen(DashboardScreen):
    """A run's dashboard opened from the overview: Escape returns to it."""

    BINDINGS = bindings((BACK_TO_OVERVIEW,))
