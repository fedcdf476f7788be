"""The compact layout's status: two lines above the loss plot, always in view.

The first says how far the run is (trainer state, step, loss, newest checkpoint); the
second what needs the operator (an alert, else the first current problem and how many
there are, else why the trainer is not running), or, when all is well, the trainer's
pid, CPU and memory, its speed and the disk's room. The whole status pane is key 6."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from rundir.text import counted

from ...model.format import format_ago, format_float, format_rate, format_size, printable, stall_text
from ...model.snapshot import RunSnapshot
from .status import STATE_STYLES, alert_text
from .whole_parts import WholeParts


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
        shown = WholeParts([self._first(snap, now), self._second(snap)])
        if shown.plain != self._shown:
            self._shown = shown.plain
            self.update(shown, layout=False)

    @staticmethod
    def _first(snap: RunSnapshot, now: float) -> list[Text]:
        """How far the run is: its name, the trainer's state, step, loss, newest checkpoint."""
        t, h = snap.trainer, snap.history
        saved = snap.newest_saved
        if saved:
            when = format_ago(now - saved.time) if saved.time is not None else "-"
            ckpt = Text(f"{saved.step:,}, {when}" + (", external" if saved.external else ""))
        else:
            ckpt = Text("none usable", style="yellow")
        return [Text(printable(snap.name, 40), style="bold"), Text(t.label, style=STATE_STYLES.get(t.label, "bold")),
                Text.assemble(("step ", "grey62"), f"{h.last_step:,}" if h.last_step is not None else "-"),
                Text.assemble(("loss ", "grey62"), format_float(h.last_loss)),
                Text.assemble(("ckpt ", "grey62"), ckpt)]

    def _second(self, snap: RunSnapshot) -> list[Text]:
        """What needs the operator, else the trainer's figures; and how the run is followed."""
        t, h = snap.trainer, snap.history
        parts: list[Text] = []
        alert = alert_text(snap)
        if alert:
            parts.append(Text(f"ALERT {alert}", style="bold red"))
        elif snap.problems:
            problems = snap.problems
            parts.append(Text.assemble((f"! {counted(len(problems), 'problem')} (key 5): ", "bold red"),
                                       (problems[0].text, "red")))
        elif t.state != "running":
            parts.append(Text(printable(t.reason), style="grey62" if t.state == "stopped" else "yellow"))
        elif t.stalled or t.suspended:
            parts.append(Text(stall_text(t) if t.stalled else t.suspended, style="bold red"))
        else:
            cpu = f"{t.cpu_percent:.0f}%" if t.cpu_percent is not None else "-"
            parts += [Text.assemble(("pid ", "grey62"), f"{t.pid}"),
                      Text.assemble(("cpu ", "grey62"), cpu, (" rss ", "grey62"), format_size(t.rss)),
                      Text(format_rate(h.steps_per_s, "steps"))]
            if snap.storage is not None:
                parts.append(Text(f"{format_size(snap.storage.free)} free",
                                  style="bold red" if snap.storage.too_full else ""))
        if self.watched_by.startswith("polling"):
            # "polling · nfs" is one part; the status pane says the rest
            parts.append(Text(self.watched_by.split(" (")[0], style="grey62"))
        return parts
