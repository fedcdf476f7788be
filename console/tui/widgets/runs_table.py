"""The overview's table: one row per run, the most recently active first, marks in the
first column. Fed only the run summaries; keeps the cursor on the same run across updates.

Every column has a fixed width (the run column's from the longest name, capped): a
DataTable measures auto-width columns only once it is idle, so a table drawn before that
would cut every name to the header's width."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import DataTable

from rundir.run_summary import RunSummary

from ...text.overview_report import COLUMNS, row_cells

MARK = "●"
NAME_CAP = 32                       # a longer run name ends in "…"
LABEL_STYLES = {"running": "bold green", "stalled": "bold red", "finished": "cyan", "stopped": "grey62",
                "stale pid record": "yellow", "not supervised": "yellow"}


class RunsTable(DataTable):
    def __init__(self, **kwargs) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)
        self.summaries: list[RunSummary] = []
        self.marked: set[str] = set()
        self.name_width = 0

    def on_mount(self) -> None:
        self._add_columns(len(COLUMNS[0][0]))

    def _add_columns(self, name_width: int) -> None:
        self.name_width = name_width
        self.add_column(" ", key="mark", width=1)
        for header, width, right in COLUMNS:
            label = Text(header, justify="right" if right else "left")
            self.add_column(label, key=header, width=width or name_width)

    def show(self, summaries: list[RunSummary], now: float) -> None:
        """The rows for ``summaries``; the cursor stays on the run it was on."""
        selected = self.selected
        self.summaries = summaries
        keys = {s.key for s in summaries}
        self.marked &= keys
        rows = [row_cells(s, now) for s in summaries]
        name_width = min(NAME_CAP, max([len(COLUMNS[0][0]), *(len(cells[0]) for cells in rows)]))
        self.clear(columns=name_width != self.name_width)
        if name_width != self.name_width:
            self._add_columns(name_width)
        for s, cells in zip(summaries, rows):
            styled = [Text(MARK if s.key in self.marked else " ", style="bold yellow")]
            for (header, _, right), cell in zip(COLUMNS, cells):
                style = LABEL_STYLES.get(cell, "") if header == "trainer" else \
                    ("bold red" if header == "problems" and cell != "0" else "")
                styled.append(Text(cell, style=style, justify="right" if right else "left", no_wrap=True,
                                   overflow="ellipsis"))
            self.add_row(*styled, key=s.key)
        if selected is not None and selected.key in keys:
            self.move_cursor(row=self.get_row_index(selected.key), animate=False)

    @property
    def selected(self) -> RunSummary | None:
        if not self.summaries or not 0 <= self.cursor_row < len(self.summaries):
            return None
        return self.summaries[self.cursor_row]

    def toggle_mark(self) -> RunSummary | None:
        """Mark or unmark the run under the cursor; returns it."""
        s = self.selected
        if s is None:
            return None
        self.marked ^= {s.key}
        self.update_cell(s.key, "mark", Text(MARK if s.key in self.marked else " ", style="bold yellow"))
        return s

    def marked_runs(self) -> list[RunSummary]:
        return [s for s in self.summaries if s.key in self.marked]
