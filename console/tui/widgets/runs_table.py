"""The overview's table: one row per run, the most recently active first, marks in the
first column. Fed only the run summaries; keeps the cursor on the same run across updates.

The mark and the run's name stay in view; the other columns are shown whole or not at all
(:class:`~console.tui.widgets.whole_columns.WholeColumnsTable`): where they do not all fit
(80 columns), → and ← scroll them a column at a time. Every column's width is worked out
from its cells (the run's name capped), not measured by the DataTable once it is idle: a
table drawn before that would cut every name to the header's width."""

from __future__ import annotations

from rich.text import Text

from ...model.run_facts import RunSummary
from ...text.overview_report import COLUMNS, row_cells
from .whole_columns import Column, WholeColumnsTable

MARK = "●"
NAME_CAP = 32                       # a longer run name ends in "…"
LABEL_STYLES = {"running": "bold green", "stalled": "bold red", "finished": "cyan", "stopped": "grey62",
                "stale pid record": "yellow", "not supervised": "yellow"}
TABLE_COLUMNS = [Column("mark", " ", width=1)] + [Column(header, header, right=right, width=width,
                                                         cap=0 if width else NAME_CAP)
                                                  for header, width, right in COLUMNS]


class RunsTable(WholeColumnsTable):
    def __init__(self, **kwargs) -> None:
        super().__init__(fixed=2, cursor_type="row", zebra_stripes=True, **kwargs)
        self.summaries: list[RunSummary] = []
        self.marked: set[str] = set()

    def on_mount(self) -> None:
        self.set_data(TABLE_COLUMNS, [])

    def _mark(self, s: RunSummary) -> Text:
        return Text(MARK if s.key in self.marked else " ", style="bold yellow")

    def show(self, summaries: list[RunSummary], now: float) -> None:
        """The rows for ``summaries``; the cursor stays on the run it was on, the columns where they were."""
        selected = self.selected
        self.summaries = summaries
        keys = {s.key for s in summaries}
        self.marked &= keys
        rows = []
        for s in summaries:
            styled = [self._mark(s)]
            for (header, _, right), cell in zip(COLUMNS, row_cells(s, now)):
                style = LABEL_STYLES.get(cell, "") if header == "trainer" else \
                    ("bold red" if header == "problems" and cell != "0" else "")
                styled.append(Text(cell, style=style, justify="right" if right else "left", no_wrap=True,
                                   overflow="ellipsis"))
            rows.append((s.key, styled))
        self.set_data(TABLE_COLUMNS, rows)
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
        self.data_rows[self.cursor_row][1][0] = self._mark(s)
        self.update_cell(s.key, "mark", self._mark(s))
        return s

    def marked_runs(self) -> list[RunSummary]:
        return [s for s in self.summaries if s.key in self.marked]
