"""``?``: the keys, the panes and what each status means.

It scrolls (↑/↓, PgUp/PgDn, Home/End) and closes only with Escape, ``?`` or ``q``: a stray
key neither closes it nor reaches the dashboard behind it."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Static

from ..keys import HELP, QUIT
from ..keys import OVERVIEW_KEYS as OVERVIEW_KEY_RECORDS
from .dashboard import DASHBOARD_KEYS, FULL_FROM
from .reading import ReadingScreen

# The help's rows, made from the keys' own records (console.tui.keys): (what is pressed, what it does).
KEYS = [(k.shown_as, k.help) for k in DASHBOARD_KEYS if k.help]
# On the overview of a runs directory (andrea-console runs/): its own keys (q and ? as above).
OVERVIEW_KEYS = [(k.shown_as, k.help) for k in OVERVIEW_KEY_RECORDS if k.help and k not in (QUIT, HELP)]

PANES_HELP = [
    ("status", "trainer state: running (verified pid), stopped, not supervised (a record that fails "
               "verification: never signalled), stale pid record (the pid is gone or reused). Below "
               f"{FULL_FROM.width}x{FULL_FROM.height} two lines above the plot say the state, step, loss and "
               "newest checkpoint, then the first problem (or pid, CPU, memory, speed, free disk); key 6 shows "
               "the whole pane"),
    ("loss", "every step of .loss.json (or the series m picked): each column shows the min and max of its "
             "steps, so no spike is hidden; ▴ checkpoint, R resume, P pivot, ! spike, ∇ grad-norm spike, "
             "× non-finite step, B rollback (the steps it abandoned dimmed until the resumed trainer runs them "
             "again)"),
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


class HelpScreen(ReadingScreen):
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
            if getattr(self.app, "read_only", False):
                yield Static(Text("read-only: c, s, p and r are refused here (--serve without --allow-control, "
                                  "or --read-only)\n", style="bold yellow"))
            yield Static(Text("keys", style="bold"))
            yield Static(keys)
            yield Static(Text("\noverview of a runs directory (andrea-console runs/)", style="bold"))
            yield Static(overview)
            yield Static(Text("\npanes", style="bold"))
            yield Static(panes)
