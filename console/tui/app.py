"""The operator console: a thin Textual app that routes screens and keys.

The work is elsewhere: the open run is a :class:`~console.tui.session.RunSession` (its
reader, paced reads, watcher and snapshot), :mod:`console.read.reader` reads the run directory
(in a thread worker), :mod:`console.read.watcher` watches it (in another),
:mod:`console.actions.signal_jobs` signals the verified trainer and waits for its answer (in a
third), and the panes in :mod:`console.tui.widgets` paint what they are given. Threads only
post messages; widgets change on the UI thread. Opened on a runs directory, the app starts
on the overview (:class:`~console.tui.screens.overview.OverviewScreen`, which keeps its runs
scanned) with no session: Enter opens one on the selected run and pushes its dashboard,
Escape closes it and pops back. What the app was asked for is one
:class:`~console.tui.options.ConsoleOptions`.
"""

from __future__ import annotations

import asyncio
import gc
import queue
import subprocess
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Mapping

from textual import actions, work
from textual.app import App
from textual.dom import DOMNode
from textual.worker import get_current_worker

from rundir.layout import ALL_KINDS, HISTORY, TRAINER
from rundir.rollback_files import pending_rollback
from rundir.runs import is_runs_dir
from rundir.text import counted

from ..actions.alerts import AlertTracker, run_notify
from ..actions.pivot_runner import pending_pivot
from ..actions.signal_jobs import request_checkpoint, stop_and_wait
from ..actions.supervise import reap_children
from ..model.findings import Finding, child_exit_alert
from ..model.format import LINE_LIMIT, printable
from ..model.run_facts import RunSummary
from ..model.snapshot import Notice, RunSnapshot, TrainerView
from ..read.reader import RunReader
from ..read.watcher import POLL_S, STEADY_READ_INTERVAL_S, PacedReads, watch_run
from .keys import CONTROL_ACTIONS
from .messages import ConsoleNotice, FilesChanged, SnapshotReady, WatchMode
from .options import ConsoleOptions
from .screens import ConfirmScreen, DashboardScreen, HelpScreen, PivotScreen, RollbackScreen, RunDashboardScreen
from .session import RunSession
from .widgets import CheckpointsPane

if TYPE_CHECKING:       # the overview's parts are imported when a runs directory is opened, not for a run's
    from .screens.overview import OverviewScreen

# The garbage collector is back on by then even if no first frame came (see started).
START_UP_S = 10.0
READ_ONLY_REFUSAL = "{key}: refused: this console is read-only, it never signals or changes the run"


class ConsoleApp(App[None]):
    CSS_PATH = str(Path(__file__).with_name("console.tcss"))
    TITLE = "andrea-console"
    ENABLE_COMMAND_PALETTE = False
    SCREENS = {"help": HelpScreen}

    def __init__(self, root: str | Path, options: ConsoleOptions | None = None):
        """``root``: a run directory (its dashboard) or a directory of runs (their overview
        first, each run's dashboard a key away), as :func:`rundir.runs.is_runs_dir` tells
        them apart for the command line."""
        super().__init__()
        self.root = Path(root)
        self.options = options = options or ConsoleOptions()
        self.now = options.now
        self.alerts = AlertTracker()
        self._alert_queue: queue.SimpleQueue[Finding] = queue.SimpleQueue()
        self.session: RunSession | None = None
        self.runs_root = self.root if is_runs_dir(self.root) else None
        if self.runs_root is None:
            reader = options.reader or options.reader_for(self.root)
            reader.findings.grad_after_first = True      # read once the first frame is painted (started)
            self.session = self.new_session(self.root, reader, options.child)
        self.sub_title = self._title()

    def _title(self) -> str:
        """The open run's name, else the runs directory's."""
        if self.session is not None:
            return printable(self.session.run_dir.name)
        return printable(self.root.resolve().name or self.root)

    # The open run's, for the views and the tests (None where no run is open).
    @property
    def run_dir(self) -> Path | None:
        return self.session.run_dir if self.session else None

    @property
    def reader(self) -> RunReader | None:
        return self.session.reader if self.session else None

    @property
    def reads(self) -> PacedReads | None:
        return self.session.reads if self.session else None

    @property
    def snapshot(self) -> RunSnapshot | None:
        return self.session.snapshot if self.session else None

    @property
    def read_only(self) -> bool:
        """Whether every key that signals or changes a run is refused (the key bar and help say so)."""
        return self.options.read_only

    @property
    def summaries(self) -> list[RunSummary]:
        """The overview's runs as last scanned (none on a run's own console)."""
        return self.overview.summaries if self.runs_root is not None else []

    # -- lifecycle ---------------------------------------------------------------
    def get_default_screen(self) -> OverviewScreen | DashboardScreen:
        # The first screen is the app's own: composed and sized once at start-up, with no
        # default screen to paint and then replace.
        o = self.options
        if self.runs_root is not None:
            from ..read.run_summary import RunsSummarizer
            from .screens.overview import OverviewScreen

            self.overview = OverviewScreen(self.root, RunsSummarizer(self.root, o.verify, o.stall_after), o.now,
                                           o.refresh if o.watch else None)
            return self.overview
        self.dashboard = DashboardScreen(o.window, o.plot.smoothing)
        return self.dashboard

    def new_session(self, run_dir: Path, reader: RunReader, child: subprocess.Popen | None = None) -> RunSession:
        return RunSession(run_dir, reader, self.post_message, self.now, partial(self.call_later, self.read_loop),
                          child)

    def on_mount(self) -> None:
        if self.session is not None:
            self.follow_run()
        if self.options.tick:
            self.set_interval(self.options.tick, self.tick)
        self.set_timer(START_UP_S, self.started)        # if no first frame comes by then

    def follow_run(self) -> None:
        """Read the open run now, then whatever the watcher (a thread worker until the session
        closes) sees change."""
        self.request_read(ALL_KINDS)
        if self.options.watch:
            self.watch_files(self.session)

    def on_unmount(self) -> None:
        self.stop_following()

    def stop_following(self) -> None:
        """The open run's session closes: nothing more is read (a read under way ends with its
        snapshot, which no view takes)."""
        if self.session is not None:
            self.session.close()

    def started(self) -> None:
        """Start-up is over (the first full frame is painted). ``andrea-console`` keeps the
        garbage collector off until then: it comes back on, with start-up's long-lived
        objects frozen out of every later collection."""
        if not gc.isenabled():
            gc.freeze()
            gc.enable()
        session = self.session
        if session is None:
            return
        if session.reader.findings.grad_pending:
            session.request_read({HISTORY})
        # The mirror the first frame came from, checked whole in the background; a stale one
        # makes the history read again (asked of the paced reads from the check's thread).
        session.reader.verify_history_mirror(lambda: session.request_read({HISTORY}))

    def tick(self) -> None:
        reap_children()             # a trainer this console started and someone stopped: no zombie
        session = self.session
        if session is None:
            return
        # Files whose end read as NUL bytes not written yet are read again, though no change
        # may be seen when their bytes land (rundir.late_bytes).
        session.request_read({TRAINER} | session.reader.late_kinds())
        child = session.child
        if child is not None and not session.child_reported and child.poll() is not None:
            session.child_reported = True
            code = child.returncode
            self.say(f"the trainer this console started exited with code {code}"
                     + ("" if code == 0 else " (see trainer.log)"), "good" if code == 0 else "error")
            alert = child_exit_alert(child.pid, code)
            if alert is not None and self.alerts.first_of_its_end(alert):
                self.raise_alert(alert)

    # -- reading -----------------------------------------------------------------
    @work(thread=True, group="watch", exit_on_error=False)
    def watch_files(self, session: RunSession) -> None:
        # The changes go straight to the session's paced reads, never through the UI thread.
        watch_run(session.run_dir, session.request_read, session.stop_watch, poll=self.options.poll,
                  announce=lambda fs: self.post_message(WatchMode(fs.watched_by, not fs.events)))

    @work(thread=True, group="read", exit_on_error=False)
    def read_loop(self, reads: PacedReads) -> None:
        worker = get_current_worker()
        reads.drain(lambda: worker.is_cancelled)

    def on_watch_mode(self, message: WatchMode) -> None:
        if self.session is None:
            return
        self.dashboard.watched_by = message.watched_by
        # Polled, the poll paces the changes already: a read as soon as one is seen.
        self.session.reads.steady_s = POLL_S if message.polling else STEADY_READ_INTERVAL_S

    def on_files_changed(self, message: FilesChanged) -> None:
        if self.session is not None:
            self.session.request_read(message.kinds)
        elif self.runs_root is not None:        # a signal job's news on the overview: scan again
            self.overview.rescan()

    def request_read(self, kinds: set[str] | frozenset[str]) -> None:
        """Queue kinds to re-read of the open run (a burst of changes becomes one read)."""
        if self.session is not None:
            self.session.request_read(kinds)

    def on_snapshot_ready(self, message: SnapshotReady) -> None:
        session = self.session
        if session is None or not session.takes(message.snapshot):
            return
        if session.snapshot is None:
            self.call_after_refresh(self.started)
        session.snapshot = message.snapshot
        dashboard = self.dashboard
        for notice in message.notices:
            dashboard.notice(notice)
        dashboard.snapshot = message.snapshot
        for alert in self.alerts.new_alerts(message.snapshot):
            self.raise_alert(alert)

    # -- alerts --------------------------------------------------------------------
    def raise_alert(self, alert: Finding) -> None:
        """An event, the bell (unless --no-bell) and --notify CMD (in a worker)."""
        self.say(f"ALERT: {alert.text}", alert.level)
        if self.options.bell:
            self.bell()
        if self.options.notify:
            self._alert_queue.put(alert)
            self.send_alerts()

    @work(thread=True, exclusive=True, group="notify", exit_on_error=False)
    def send_alerts(self) -> None:
        worker = get_current_worker()
        while not worker.is_cancelled:
            try:
                alert = self._alert_queue.get_nowait()
            except queue.Empty:
                return
            failure = run_notify(self.options.notify, alert.to_json(str(self.run_dir), self.now()),
                                 self.options.notify_timeout)
            if failure:
                self.notify_from_thread(failure, "warning")

    def on_console_notice(self, message: ConsoleNotice) -> None:
        self.notices().notice(message.notice)
        if self.session is None and self.runs_root is not None:
            self.overview.rescan()

    def say(self, text: str, level: str = "action") -> None:
        self.notices().notice(Notice(self.now(), text, level))

    def notices(self) -> DashboardScreen | OverviewScreen:
        """Where the console's lines go: the open run's events pane, else the overview's notice line."""
        return self.dashboard if self.session is not None else self.overview

    def refuse(self, text: str) -> None:
        """A key that cannot act here: one line, in the events pane and where it was pressed (a toast)."""
        self.say(text, "warning")
        self.notify(text, severity="warning")

    def notify_from_thread(self, text: str, level: str = "action") -> None:
        self.post_message(ConsoleNotice(Notice(self.now(), text, level)))

    # -- keys --------------------------------------------------------------------
    async def run_action(self, action: str | actions.ActionParseResult, default_namespace: DOMNode | None = None,
                         namespaces: Mapping[str, DOMNode] | None = None) -> bool:
        """Every key, click and binding of the app's actions comes here: a read-only console
        refuses those that signal or change a run, saying so in one line."""
        if self.read_only:
            namespace, name, _ = actions.parse(action) if isinstance(action, str) else action
            on_app = namespace == "app" or (not namespace and default_namespace in (None, self))
            if on_app and name in CONTROL_ACTIONS:
                self.say(READ_ONLY_REFUSAL.format(key=CONTROL_ACTIONS[name]), "warning")
                return True
        return await super().run_action(action, default_namespace, namespaces)

    def action_checkpoint(self) -> None:
        if self.session is not None:
            self.say("c: checkpoint requested")
            self.checkpoint_now()
        elif (chosen := self._selected_trainer()) is not None:
            self.say(f"c: checkpoint requested for {chosen[0].name}")
            self.checkpoint_now(chosen[0])

    @work(thread=True, exclusive=True, group="signal", exit_on_error=False)
    def checkpoint_now(self, run_dir: Path | None = None) -> None:
        """SIGUSR1 to the trainer of ``run_dir`` (the dashboard's run when None)."""
        worker = get_current_worker()
        session = self._session_of(run_dir)
        request_checkpoint(session.run_dir if session else run_dir, session.awaited if session else None,
                           self.notify_from_thread, self._changed_from_thread, lambda: worker.is_cancelled)

    def action_stop(self) -> None:
        if self.session is not None:
            self.confirm_stop(self.session.run_dir, self.snapshot.trainer if self.snapshot else None)
        elif (chosen := self._selected_trainer()) is not None:
            self.confirm_stop(*chosen)

    def _selected_trainer(self) -> tuple[Path, TrainerView] | None:
        """The overview's selected run and its trainer as last scanned."""
        s = self.overview.selected
        if s is None:
            self.say("no run selected", "warning")
            return None
        from ..text.overview_report import trainer_label

        return s.path, TrainerView(state=s.trainer_state, label=trainer_label(s), reason=s.trainer_reason, pid=s.pid)

    def confirm_stop(self, run_dir: Path, trainer: TrainerView | None) -> None:
        """Ask, then SIGTERM the verified trainer of ``run_dir`` (``trainer`` as last seen)."""
        if trainer is None or not trainer.signallable:
            why = f"the trainer is {trainer.label}: {trainer.reason}" if trainer else "the run is still being read"
            self.say(f"s: nothing verified to stop ({why})", "warning")
            return

        def decided(yes: bool | None) -> None:
            if yes:
                self.say(f"stop confirmed: sending SIGTERM to pid {trainer.pid}")
                self.stop_trainer(run_dir)
            else:
                self.say("stop cancelled: the trainer keeps training")

        self.push_screen(ConfirmScreen(f"Stop the trainer (pid {trainer.pid}) cleanly?",
                                       "It finishes its step, writes a final checkpoint and exits."), decided)

    @work(thread=True, exclusive=True, group="signal", exit_on_error=False)
    def stop_trainer(self, run_dir: Path | None = None) -> None:
        worker = get_current_worker()
        session = self._session_of(run_dir)
        if stop_and_wait(session.run_dir if session else run_dir, session.child if session else None,
                         self.notify_from_thread, self._changed_from_thread,
                         lambda: worker.is_cancelled) is not None and session is not None:
            session.child_reported = True       # its exit was waited for and said

    def _session_of(self, run_dir: Path | None) -> RunSession | None:
        """The open session when ``run_dir`` is its run (or None: the open run), else None (a
        run of the overview that is not open)."""
        if self.session is not None and run_dir in (None, self.session.run_dir):
            return self.session
        return None

    def _changed_from_thread(self, kinds: frozenset[str]) -> None:
        self.post_message(FilesChanged(kinds))

    @work(exclusive=True, group="pivot-screen")
    async def action_pivot(self) -> None:
        snap = self.snapshot
        if snap is not None and snap.config is not None and not snap.config.arms and not snap.arms.rows:
            self.refuse(f"p: no pivot: {snap.arms.none_why}: there is no mix of sources to change")
            return
        pending = await asyncio.to_thread(pending_pivot, self.run_dir)
        self.say("p: pivot screen opened" + (f" ({pending})" if pending else ""))
        outcome = await self.push_screen_wait(PivotScreen(self.run_dir, self.snapshot, pending))
        if outcome is None:
            self.say("pivot screen closed: nothing was done")
        else:
            # As --pivot prints it: a success names the pivot itself ("pivot complete: ...").
            self.say(outcome.message if outcome.ok else f"pivot: {outcome.message}", "good" if outcome.ok else "error")
            self.request_read(ALL_KINDS)

    def action_inspect(self) -> None:
        """The checkpoint a click selected in the checkpoints pane, else the newest
        complete one (else the newest foreign one), in the inspector."""
        checkpoints = self.snapshot.checkpoints if self.snapshot else ()
        pane = self.dashboard.query_one(CheckpointsPane)
        info, external = pane.selected_info(), pane.selected_external()
        if info is None and external is None:
            info = next((c for status in ("complete", "foreign") for c in reversed(checkpoints)
                         if c.status == status), None)
            external = self.snapshot.external_checkpoints[-1] if info is None and self.snapshot and \
                self.snapshot.external_checkpoints else None
        if external is not None:
            self.refuse(f"i: {printable(external.path, LINE_LIMIT)} (step {external.step:,}) is in its trainer's own "
                        "format, not this trainer's step_NNNNNN.bin, the one format the inspector reads")
            return
        if info is None:
            self.refuse("i: no checkpoint to inspect")
            return
        # Imported here: the table and progress bar are not needed for the first frame.
        from .screens.inspector import InspectorScreen

        # [ and ] move between the readable ones (from an invalid one too: it stands at its step).
        self.push_screen(InspectorScreen(info.path, [c.path for c in checkpoints if c.status != "invalid"]))

    def action_ranks(self) -> None:
        """Every rank of the job, worst first, kept fresh while open."""
        from .screens.ranks_screen import RanksScreen

        self.push_screen(RanksScreen())

    def action_stacks(self) -> None:
        self.say("K: every rank's stacks asked for")
        self.ask_stacks()

    @work(thread=True, exclusive=True, group="stacks", exit_on_error=False)
    def ask_stacks(self) -> None:
        """Every rank's stacks (rundir.stacks), shown whole when they are in."""
        from rich.text import Text

        from ..text.stacks_report import stacks_lines
        from .screens.detail import DetailScreen

        _, lines = stacks_lines(self.run_dir)
        self.call_from_thread(self.push_screen, DetailScreen("stacks", Text("\n".join(lines), no_wrap=True)))

    @work(exclusive=True, group="rollback-screen")
    async def action_rollback(self) -> None:
        pending = await asyncio.to_thread(pending_rollback, self.run_dir)
        self.say("r: rollback screen opened" + (f" ({pending})" if pending else ""))
        findings = getattr(self.reader, "findings", None)        # the dashboard's own spike settings
        spikes = (findings.window_override, findings.k_override) if findings else (None, None)
        outcome = await self.push_screen_wait(RollbackScreen(self.run_dir, pending, spikes))
        if outcome is None:
            self.say("rollback screen closed: nothing was done")
        else:
            self.say(outcome.message if outcome.ok else f"rollback: {outcome.message}",
                     "good" if outcome.ok else "error")
            self.request_read(ALL_KINDS)

    # -- the overview's routes ---------------------------------------------------------------
    def open_run(self, run_dir: Path) -> None:
        """A session on ``run_dir`` and its dashboard (Escape comes back)."""
        self.session = self.new_session(run_dir, self.options.reader_for(run_dir))
        self.dashboard = RunDashboardScreen(self.options.window, self.options.plot.smoothing)
        self.sub_title = self._title()
        self.push_screen(self.dashboard)
        self.follow_run()

    def action_back(self) -> None:
        """From a run's dashboard back to the overview: its session closes."""
        self.stop_following()
        self.session = None
        self.sub_title = self._title()
        self.pop_screen()
        self.overview.rescan()

    def open_compare(self, runs: list[tuple[str, Path]]) -> None:
        from .screens.compare import CompareScreen  # its plot only when asked for

        self.say(f"comparing {counted(len(runs), 'run')}")
        self.push_screen(CompareScreen(runs, self.options.plot.smoothing))

    def action_help(self) -> None:
        self.push_screen("help")

    async def action_quit(self) -> None:
        self.stop_following()
        self.exit()
