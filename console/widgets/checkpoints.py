"""The checkpoints table: the step_*.bin files with their age, size and status (newest
first; past :data:`ROWS` of them, the older ones are counted on one line).

An invalid or foreign checkpoint's reason wraps inside the status column, so the whole
reason is readable at any width. Drawn as aligned Text, not a DataTable: a DataTable
measures every cell of every row whenever it is rebuilt (at start-up, on each resize and
every ten seconds as the ages move), which cost more than the rest of the pane's work."""

from __future__ import annotations

from rich.text import Text
from textual import events
from textual.widgets import Static

from rundir import CheckpointInfo

from ..format import LINE_LIMIT, format_age, format_size, printable
from ..views import PivotEntry, RetentionView

STATUS_STYLES = {"complete": "green", "foreign": "yellow", "invalid": "bold red"}
# (header, width, right-aligned) of the columns before the status, which takes what is left.
COLUMNS = (("step", 8, True), ("age", 7, False), ("size", 9, True))
GAP = 2
STATUS_AT = sum(width + GAP for _, width, _ in COLUMNS)
# The retention rule that keeps each file (last, every, pivot...) gets a column of its own
# when the status still has this much room beside it; in a narrow pane only "prune next"
# is said, in the status.
KEPT_COLUMN = ("kept", 7, False)
KEPT_FROM_STATUS_WIDTH = 24
# Rows drawn, newest first; older files are counted on one line (andrea-console --json
# lists every one).
ROWS = 50


class CheckpointsPane(Static):
    def __init__(self, **kwargs) -> None:
        super().__init__("", **kwargs)
        self.border_title = "checkpoints"
        self._shown: tuple | None = None
        self._last: tuple | None = None
        self.selected: str | None = None          # the file name a click chose (``i`` inspects it)
        self._row_names: list[str | None] = []    # the file name drawn on each content line

    def on_resize(self, event: events.Resize) -> None:
        if self._last is not None:
            self.show(*self._last)

    def show(self, checkpoints: tuple[CheckpointInfo, ...], pivots: tuple[PivotEntry, ...], now: float,
             retention: RetentionView | None = None) -> None:
        """Every checkpoint file, newest first; the one each pivot resumed from is marked."""
        self._last = (checkpoints, pivots, now, retention)
        if not self.size.width:         # not laid out yet: the first resize draws it
            return
        room = self.scrollable_content_region.width - STATUS_AT
        with_kept = retention is not None and room - KEPT_COLUMN[1] - GAP >= KEPT_FROM_STATUS_WIDTH
        columns = (*COLUMNS, KEPT_COLUMN) if with_kept else COLUMNS
        status_at = STATUS_AT + (KEPT_COLUMN[1] + GAP if with_kept else 0)
        status_width = max(10, self.scrollable_content_region.width - status_at)
        # Ages move with the clock: redraw when the checkpoints, the width or the
        # ten-second tick of the clock change.
        key = (checkpoints, pivots, int(now // 10), status_width, retention, self.selected)
        if key == self._shown:
            return
        self._shown = key
        text = Text(no_wrap=True, overflow="ellipsis")
        for name, width, right in columns:
            text.append(name.rjust(width) if right else name.ljust(width), style="bold")
            text.append(" " * GAP)
        text.append("status", style="bold")
        by_step = {p.step: p for p in pivots}
        rows: list[str | None] = [None]
        # The newest ROWS are drawn and the rest counted: a redraw (every ten seconds, as
        # the ages move) must not cost the whole directory.
        for c in checkpoints[:-ROWS - 1:-1]:
            rule = retention.rule(c.path.name) if retention is not None else ""
            cells = (f"{c.step:,}", format_age(now - c.mtime) if c.mtime else "-", format_size(c.size), rule)
            text.append("\n")
            for k, (cell, (_, width, right)) in enumerate(zip(cells, columns)):
                chosen = k == 0 and c.path.name == self.selected
                text.append(cell.rjust(width) if right else cell.ljust(width), style="reverse" if chosen else "")
                text.append(" " * GAP)
            status = Text(c.status, style=STATUS_STYLES.get(c.status, ""))
            if c.reason:
                status.append(f": {printable(c.reason, LINE_LIMIT)}",
                              style="red" if c.status == "invalid" else "grey62")
            if c.step in by_step:           # the checkpoint a polish pivot resumed from
                status.append(f" · pivot P → {printable(by_step[c.step].archive)}/", style="magenta")
            if rule == "prune" and not with_kept:
                status.append(" · prune next", style="yellow")
            wrapped = _wrapped(status, status_width, status_at)
            text.append_text(wrapped)
            rows += [c.path.name] * (wrapped.plain.count("\n") + 1)
        if len(checkpoints) > ROWS:
            older = checkpoints[:-ROWS]
            invalid = sum(c.status == "invalid" for c in older)
            text.append(f"\n… and {len(older):,} older file{'s' if len(older) != 1 else ''}"
                        + (f" ({invalid:,} invalid)" if invalid else ""), style="grey62")
        if not checkpoints:
            text.append("\nno step_*.bin files yet", style="grey62")
        self._row_names = rows
        self.update(text)
        self.border_subtitle = (f"{len(checkpoints)} files" if checkpoints else "none yet")

    def on_click(self, event: events.Click) -> None:
        """A click on a row selects that checkpoint (reversed step); ``i`` inspects it."""
        offset = event.get_content_offset(self)
        if offset is None:
            return
        line = offset.y + round(self.scroll_offset.y)
        name = self._row_names[line] if 0 <= line < len(self._row_names) else None
        if name is not None and self._last is not None:
            self.selected = name
            self.show(*self._last)

    def selected_info(self) -> CheckpointInfo | None:
        """The checkpoint a click selected, while it is still listed."""
        if self._last is None or self.selected is None:
            return None
        return next((c for c in self._last[0] if c.path.name == self.selected), None)


def _wrapped(status: Text, width: int, indent: int) -> Text:
    """``status`` wrapped at spaces to ``width`` columns (a longer word is cut), continuation
    lines indented to its column."""
    plain, out, start = status.plain, Text(), 0
    while True:
        if len(plain) - start <= width:
            out.append_text(status[start:])
            return out
        cut = plain.rfind(" ", start, start + width + 1)
        cut = cut if cut > start else start + width
        out.append_text(status[start:cut])
        out.append("\n" + " " * indent)
        start = cut + 1 if plain[cut] == " " else cut
