"""The status pane: who trains, how fast, how healthy."""

from __future__ import annotations

from rich.text import Text

from rundir.text import counted

from ...model.findings import eta_text
from ...model.format import (
    LINE_LIMIT,
    format_ago,
    format_float,
    format_rate,
    format_size,
    format_uptime,
    printable,
    slurm_text,
    stall_text,
    storage_text,
)
from ...model.series_summary import gpu_text
from ...model.snapshot import RunSnapshot
from .lines import LinesPane
from .rows import hang_indent

STATE_STYLES = {"running": "bold green", "stopped": "bold", "stale pid record": "bold red",
                "not supervised": "bold yellow", "stalled": "bold red", "suspended": "bold red"}


LABEL = 11


class StatusPane(LinesPane, can_focus=True):
    """Run name, trainer state, pid, uptime, step, speed, newest checkpoint, CPU, RSS, GPU."""

    def __init__(self, **kwargs) -> None:
        super().__init__("reading…", **kwargs)
        self.border_title = "status"
        self.watched_by = ""            # how the run is followed (the dashboard's watched_by)
        self._shown = ""
        self._last: tuple[RunSnapshot, float] | None = None

    def on_resize(self) -> None:
        if self._last is not None:
            self.show(*self._last)

    def show(self, snap: RunSnapshot, now: float) -> None:
        self._last = (snap, now)
        t, h = snap.trainer, snap.history
        rows: list[tuple[str, Text | str]] = []
        add = lambda label, value: rows.append((label, value))       # noqa: E731
        add("run", Text(printable(snap.name), style="bold"))
        # The gap ends the run before it (a run that starts with spaces loses them when text
        # is copied out of a screenshot).
        state = Text(t.label + ("  " if t.pid is not None else ""), style=STATE_STYLES.get(t.label, "bold"))
        if t.pid is not None:
            state.append(f"pid {t.pid}", style="default")
        add("trainer", state)
        if t.slurm:
            add("slurm", Text(slurm_text(t.slurm)))
        if t.state != "running":
            add("", Text(printable(t.reason, LINE_LIMIT), style="grey62" if t.state == "stopped" else "yellow"))
        elif t.stalled or t.suspended:
            add("", Text(stall_text(t) if t.stalled else t.suspended, style="bold red"))
        if snap.ranks.statuses:         # a job of several processes: its ranks in one line (k: each one)
            add("ranks", Text(printable(snap.ranks.summary, LINE_LIMIT),
                              style="bold red" if snap.ranks.problems else ""))
        running = t.state == "running"
        add("uptime", format_uptime(now - t.started) if running and t.started else "-")
        step = f"{h.last_step:,}" if h.last_step is not None else "-"
        add("step", Text.assemble(step + "  ", ("loss ", "grey62"), format_float(h.last_loss)))
        add("speed", f"{format_rate(h.steps_per_s, 'steps')} · {format_rate(h.tokens_per_s, 'tok')}"
            + (f" · {eta_text(h.eta_s)}" if h.eta_s is not None else ""))
        add("tokens", f"{h.tokens:,}" if h.tokens is not None else "-")
        saved = snap.newest_saved
        if saved:
            when = format_ago(now - saved.time) if saved.time is not None else "-"
            add("checkpoint", f"step {saved.step:,} · {when}" + (" · external" if saved.external else ""))
        else:
            add("checkpoint", Text("none usable", style="yellow"))
        cpu = f"{t.cpu_percent:.0f}%" if t.cpu_percent is not None else "-"
        add("cpu · rss", f"{cpu} · {format_size(t.rss)}" if running else "-")
        add("gpu mem", format_size(t.gpu_memory) if t.gpu_memory is not None else gpu_text(h) or "n/a")
        if snap.storage is not None:
            disk = storage_text(snap.storage)
            add("disk", Text(disk, style="bold red") if snap.storage.too_full else disk)
        health = Text(counted(h.n_steps, 'step'))
        for count, label in ((h.bad_lines, "bad"), (h.nonfinite, "non-finite"), (1 if h.torn_tail else 0, "torn")):
            if count:
                health.append(f" · {count} {label}", style="bold red")
        add("history", health)
        alert = alert_text(snap)
        if alert:
            add("ALERT", Text(alert, style="bold red"))
        if snap.config is not None and snap.config.config is not None:      # a trainer of its own (run API)
            add("config", f"{counted(len(snap.config.config), 'key')} in run.toml's [config]")
        elif snap.config is not None:
            c = snap.config
            add("model", f"{printable(c.run.preset)} · {c.model.n_params():,} params · {counted(len(c.arms), 'arm')}")
        if snap.dir_state != "ok":
            add("directory", Text(printable(snap.dir_text), style="bold red"))
        elif snap.config_error:
            add("config", Text(printable(snap.config_error, LINE_LIMIT), style="yellow"))
        if snap.other_files:
            add("other files", Text(", ".join(printable(n) for n in snap.other_files[:4]), style="grey62"))
        if self.watched_by:
            add("watch", self.watched_by)
        # Plain Text, not a Rich Table: this pane repaints at every read, and a Table
        # measures and renders every cell each time.
        # A long value wraps under itself, not back under the labels.
        width = self.scrollable_content_region.width - LABEL
        text = Text(no_wrap=False)
        for i, (label, value) in enumerate(rows):
            if i:
                text.append("\n")
            text.append(f"{label:<{LABEL - 1}} ", style="grey62")      # a space after the longest label too
            text.append_text(hang_indent(value if isinstance(value, Text) else Text(value), width, LABEL))
        if text.plain != self._shown:
            self._shown = text.plain
            # Fixed size in both layouts: no relayout of the screen for a new figure.
            self.update(text, layout=False)


def alert_text(snap: RunSnapshot) -> str:
    """What needs the operator now: the run diverged, or a checkpoint failed. (Non-finite
    losses are counted in red on the history row and each one is an error in the event log.)"""
    stop = snap.safety_stop
    if stop is not None:
        return f"run diverged: stopped at step {stop.step:,}"
    failed = snap.failed_checkpoint
    if failed is not None:
        return f"checkpoint failed at step {failed.step:,}: {printable(failed.data.get('error', 'write error'))}"
    return ""
