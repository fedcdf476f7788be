"""``?``: the keys, the panes and what each status means."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

KEYS = [
    ("c", "checkpoint now: SIGUSR1 to the verified trainer; the event log says when the checkpoint lands"),
    ("s", "stop cleanly: asks first (y/Enter confirms, any other key cancels), then SIGTERM; the trainer "
          "writes a final checkpoint and exits"),
    ("p", "polish pivot: edit caps and floors, ctrl+s runs the six steps (asks before the stop), "
          "ctrl+r rolls back an interrupted one, Escape returns"),
    ("r", "rollback past the newest loss spike: proposes the checkpoint before it and the batches to skip, "
          "says what is lost, ctrl+s runs the three steps (asks first), Escape returns"),
    ("l", "loss plot: log / linear y"),
    ("w", "loss plot: all steps / the last N steps"),
    ("e", "loss plot: smoothing (EMA off, 0.9, 0.98, 0.995, 0.999)"),
    ("x", "loss plot: x axis (step, tokens, wall clock); every marker stays at its step"),
    ("q", "quit the console; training continues"),
    ("?", "this help; any key closes it"),
]

PANES = [
    ("status", "trainer state: running (verified pid), stopped, not supervised (a record that fails "
               "verification: never signalled), stale pid record (the pid is gone or reused)"),
    ("loss", "every step of .loss.json: each column shows the min and max of its steps, so no spike "
             "is hidden; ▴ checkpoint, R resume, P pivot, ! spike, × non-finite step, B rollback (the steps "
             "it abandoned dimmed until the resumed trainer runs them again)"),
    ("checkpoints", "complete (.bin + .json), foreign (weights, m and v only), invalid (with the reason)"),
    ("bandit arms", "zombie arms (in .state.json, but their data is gone) in red with the reason"),
    ("events", "signals and confirmations, checkpoints landing, the trainer exiting, zombies, torn "
               "or non-finite lines, spikes, resume checks, ALERT lines (with the bell unless --no-bell, "
               "and --notify CMD); then the tail of trainer.log"),
]


class HelpScreen(ModalScreen[None]):
    def compose(self) -> ComposeResult:
        keys = Table.grid(padding=(0, 2))
        keys.add_column(style="bold cyan", no_wrap=True)
        keys.add_column()
        for key, what in KEYS:
            keys.add_row(key, what)
        panes = Table.grid(padding=(0, 2))
        panes.add_column(style="bold", no_wrap=True)
        panes.add_column()
        for name, what in PANES:
            panes.add_row(name, what)
        with VerticalScroll(id="help-box"):
            yield Static(Text("andrea-console: keys", style="bold"))
            yield Static(keys)
            yield Static(Text("\npanes", style="bold"))
            yield Static(panes)
            yield Static(Text("\nany key closes this help", style="grey62"))

    def on_key(self, event: events.Key) -> None:
        if event.key in ("up", "down", "pageup", "pagedown", "home", "end"):
            return
        event.stop()
        self.dismiss(None)
