"""The status pane: who trains, how fast, how healthy."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.widgets import Static

from ..snapshot import RunSnapshot, format_age, format_float, format_rate, format_size

STATE_STYLES = {"running": "bold green", "stopped": "bold", "stale pid record": "bold red",
                "not supervised": "bold yellow"}


class StatusPane(Static):
    """Run name, trainer state, pid, uptime, step, speed, newest checkpoint, CPU, RSS, GPU."""

    def __init__(self, **kwargs) -> None:
        super().__init__("reading…", **kwargs)
        self.border_title = "status"

    def show(self, snap: RunSnapshot, now: float) -> None:
        t, h = snap.trainer, snap.history
        grid = Table.grid(padding=(0, 1))
        grid.add_column(style="grey62", no_wrap=True)
        grid.add_column(overflow="fold")
        grid.add_row("run", Text(snap.name, style="bold"))
        state = Text(t.label, style=STATE_STYLES.get(t.label, "bold"))
        if t.pid is not None:
            state.append(f"  pid {t.pid}", style="default")
        grid.add_row("trainer", state)
        if t.state != "running":
            grid.add_row("", Text(t.reason, style="grey62" if t.state == "stopped" else "yellow"))
        running = t.state == "running"
        grid.add_row("uptime", format_age(now - t.started) if running and t.started else "-")
        step = f"{h.last_step:,}" if h.last_step is not None else "-"
        grid.add_row("step", Text.assemble(step, ("  loss ", "grey62"), format_float(h.last_loss)))
        grid.add_row("speed", f"{format_rate(h.steps_per_s, 'steps')} · {format_rate(h.tokens_per_s, 'tok')}")
        grid.add_row("tokens", f"{h.tokens:,}" if h.tokens is not None else "-")
        newest = snap.newest_checkpoint
        grid.add_row("checkpoint", f"step {newest.step:,} · {format_age(now - newest.mtime)} ago" if newest
                     else Text("none usable", style="yellow"))
        cpu = f"{t.cpu_percent:.0f}%" if t.cpu_percent is not None else "-"
        grid.add_row("cpu · rss", f"{cpu} · {format_size(t.rss)}" if running else "-")
        grid.add_row("gpu mem", format_size(t.gpu_memory) if t.gpu_memory is not None else "n/a")
        health = Text(f"{h.n_steps:,} steps")
        for count, label in ((h.bad_lines, "bad"), (h.nonfinite, "non-finite"), (1 if h.torn_tail else 0, "torn")):
            if count:
                health.append(f" · {count} {label}", style="bold red")
        grid.add_row("history", health)
        if snap.config is not None:
            c = snap.config
            grid.add_row("model", f"{c.run.preset} · {c.model.n_params():,} params · {len(c.arms)} arms")
        if snap.dir_state != "ok":
            grid.add_row("directory", Text(snap.dir_state, style="bold red"))
        elif snap.config_error:
            grid.add_row("config", Text(snap.config_error, style="yellow"))
        if snap.other_files:
            grid.add_row("other files", Text(", ".join(snap.other_files[:4]), style="grey62"))
        self.update(grid)
