"""The checkpoints table: the step_*.bin files with their age, size and status (newest
first; past :data:`ROWS` of them, the older ones are counted on one line).

Each file is one line: an invalid or foreign checkpoint's reason is cut with … at the
pane's width, and Enter on the selected row shows it whole. Drawn as aligned Text, not a DataTable: a DataTable
measures every cell of every row whenever it is rebuilt (at start-up, on each resize and
whenever an age as shown moves), which cost more than the rest of the pane's work."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual import events

from rundir import CheckpointInfo
from rundir.external import ExternalCheckpoint
from rundir.text import BLOCK_LIMIT, counted

from ...model.format import LINE_LIMIT, format_age, format_size, printable
from ...model.snapshot import PivotEntry, RetentionView
from .lines import LinesPane
from .rows import CURSOR_STYLE, SelectableRows, detail_table

STATUS_STYLES = {"complete": "green", "foreign": "yellow", "invalid": "bold red", "external": "cyan"}
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


class CheckpointsPane(SelectableRows, LinesPane, can_focus=True):
    def __init__(self, **kwargs) -> None:
        super().__init__("", **kwargs)
        self.border_title = "checkpoints"
        self._shown: tuple | None = None
        self._last: tuple | None = None
        self._rows: tuple[CheckpointInfo | ExternalCheckpoint, ...] = ()
        self._merge: tuple | None = None

    def cursor_changed(self) -> None:
        if self._last is not None:
            self.show(*self._last)

    def on_resize(self, event: events.Resize) -> None:
        if self._last is not None:
            self.show(*self._last)

    def show(self, checkpoints: tuple[CheckpointInfo, ...], pivots: tuple[PivotEntry, ...], now: float,
             retention: RetentionView | None = None, external: tuple[ExternalCheckpoint, ...] = ()) -> None:
        """Every checkpoint file, newest first; the one each pivot resumed from is marked. The
        trainer's own checkpoints (``external``, from its history) are listed among them by step."""
        if external:
            checkpoints = self._merged(checkpoints, external)        # type: ignore[assignment]
        self._last = (checkpoints, pivots, now, retention)
        if not self.size.width:         # not laid out yet: the first resize draws it
            return
        room = self.scrollable_content_region.width - STATUS_AT
        with_kept = retention is not None and room - KEPT_COLUMN[1] - GAP >= KEPT_FROM_STATUS_WIDTH
        columns = (*COLUMNS, KEPT_COLUMN) if with_kept else COLUMNS
        # Ages move with the clock: redraw when the checkpoints, the width, the selected
        # row or an age as shown changes (each second while one is under a minute), so that
        # they read as the status pane's age of the newest does.
        selected = self.cursor_shown()
        ages = tuple(format_age(now - c.mtime) if c.mtime else "-" for c in checkpoints[:-ROWS - 1:-1])
        key = (checkpoints, pivots, ages, room, retention, selected)
        if key == self._shown:
            return
        self._shown = key
        text = Text(no_wrap=True, overflow="ellipsis")
        for name, width, right in columns:
            text.append(name.rjust(width) if right else name.ljust(width), style="bold")
            text.append(" " * GAP)
        text.append("status", style="bold")
        by_step = {p.step: p for p in pivots}
        # The newest ROWS are drawn and the rest counted: a redraw (as the ages move) must
        # not cost the whole directory.
        self._rows = checkpoints[:-ROWS - 1:-1]
        for i, c in enumerate(self._rows):
            start = len(text)
            if isinstance(c, ExternalCheckpoint):
                self._external_row(text, c, now, columns, i == selected)
                continue
            rule = retention.rule(c.path.name) if retention is not None else ""
            cells = (f"{c.step:,}", format_age(now - c.mtime) if c.mtime else "-", format_size(c.size), rule)
            text.append("\n")
            for cell, (_, width, right) in zip(cells, columns):
                text.append((cell.rjust(width) if right else cell.ljust(width)) + " " * GAP)
            status = Text(c.status, style=STATUS_STYLES.get(c.status, ""))
            if c.reason:
                status.append(f": {printable(c.reason, LINE_LIMIT)}",
                              style="red" if c.status == "invalid" else "grey62")
            if c.step in by_step:           # the checkpoint a polish pivot resumed from
                status.append(f" · pivot P → {printable(by_step[c.step].archive)}/", style="magenta")
            if rule == "prune" and not with_kept:
                status.append(" · prune next", style="yellow")
            text.append_text(status)
            if i == selected:
                text.stylize(CURSOR_STYLE, start + 1, len(text))
        if len(checkpoints) > ROWS:
            older = checkpoints[:-ROWS]
            invalid = sum(c.status == "invalid" for c in older)
            text.append(f"\n… and {counted(len(older), 'older file')}"
                        + (f" ({invalid:,} invalid)" if invalid else ""), style="grey62")
        if not checkpoints:
            text.append("\nno step_*.bin files yet", style="grey62")
        self.update(text)
        self.set_hint_base(counted(len(checkpoints), 'file') if checkpoints else "none yet")

    def _merged(self, ours: tuple[CheckpointInfo, ...],
                external: tuple[ExternalCheckpoint, ...]) -> tuple[CheckpointInfo | ExternalCheckpoint, ...]:
        """Both kinds by step, sorted once per change of either (the snapshot keeps each
        tuple's identity while it is unchanged)."""
        if self._merge is None or self._merge[0] is not ours or self._merge[1] is not external:
            self._merge = (ours, external, tuple(sorted((*ours, *external), key=lambda c: c.step)))
        return self._merge[2]

    def _external_row(self, text: Text, c: ExternalCheckpoint, now: float, columns: tuple, selected: bool) -> None:
        """A checkpoint in the trainer's own format: its step, age, size and path."""
        start = len(text)
        cells = (f"{c.step:,}", format_age(now - c.time) if c.time else "-",
                 format_size(c.size) if c.size is not None else "-", "")
        text.append("\n")
        for cell, (_, width, right) in zip(cells, columns):
            text.append((cell.rjust(width) if right else cell.ljust(width)) + " " * GAP)
        text.append(c.status, style=STATUS_STYLES[c.status])
        text.append(f": {printable(c.path, LINE_LIMIT)}", style="grey62")
        if selected:
            text.stylize(CURSOR_STYLE, start + 1, len(text))

    def on_click(self, event: events.Click) -> None:
        """A click on a row selects that checkpoint, as ↑/↓ would (``i`` inspects it)."""
        offset = event.get_content_offset(self)
        if offset is None:
            return
        index = offset.y + round(self.scroll_offset.y) - 1          # the header is line 0
        if 0 <= index < len(self._rows):
            self.focus()
            self._set_cursor(index)

    def selected_info(self) -> CheckpointInfo | None:
        """The checkpoint selected in the pane (by ↑/↓ or a click) while it has focus."""
        index = self.cursor_shown()
        row = self._rows[index] if index is not None and index < len(self._rows) else None
        return row if isinstance(row, CheckpointInfo) else None       # an external one is not ours to read

    def selected_external(self) -> ExternalCheckpoint | None:
        """The trainer's own checkpoint selected in the pane, if that is what is selected."""
        index = self.cursor_shown()
        row = self._rows[index] if index is not None and index < len(self._rows) else None
        return row if isinstance(row, ExternalCheckpoint) else None

    # -- rows ------------------------------------------------------------------------
    def row_count(self) -> int:
        return len(self._rows)

    def row_line(self, index: int) -> int:
        return index + 1                    # under the header

    def row_detail(self, index: int) -> tuple[str, Table]:
        c = self._rows[index]
        _, pivots, now, retention = self._last
        if isinstance(c, ExternalCheckpoint):
            return f"checkpoint {printable(c.name)}", detail_table(external_fields(c, now))
        fields: list[tuple[str, str | Text]] = [
            ("file", printable(c.path.name)), ("step", f"{c.step:,}"),
            ("age", format_age(now - c.mtime) if c.mtime else "-"),
            ("size", f"{format_size(c.size)} ({c.size:,} bytes)"),
            ("status", Text(c.status, style=STATUS_STYLES.get(c.status, "")))]
        if c.reason:
            fields.append(("reason", Text(printable(c.reason, BLOCK_LIMIT),
                                          style="red" if c.status == "invalid" else "")))
        if c.n_params is not None:
            fields.append(("parameters", f"{c.n_params:,}"))
        if retention is not None:
            why = retention.keep.get(c.path.name)
            if why is not None:
                fields.append(("retention", ", ".join(why) or "the next prune removes it"))
        for p in pivots:
            if p.step == c.step:
                fields.append(("pivot", Text(f"P: resumed from by the pivot archived in {printable(p.archive)}/ "
                                             f"({printable(p.stage)})", style="magenta")))
        return f"checkpoint {printable(c.path.name)}", detail_table(fields)



def external_fields(c: ExternalCheckpoint, now: float) -> list[tuple[str, str | Text]]:
    """What the detail of a checkpoint in the trainer's own format says."""
    fields: list[tuple[str, str | Text]] = [
        ("path", printable(c.path, BLOCK_LIMIT)), ("step", f"{c.step:,}"),
        ("age", format_age(now - c.time) if c.time else "-"),
        ("size", f"{format_size(c.size)} ({c.size:,} bytes)" if c.size is not None else "-"),
        ("status", Text(c.status, style=STATUS_STYLES[c.status]))]
    if c.checksum:
        fields.append(("checksum", printable(c.checksum)))
    if c.reason:
        fields.append(("saved", "as requested (a signal or the request file)" if c.reason == "signal"
                       else printable(c.reason)))
    fields.append(("resume", "in the trainer's own format: its trainer resumes from it; never andrea-train's "
                             "exact resume or a rollback"))
    return fields
