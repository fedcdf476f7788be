"""The compact layout's status: two lines above the loss plot, always in view.

The first says how far the run is (trainer state, step, loss, newest checkpoint); the
second what needs the operator (an alert, else the first current problem and how many
there are, else why the trainer is not running), or, when all is well, the trainer's
pid, CPU and memory, its speed and the disk's room. The whole status pane is key 6."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from ...model.format import format_ago, format_float, format_rate, format_size, printable, stall_text
from ...model.snapshot import RunSnapshot
from .status import STATE_STYLES, alert_text

SEP = (" · ", "grey50")


class StatusLine(Static):
    DEFAULT_CSS = """
    StatusLine {
        height: 2;
        padding: 0 1;
        text-wrap: nowrap;
        text-overflow: ellipsis;
    }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__("reading…", **kwargs)
        self.watched_by = ""            # how the run is followed (the dashboard's watched_by)
        self._shown = ""

    def show(self, snap: RunSnapshot, now: float) -> None:
        t, h = snap.trainer, snap.history
        text = Text(no_wrap=True, overflow="ellipsis")
        text.append(printable(snap.name, 40), style="bold")
        text.append(*SEP)
        text.append(t.label, style=STATE_STYLES.get(t.label, "bold"))
        text.append(*SEP)
        text.append("step ", style="grey62")
        text.append(f"{h.last_step:,}" if h.last_step is not None else "-")
        text.append(*SEP)
        text.append("loss ", style="grey62")
        text.append(format_float(h.last_loss))
        saved = snap.newest_saved
        text.append(*SEP)
        text.append("ckpt ", style="grey62")
        if saved:
            when = format_ago(now - saved.time) if saved.time is not None else "-"
            text.append(f"{saved.step:,}, {when}" + (", external" if saved.external else ""))
        else:
            text.append("none usable", style="yellow")
        text.append("\n")
        alert = alert_text(snap)
        if alert:
            text.append(f"ALERT {alert}", style="bold red")
        elif snap.problems:
            problems = snap.problems
            text.append(f"! {len(problems)} problem{'s' if len(problems) != 1 else ''} (key 5): ", style="bold red")
            text.append(problems[0].text, style="red")
        elif t.state != "running":
            text.append(printable(t.reason), style="grey62" if t.state == "stopped" else "yellow")
        elif t.stalled or t.suspended:
            text.append(stall_text(t) if t.stalled else t.suspended, style="bold red")
        else:
            cpu = f"{t.cpu_percent:.0f}%" if t.cpu_percent is not None else "-"
            text.append("pid ", style="grey62")
            text.append(f"{t.pid}")
            text.append(*SEP)
            text.append("cpu ", style="grey62")
            text.append(cpu)
            text.append(" rss ", style="grey62")
            text.append(format_size(t.rss))
            text.append(*SEP)
            text.append(format_rate(h.steps_per_s, "steps"))
            if snap.storage is not None:
                text.append(*SEP)
                text.append(f"{format_size(snap.storage.free)} free", style="bold red" if snap.storage.too_full else "")
        if self.watched_by.startswith("polling"):
            text.append(*SEP)
            text.append(self.watched_by.split(" (")[0], style="grey62")     # the status pane says the rest
        if text.plain != self._shown:
            self._shown = text.plain
            self.update(text, layout=False)
