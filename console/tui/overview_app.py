"""``andrea-console runs/``: the overview of every run, and each run's dashboard one key away.

The dashboard's app with the overview as its first screen and no run open: Enter opens a
session on the selected run (its reader, watcher and reads: :mod:`console.tui.session`) and
shows its dashboard, Escape closes the session and returns. ``c`` and ``s`` on the overview act on the selected run through the
same verification, confirmation and signalling as on the dashboard.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Callable

from textual import work

from rundir import Verification, verify_trainer
from ..read.run_summary import RunsSummarizer
from rundir.storage import free_bytes

from ..model.format import printable
from ..model.snapshot import TrainerView
from ..plot.canvas import PlotOptions
from ..read.reader import RunReader
from ..read.runs_watcher import REFRESH_S, watch_runs
from ..text.overview_report import trainer_label
from .app import ConsoleApp
from .keys import BACK_TO_OVERVIEW, bindings
from .messages import ConsoleNotice, FilesChanged, RunsScanned
from .screens import DashboardScreen
from .screens.compare import CompareScreen
from .screens.overview import OverviewScreen
from rundir.text import counted

class RunDashboardScreen(DashboardScreen):
    """A run's dashboard opened from the overview: Escape returns to it."""

    BINDINGS = bindings((BACK_TO_OVERVIEW,))


class OverviewApp(ConsoleApp):
    def __init__(self, root: str | Path, *, now: Callable[[], float] = time.time,
                 verify: Callable[[Path], Verification] = verify_trainer,
                 probe: Callable[[Path], TrainerView] | None = None, watch: bool = True,
                 options: PlotOptions | None = None, window: int = 2000, tick: float | None = 2.0,
                 stall_after: float | None = None, free_space: Callable[[Path], int | None] = free_bytes,
                 refresh: float | None = REFRESH_S, read_only: bool = False, poll: bool = False):
        self.root = Path(root)
        super().__init__(None, now=now, probe=probe, watch=watch, options=options, window=window, tick=tick,
                         read_only=read_only, poll=poll)
        self.summarizer = RunsSummarizer(self.root, verify, stall_after)
        self.probe = probe
        self.stall_after = stall_after
        self.free_space = free_space
        self.refresh_s = refresh if watch else None
        self.summaries: list = []
        self._scanned = False
        self._stop_runs = threading.Event()
        self._wake_runs = threading.Event()
        self._scan_lock = threading.Lock()
        self.sub_title = printable(self.root.resolve().name or self.root)

    def get_default_screen(self) -> OverviewScreen:
        self.overview = OverviewScreen(self.root)
        return self.overview

    # Textual calls a message's handler in every class of the app's MRO: the app's own
    # (ticks, the open run's session) runs beside these.
    def on_mount(self) -> None:
        self.watch_runs_dir()

    def on_unmount(self) -> None:
        self._stop_runs.set()

    # -- the overview ------------------------------------------------------------------
    def scan(self) -> RunsScanned:
        with self._scan_lock:               # a one-shot rescan may overlap another
            summaries, listing = self.summarizer.scan(self.now())
        return RunsScanned(summaries, listing)

    @work(thread=True, group="runs", exit_on_error=False)
    def watch_runs_dir(self) -> None:
        if self.refresh_s is None:          # not watching: one scan, then the worker ends
            self.post_message(self.scan())
            return
        watch_runs(self.scan, self.post_message, self._stop_runs, self._wake_runs, self.refresh_s)

    def on_runs_scanned(self, message: RunsScanned) -> None:
        first, self._scanned = not self._scanned, True
        self.summaries = message.summaries
        self.overview.show(message.summaries, message.listing, self.now())
        if first:
            self.call_after_refresh(self.started)

    def rescan(self) -> None:
        if self.refresh_s is None:
            self.watch_runs_dir()
        else:
            self._wake_runs.set()

    def _selected_trainer(self) -> tuple[Path, TrainerView] | None:
        s = self.overview.selected
        if s is None:
            self.say("no run selected", "warning")
            return None
        return s.path, TrainerView(state=s.trainer_state, label=trainer_label(s), reason=s.trainer_reason, pid=s.pid)

    def action_checkpoint(self) -> None:
        if self.session is not None:
            return super().action_checkpoint()
        chosen = self._selected_trainer()
        if chosen is not None:
            self.say(f"c: checkpoint requested for {chosen[0].name}")
            self.checkpoint_now(chosen[0])

    def action_stop(self) -> None:
        if self.session is not None:
            return super().action_stop()
        chosen = self._selected_trainer()
        if chosen is not None:
            self.confirm_stop(*chosen)

    def open_compare(self, runs: list[tuple[str, Path]]) -> None:
        self.say(f"comparing {counted(len(runs), 'run')}")
        self.push_screen(CompareScreen(runs))

    # -- one run's dashboard -------------------------------------------------------------
    def open_run(self, run_dir: Path) -> None:
        """A session on ``run_dir`` and its dashboard (Escape comes back)."""
        self.session = self.new_session(run_dir, RunReader(run_dir, now=self.now, probe=self.probe,
                                                           stall_after=self.stall_after, free_space=self.free_space))
        self.dashboard = RunDashboardScreen(self.window_steps, self.options.smoothing)
        self.sub_title = printable(run_dir.name)
        self.push_screen(self.dashboard)
        self.follow_run()

    def action_back(self) -> None:
        self.stop_following()
        self.session = None
        self.sub_title = printable(self.root.resolve().name or self.root)
        self.pop_screen()
        self.rescan()

    def on_files_changed(self, message: FilesChanged) -> None:
        if self.session is None:            # a signal worker's news on the overview: scan again
            self.rescan()

    def on_console_notice(self, message: ConsoleNotice) -> None:
        if self.session is None:
            self.rescan()

    def notices(self):
        """The open run's events pane, else the overview's notice line."""
        return self.dashboard if self.session is not None else self.overview
