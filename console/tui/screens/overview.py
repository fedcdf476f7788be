"""The overview of a runs directory: one row per run, the selected run's problems, the last
thing the console did, and the keys. Enter opens the run's dashboard (the app routes it).

The screen keeps its runs fresh itself: a thread worker scans the directory (every
``refresh`` seconds, and at once when :meth:`OverviewScreen.rescan` wakes it) and posts each
scan; the screen shows it on the UI thread.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Callable

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.screen import Screen
from textual.widgets import DataTable, Static

from rundir.runs import RunsListing
from rundir.text import counted

from ...model.findings import summary_problems
from ...model.format import LINE_LIMIT, printable
from ...model.levels import Level
from ...model.run_facts import RunSummary
from ...model.snapshot import Notice
from ...read.run_summary import RunsSummarizer
from ...read.runs_watcher import watch_runs
from ..keys import OVERVIEW_KEYS, bindings
from ..messages import RunsScanned
from ..widgets import KeyBar
from ..widgets.runs_table import RunsTable

NOTICE_STYLES = {Level.GOOD: "green", Level.WARNING: "yellow", Level.ERROR: "bold red", Level.ACTION: "cyan",
                 Level.INFO: "grey70"}


class OverviewScreen(Screen):
    BINDINGS = bindings(OVERVIEW_KEYS)

    def __init__(self, root: Path, summarizer: RunsSummarizer, now: Callable[[], float],
                 refresh: float | None) -> None:
        super().__init__(id="overview")
        self.root = root
        self.listing: RunsListing | None = None
        self.summaries: list[RunSummary] = []
        self.summarizer, self.now, self.refresh_s = summarizer, now, refresh
        self._scanned = False
        self._stop_runs = threading.Event()
        self._wake_runs = threading.Event()
        self._scan_lock = threading.Lock()

    def compose(self) -> ComposeResult:
        yield Static(self._title(None), id="overview-title")
        yield RunsTable(id="runs")
        yield Static("", id="overview-columns")
        yield Static("", id="overview-problems")
        yield Static("", id="overview-notice")
        yield KeyBar()

    def _title(self, listing: RunsListing | None) -> Text:
        text = Text(f"runs in {printable(self.root.resolve().name or self.root, LINE_LIMIT)}", style="bold")
        if listing is None:
            text.append(" · reading…", style="grey62")
            return text
        text.append(f" · {counted(len(listing.runs), 'run')}, the most recently active first", style="grey70")
        if listing.skipped:
            names = ", ".join(printable(name, 40) for name, _ in listing.skipped[:3])
            more = f" and {len(listing.skipped) - 3} more" if len(listing.skipped) > 3 else ""
            text.append(f" · not runs: {names}{more}", style="grey50")
        if listing.error:
            text.append(f" · {printable(listing.error, LINE_LIMIT)}", style="bold red")
        return text

    # -- the runs, scanned in a thread worker ----------------------------------------------
    def on_mount(self) -> None:
        self.watch_runs_dir()

    def on_unmount(self) -> None:
        self._stop_runs.set()

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

    def rescan(self) -> None:
        """Scan again now (a signal's job said something of a run)."""
        if self.refresh_s is None:
            self.watch_runs_dir()
        else:
            self._wake_runs.set()

    def on_runs_scanned(self, message: RunsScanned) -> None:
        first, self._scanned = not self._scanned, True
        self.summaries = message.summaries
        self.show(message.summaries, message.listing, self.now())
        if first:
            self.app.call_after_refresh(self.app.started)   # type: ignore[attr-defined]

    @property
    def table(self) -> RunsTable:
        return self.query_one(RunsTable)

    @property
    def selected(self) -> RunSummary | None:
        return self.table.selected

    def show(self, summaries: list[RunSummary], listing: RunsListing, now: float) -> None:
        self.listing = listing
        self.query_one("#overview-title", Static).update(self._title(listing))
        self.table.show(summaries, now)
        self._show_problems()

    def _show_problems(self) -> None:
        s = self.selected
        text = Text(no_wrap=True, overflow="ellipsis")
        problems = summary_problems(s) if s is not None else ()
        if s is not None and problems:
            text.append(f"{printable(s.name, 40)}: ", style="bold")
            text.append(printable(problems[0].text, LINE_LIMIT), style="red")
            if len(problems) > 1:
                text.append(f" (+{len(problems) - 1} more: Enter shows them all)", style="grey62")
        elif s is not None:
            text.append(f"{printable(s.name, 40)}: no problems", style="grey62")
        self.query_one("#overview-problems", Static).update(text)

    def on_whole_columns_table_moved(self) -> None:
        self.query_one("#overview-columns", Static).update(self.table.columns_hint("the run's name stays"))

    def on_resize(self) -> None:
        self.table.refit()

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._show_problems()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self.action_open_run()

    def notice(self, notice: Notice) -> None:
        """The last thing the console did or saw, on one line."""
        self.query_one("#overview-notice", Static).update(
            Text(notice.text, style=NOTICE_STYLES.get(notice.level, ""), no_wrap=True, overflow="ellipsis"))

    def action_open_run(self) -> None:
        s = self.selected
        if s is not None:
            self.app.open_run(s.path)

    def action_mark(self) -> None:
        s = self.table.toggle_mark()
        if s is not None:
            n = len(self.table.marked)
            self.notice(Notice(0.0, f"{'marked' if s.key in self.table.marked else 'unmarked'} "
                                    f"{s.name}; {n} marked (v compares them)", "info"))

    def action_compare(self) -> None:
        runs = self.table.marked_runs() or ([self.selected] if self.selected else [])
        if runs:
            self.app.open_compare([(s.name, s.path) for s in runs])


