"""Every key of the console, as data: the bindings, the key bar and the help are made from it.

Each screen binds its own keys (:func:`bindings`): the dashboard's run keys act only while
the dashboard is in front, with no gate that has to know the list. A key's ``action`` is
Textual's: ``app.checkpoint`` runs on the app (whose workers signal the trainer), a bare
name on the screen that binds it. The key bar shows the bindings of the screen in front, the
help lists :data:`DASHBOARD_KEYS` and :data:`OVERVIEW_KEYS` with their ``help``, and a
read-only console refuses the ``control`` ones (:data:`CONTROL_ACTIONS`).
"""

from __future__ import annotations

from dataclasses import dataclass

from textual.binding import Binding

# Where the key bar is narrow, the loss plot's keys share one word ("l w e x plot").
PLOT_GROUP = Binding.Group("plot")


@dataclass(frozen=True)
class Key:
    """One key: what it does, and how the key bar and the help say so."""

    key: str                    # Textual's name ("c", "question_mark"); "" for the help's other rows
    action: str                 # Textual's action ("app.checkpoint", "log_y", "pane('events')")
    label: str                  # the key bar's word
    help: str                   # the help's line
    display: str = ""           # shown as, when not the key itself ("?", "1-6", "Tab")
    shown: bool = True          # in the key bar
    group: Binding.Group | None = None
    control: bool = False       # signals or changes a run: a read-only console refuses it
    essential: bool = False     # kept in the key bar at any width
    hint: bool = False          # said after the keys in the bar, where they fit (display, label)
    priority: bool = False      # before a focused widget's own use of the key

    @property
    def name(self) -> str:
        """The action without its namespace (``checkpoint`` for ``app.checkpoint``)."""
        return self.action.removeprefix("app.")

    @property
    def shown_as(self) -> str:
        return self.display or self.key


def bindings(keys: tuple[Key, ...]) -> list[Binding]:
    """The Textual bindings of ``keys`` (those that are keys, not only help rows)."""
    return [Binding(k.key, k.action, k.label, show=k.shown, key_display=k.display or None, group=k.group,
                    priority=k.priority)
            for k in keys if k.key]


def hints(keys: tuple[Key, ...]) -> tuple[tuple[str, str], ...]:
    """What the key bar says after the keys: ``(display, label)``."""
    return tuple((k.shown_as, k.label) for k in keys if k.hint)


QUIT = Key("q", "app.quit", "quit", "quit the console; training continues", essential=True)
HELP = Key("question_mark", "app.help", "help", "this help (↑/↓ and PgUp/PgDn scroll it; Escape, ? or q closes it)",
           display="?", essential=True)

# The dashboard's keys, in the key bar's order (README's key table is in the same order).
RUN_KEYS = (
    Key("c", "app.checkpoint", "checkpoint", "checkpoint now: SIGUSR1 to the verified trainer (to one of several "
        "processes: a request in the run directory, which rank 0 takes); the event log says when the checkpoint "
        "lands",
        control=True, essential=True),
    Key("s", "app.stop", "stop", "stop cleanly: asks first (y/Enter confirms, any other key cancels), then SIGTERM; "
        "the trainer writes a final checkpoint and exits", control=True, essential=True),
    Key("p", "app.pivot", "pivot", "polish pivot: edit caps and floors, ctrl+s runs the six steps (asks before the "
        "stop), ctrl+r rolls back an interrupted one, Escape returns; refused in one line for a run without arms (a "
        "run of the run API)", control=True, essential=True),
    Key("r", "app.rollback", "rollback", "rollback past the newest loss spike: proposes the checkpoint before it and "
        "the batches to skip, says what is lost, ctrl+s runs the three steps (asks first), Escape returns",
        control=True, essential=True),
    Key("i", "app.inspect", "inspect", "inspect a checkpoint (the one selected in the checkpoints pane, else the "
        "newest complete): per tensor w_rms, w_maxabs, m_norm, sqrt_v_rms, dead v, update ratio, non-finite "
        "counts; s/r or a header click sorts, ←/→ scroll the columns, [ ] older/newer, a compares with the "
        "previous, Escape returns; a checkpoint in its trainer's own format (the run API's) is refused in one line"),
    Key("l", "log_y", "log-y", "loss plot: log / linear y", group=PLOT_GROUP),
    Key("w", "window", "window", "loss plot: all steps / the last N steps", group=PLOT_GROUP),
    Key("e", "smoothing", "smooth", "loss plot: smoothing (EMA off, 0.9, 0.98, 0.995, 0.999)", group=PLOT_GROUP),
    Key("x", "x_axis", "x-axis", "loss plot: x axis (step, tokens, wall clock); every marker stays at its step",
        group=PLOT_GROUP),
    QUIT,
    HELP,
)

# The plots' view: series, grid, zoom, pan and cursor (not in the key bar: the help lists them).
VIEW_KEYS = (
    Key("m", "series", "series", "plot: pick its series (loss, eval loss, grad-norm, lr, throughput, each arm's "
        "share and p, GPU figures, any other numeric key): the main plot's, or the focused grid cell's",
        shown=False),
    Key("z", "zoom(2.0)", "zoom", "plot: zoom in on the steps around the cursor (else the middle); a mouse drag on "
        "the plot zooms to the steps it covers", shown=False),
    Key("Z", "zoom(0.5)", "zoom out", "plot: zoom out", shown=False),
    Key("comma", "pan(-1)", "pan", "plot: pan the zoomed view left (,) or right (.)", display=", .", shown=False),
    Key("full_stop", "pan(1)", "pan right", "", shown=False),
    Key("g", "grid", "grid", "plot: in the full layout, a grid of small plots in the main plot's place (loss, eval "
        "loss, grad-norm, throughput, or run.toml's console.plots); m on a focused cell changes it", shown=False),
    Key("t", "series_table", "series table", "plot: every series in a table, one a row, in its unit: its value at "
        "the cursor, last, min, max and mean over the steps in view with their steps, and its best (the min of a "
        "loss, the max of a throughput) and where; ←/→ move the cursor there too, Shift+←/→ scroll its columns "
        "a whole column at a time (the names stay), Escape or t closes it",
        shown=False),
    Key("0", "unzoom", "all steps", "plot: the whole history again, the cursor off", shown=False),
    Key("", "", "cursor", "the plot's cursor one column left or right (the focused plot's, else the main plot's, "
        "while no pane that scrolls sideways is focused); it reads every series, the time, the tokens and the "
        "markers at its step, as many as its line holds (t shows them all; a click on a plot puts it there)",
        display="←→"),
    Key("left", "cursor(-1)", "cursor left", "", shown=False),
    Key("right", "cursor(1)", "cursor right", "", shown=False),
    # The plot keys named in the key bar, after the run's keys, where they fit (the help says each).
    Key("", "", "plot", "", display="m t z , . 0 ←→", shown=False, hint=True),
)

# A job of several processes: its ranks (not in the key bar: the help lists them).
JOB_KEYS = (
    Key("k", "app.ranks", "ranks", "every rank of a job of several processes, worst first: host, step, step time, "
        "its work per step against the median, the batch's share, CPU, RSS, heartbeat age and verdict (dead, "
        "stopped, silent, behind, straggling); from 110 columns a step-lag strip; Escape, k or q closes it",
        shown=False),
    Key("K", "app.stacks", "stacks", "every rank's Python stacks, all threads (asked through the run directory; "
        "the same stacks folded, a rank that cannot answer said with why), as --stacks prints them; Escape closes",
        shown=False),
)

# The ranks screen's own keys (k on the dashboard).
RANKS_SCREEN_KEYS = (
    Key("escape", "close", "close", "close", display="Esc", priority=True),
    Key("k", "close", "close", "", shown=False, priority=True),
    Key("K", "app.stacks", "stacks", "", shown=False),
)

# The guided operations' screens (p, r). Each screen's check_action shows ``start`` only
# while the operation can still start (not running, no outcome yet) and ``rollback`` only
# while an interrupted pivot waits: the key bar follows the screen's state.
PIVOT_KEYS = (
    Key("ctrl+s", "start", "start pivot", "", priority=True),
    Key("ctrl+r", "rollback", "roll back", "", priority=True),
    Key("escape", "close", "back", "", priority=True),
)
ROLLBACK_KEYS = (
    Key("ctrl+s", "start", "start rollback", "", priority=True),
    Key("escape", "close", "back", "", priority=True),
)

# Bound on the plots themselves: they act only while a plot is focused.
PLOT_KEYS = (
    Key("left", "cursor(-1)", "cursor left", "", shown=False),
    Key("right", "cursor(1)", "cursor right", "", shown=False),
)


def pane_keys(panes: tuple[tuple[str, str, str], ...], full_from: str) -> tuple[Key, ...]:
    """The dashboard's keys that move among its ``panes`` ((key, name, title) each)."""
    names = ", ".join(f"{key} {name}" for key, name, _ in panes)
    return (
        *(Key(key, f"pane('{name}')", name, "", shown=False) for key, name, _ in panes),
        Key("", "", "panes", f"a pane: {names}. Below {full_from} it is shown under the plot; in both layouts it "
            "takes the keys below", display=f"1-{len(panes)}", hint=True),
        # In both layouts Tab walks the panes in the tab strip's order, not Textual's focus
        # chain: in the compact layout that chain holds only the pane in view.
        Key("tab", "next_pane(1)", "next pane", "the next pane (Shift+Tab the previous one), as its number key",
            display="Tab", shown=False, hint=True),
        Key("shift+tab", "next_pane(-1)", "previous pane", "", shown=False),
        Key("", "", "rows", "in events, checkpoints, arms and problems: select a row (PgUp/PgDn, Home/End); in "
            "samples and status: scroll", display="↑↓", hint=True),
        Key("", "", "detail", "the selected row in full: a checkpoint's whole reason, everything about an arm, a "
            "whole event or problem (Escape, Enter or q closes it)", display="⏎", hint=True),
    )


# The dashboard of a run opened from the overview: Escape returns to it.
BACK_TO_OVERVIEW = Key("escape", "app.back", "overview", "back to the overview", essential=True)

# The overview of a runs directory (andrea-console runs/).
OVERVIEW_KEYS = (
    Key("enter", "open_run", "open", "open the selected run's dashboard; Escape there returns to the overview",
        display="⏎", priority=True, essential=True),               # before the table's own Enter
    Key("space", "mark", "mark", "mark or unmark the selected run", display="space"),
    Key("", "", "columns", "scroll the table's columns one at a time where they do not all fit (the run's name "
        "stays; a column is shown whole or not at all)", display="←→", hint=True),
    Key("v", "compare", "compare marked", "compare the marked runs (or the selected one): loss curves (m: any "
        "series) overlaid, min/max envelope per run, and a table of what differs in their run.toml and start "
        "events (it scrolls); the plot works as the dashboard's: x step / tokens / time since start, l log / "
        "linear y, e smoothing, z Z zoom, , . pan, 0 all, ←→ a cursor reading every run; Escape returns"),
    Key("c", "app.checkpoint", "checkpoint", "checkpoint the selected run's trainer (verified, as on the dashboard)",
        control=True, essential=True),
    Key("s", "app.stop", "stop", "stop the selected run's trainer (verified; asks first, as on the dashboard)",
        control=True, essential=True),
    QUIT,
    HELP,
)

# The comparison of runs (the overview's v).
COMPARE_KEYS = (
    Key("x", "x_axis", "x-axis", "x axis: step, tokens, or time since each run's first step"),
    Key("m", "series", "series", "the series compared (loss, grad-norm, throughput...)"),
    Key("l", "log_y", "log-y", "log / linear y"),
    Key("e", "smoothing", "smooth", "smoothing, as the dashboard's: each run's EMA line over its raw envelope "
        "(EMA off, 0.9, 0.98, 0.995, 0.999)"),
    Key("z", "zoom(2.0)", "zoom", "zoom in around the cursor (else the middle); a drag zooms to what it covers"),
    Key("Z", "zoom(0.5)", "zoom out", "zoom out", shown=False),
    Key("comma", "pan(-1)", "pan", "pan the zoomed view left (,) or right (.)", display=", .", shown=False),
    Key("full_stop", "pan(1)", "pan right", "", shown=False),
    Key("0", "unzoom", "all", "all of every run again, the cursor off", shown=False),
    Key("left", "cursor(-1)", "cursor", "the cursor one column left or right: the legend reads every run's value "
        "there (a click puts it there)", display="←→", priority=True),       # before the table's scrolling
    Key("right", "cursor(1)", "cursor right", "", shown=False, priority=True),
    Key("escape", "back", "overview", "back to the overview", essential=True),
    QUIT,
    HELP,
)

# Acted on by the app, refused by a read-only console: action name -> key.
CONTROL_ACTIONS = {k.name: k.shown_as for keys in (RUN_KEYS, OVERVIEW_KEYS) for k in keys if k.control}
ESSENTIAL_ACTIONS = frozenset(k.name for keys in (RUN_KEYS, OVERVIEW_KEYS, (BACK_TO_OVERVIEW,))
                              for k in keys if k.essential)
