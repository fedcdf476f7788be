"""The dashboard: six panes, each repainted only when its part of the snapshot changed."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.reactive import var
from textual.screen import Screen

from ..plot import finding_markers, plot_markers
from ..views import Notice, RunSnapshot
from ..widgets import ArmsPane, CheckpointsPane, EventLog, KeyBar, LossPlot, ProblemsBar, SamplesPane, StatusPane


class DashboardScreen(Screen):
    # Below 100 columns the rows stack and the body scrolls (still every pane, one key away).
    WIDE_FROM = 100
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (WIDE_FROM, "-wide")]

    # A var, not a reactive: setting it must not repaint the whole screen, only the panes
    # whose part changed (they refresh themselves).
    snapshot: var[RunSnapshot | None] = var(None, always_update=True, init=False)

    def __init__(self, window_steps: int, smoothing: float) -> None:
        super().__init__(id="dashboard")
        self.window_steps = window_steps
        self.smoothing = smoothing

    def compose(self) -> ComposeResult:
        # The breakpoint class from the start: the first resize would otherwise add it
        # after the panes are styled, and restyle every one of them.
        wide = self.app.size.width >= self.WIDE_FROM
        self.set_class(wide, "-wide").set_class(not wide, "-narrow")
        with VerticalScroll(id="body"):
            with Horizontal(id="row-top", classes="row"):
                yield StatusPane(id="status", classes="pane")
                yield LossPlot(self.window_steps, self.smoothing, id="plot", classes="pane")
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
        yield KeyBar()

    _ready = False
    _early_notices: list[Notice]
    _markers_from: tuple | None = None      # (checkpoints, events) the plot's markers were made from
    _markers: list = []

    def on_mount(self) -> None:
        # A read can finish before the panes exist (the reader is a thread): what came
        # early is applied once they are mounted.
        self._ready = True
        for notice in getattr(self, "_early_notices", []):
            self.notice(notice)
        self._early_notices = []
        if self.snapshot is not None:
            self.watch_snapshot(self.snapshot)

    def watch_snapshot(self, snap: RunSnapshot | None) -> None:
        if snap is None or not self._ready:
            return
        now = self.app.now()
        self.query_one(StatusPane).show(snap, now)
        self.query_one(ProblemsBar).show(snap.problems())
        # The markers are made again only when the checkpoints or the events changed: with
        # thousands of checkpoints, not at every read.
        made_from = (snap.checkpoints, snap.history.events, snap.history.spikes, snap.history.nonfinite_steps)
        if self._markers_from is None or any(a is not b for a, b in zip(made_from, self._markers_from)):
            self._markers_from = made_from
            self._markers = plot_markers(*made_from[:2]) + finding_markers(*made_from[2:])
        self.query_one(LossPlot).show(snap.history, self._markers)
        self.query_one(CheckpointsPane).show(snap.checkpoints, snap.pivots, now, snap.retention)
        self.query_one(ArmsPane).show(snap.arms)
        self.query_one(SamplesPane).show(snap.samples, snap.samples_error)
        self.query_one(EventLog).log_lines(snap.log_tail, snap.log_seen)

    def notice(self, notice: Notice) -> None:
        if not self._ready:
            self._early_notices = [*getattr(self, "_early_notices", []), notice]
            return
        self.query_one(EventLog).notice(notice)

    @property
    def plot(self) -> LossPlot:
        return self.query_one(LossPlot)
