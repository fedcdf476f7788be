"""The checkpoints table: every step_*.bin with its age, size and status (newest first).

An invalid or foreign checkpoint's reason wraps inside the status column (rows grow), so
the whole reason is readable at any width."""

from __future__ import annotations

from rich.text import Text
from textual import events
from textual.widgets import DataTable

from ..snapshot import RunSnapshot, format_age, format_size

STATUS_STYLES = {"complete": "green", "foreign": "yellow", "invalid": "bold red"}
# step, age and size columns, the cell padding of four columns and the vertical scrollbar.
FIXED_WIDTH = 8 + 7 + 9 + 8 + 1


class CheckpointsPane(DataTable):
    def __init__(self, **kwargs) -> None:
        super().__init__(cursor_type="row", zebra_stripes=False, **kwargs)
        self.border_title = "checkpoints"
        self._shown: tuple | None = None
        self._last: tuple[RunSnapshot, float] | None = None

    def on_resize(self, event: events.Resize) -> None:
        if self._last is not None:
            self._shown = None
            self.show(*self._last)

    def show(self, snap: RunSnapshot, now: float) -> None:
        self._last = (snap, now)
        if not self.size.width:         # not laid out yet: the first resize builds it, once
            return
        status_width = max(10, self.size.width - FIXED_WIDTH)   # never wider than the pane
        # Ages move with the clock, but a table rebuild is not free: rebuild when the
        # checkpoints, the width or the ten-second tick of the clock change.
        key = (snap.checkpoints, snap.pivots, int(now // 10), status_width)
        if key == self._shown:
            return
        self._shown = key
        self.clear(columns=True)
        self.add_column(Text("step", justify="right"), key="step", width=8)
        self.add_column("age", key="age", width=7)
        self.add_column(Text("size", justify="right"), key="size", width=9)
        self.add_column("status", key="status", width=status_width)
        pivots = {p.step: p for p in snap.pivots}
        for c in reversed(snap.checkpoints):
            status = Text(c.status, style=STATUS_STYLES.get(c.status, ""))
            if c.reason:
                status.append(f": {c.reason}", style="red" if c.status == "invalid" else "grey62")
            if c.step in pivots:            # the checkpoint a polish pivot resumed from
                status.append(f" · pivot P → {pivots[c.step].archive}/", style="magenta")
            self.add_row(Text(f"{c.step:,}", justify="right"), format_age(now - c.mtime) if c.mtime else "-",
                         Text(format_size(c.size), justify="right"), status, key=c.path.name,
                         height=None if c.reason or c.step in pivots else 1)
        self.border_subtitle = (f"{len(snap.checkpoints)} files" if snap.checkpoints else "none yet")
