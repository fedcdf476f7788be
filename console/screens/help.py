"""``?``: the keys, the panes and what each status means.

It scrolls (↑/↓, PgUp/PgDn, Home/End) and closes only with Escape, ``?`` or ``q``: a stray
key neither closes it nor reaches the dashboard behind it."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from .dashboard import FULL_FROM, PANES

KEYS = [
    ("c", "checkpoint now: SIGUSR1 to the verified trainer (to one of several processes: a request in the run "
          "directory, which rank 0 takes); the event log says when the checkpoint lands"),
    ("s", "stop cleanly: asks first (y/Enter confirms, any other key cancels), then SIGTERM; the trainer "
          "writes a final checkpoint and exits"),
    ("p", "polish pivot: edit caps and floors, ctrl+s runs the six steps (asks before the stop), "
          "ctrl+r rolls back an interrupted one, Escape returns"),
    ("i", "inspect a checkpoint (the one selected in the checkpoints pane, else the newest complete): "
          "per tensor w_rms, w_maxabs, m_norm, sqrt_v_rms, dead v, update ratio, non-finite counts; "
          "s/r or a header click sorts, [ ] older/newer, a compares with the previous, Escape returns"),
    ("r", "rollback past the newest loss spike: proposes the checkpoint before it and the batches to skip, "
          "says what is lost, ctrl+s runs the three steps (asks first), Escape returns"),
    ("l", "loss plot: log / linear y"),
    ("w", "loss plot: all steps / the last N steps"),
    ("e", "loss plot: smoothing (EMA off, 0.9, 0.98, 0.995, 0.999)"),
    ("x", "loss plot: x axis (step, tokens, wall clock); every marker stays at its step"),
    ("1-6", "a pane: " + ", ".join(f"{key} {name}" for key, name, _ in PANES) + ". Below "
            f"{FULL_FROM.width}x{FULL_FROM.height} it is shown under the plot; in both layouts it takes "
            "the keys below (Tab moves to the next pane too)"),
    ("↑ ↓", "in events, checkpoints, arms and problems: select a row (PgUp/PgDn, Home/End); in samples "
            "and status: scroll"),
    ("Enter", "the selected row in full: a checkpoint's whole reason, everything about an arm, a whole "
              "event or problem (Escape, Enter or q closes it)"),
    ("q", "quit the console; training continues"),
    ("?", "this help (↑/↓ and PgUp/PgDn scroll it; Escape, ? or q closes it)"),
]

# On the overview of a runs directory (andrea-console runs/).
OVERVIEW_KEYS = [
    ("Enter", "open the selected run's dashboard; Escape there returns to the overview"),
    ("c / s", "checkpoint / stop the selected run's trainer (verified; s asks first, as on the dashboard)"),
    ("space", "mark or unmark the selected run"),
    ("v", "compare the marked runs (or the selected one): loss curves overlaid, min/max envelope per run; "
          "x step / tokens, l log / linear y, Escape returns"),
]

PANES_HELP = [
    ("status", "trainer state: running (verified pid), stopped, not supervised (a record that fails "
               "verification: never signalled), stale pid record (the pid is gone or reused). Below "
               f"{FULL_FROM.width}x{FULL_FROM.height} two lines above the plot say the state, step, loss and "
               "newest checkpoint, then the first problem (or pid, CPU, memory, speed, free disk); key 6 shows "
               "the whole pane"),
    ("loss", "every step of .loss.json: each column shows the min and max of its steps, so no spike "
             "is hidden; ▴ checkpoint, R resume, P pivot, ! spike, × non-finite step, B rollback (the steps "
             "it abandoned dimmed until the resumed trainer runs them again)"),
    ("checkpoints", "complete (.bin + .json), foreign (weights, m and v only), invalid (with the reason, "
                    "cut to one line: Enter shows it whole); the selected one is what i inspects"),
    ("bandit arms", "zombie arms (in .state.json, but their data is gone) in red with the reason; in a "
                    "narrow pane prob and ema make way for the status and the source"),
    ("events", "signals and confirmations, checkpoints landing, the trainer exiting, zombies, torn "
               "or non-finite lines, spikes, resume checks, ALERT lines (with the bell unless --no-bell, "
               "and --notify CMD); then the tail of trainer.log. One line each, cut with …"),
    ("problems", "what is wrong with the run now: pinned above the events (the first three), or all of "
                 "them on key 5"),
    ("samples", "the newest sample of each arm"),
]

CLOSE_KEYS = ("escape", "question_mark", "q")
SCROLL_KEYS = frozenset({"up", "down", "pageup", "pagedown", "home", "end"})


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding(key, "close", "close", priority=True) for key in CLOSE_KEYS]

    def compose(self) -> ComposeResult:
        keys = Table.grid(padding=(0, 2))
        keys.add_column(style="bold cyan", no_wrap=True)
        keys.add_column()
        for key, what in KEYS:
            keys.add_row(key, what)
        panes = Table.grid(padding=(0, 2))
        panes.add_column(style="bold", no_wrap=True)
        panes.add_column()
        for name, what in PANES_HELP:
            panes.add_row(name, what)
        overview = Table.grid(padding=(0, 2))
        overview.add_column(style="bold cyan", no_wrap=True)
        overview.add_column()
        for key, what in OVERVIEW_KEYS:
            overview.add_row(key, what)
        box = VerticalScroll(id="help-box")
        box.border_title = "andrea-console help"
        box.border_subtitle = "↑↓ PgUp PgDn scroll · Esc ? q close"
        with box:
            yield Static(Text("keys", style="bold"))
            yield Static(keys)
            yield Static(Text("\noverview of a runs directory (andrea-console runs/)", style="bold"))
            yield Static(overview)
            yield Static(Text("\npanes", style="bold"))
            yield Static(panes)

    def on_key(self, event: events.Key) -> None:
        if event.key not in SCROLL_KEYS:        # no other key closes it or reaches the dashboard
            event.stop()
            event.prevent_default()

    def action_close(self) -> None:
        self.dismiss(None)
