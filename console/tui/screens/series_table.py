"""``t``: the table of every series, one a row, in its unit (:mod:`console.model.series_summary`):
its value at the cursor, its last value, its min, max and mean over the steps in view (the
zoom, else the whole history) with the steps of the min and max, and its best value with its
step. It never cuts a value, whatever the width: a column is shown whole or not at all.

←/→ move the main plot's cursor and the table follows (it follows new steps too); where the
columns do not all fit, Shift+←/→ scroll them a column at a time, the series' name staying, and
the scroll is kept as new steps come. Escape, ``t`` or ``q`` closes it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import ModalScreen

from ...model.series_summary import row_cells, series_rows
from ...plot.view import zoom_text
from ..widgets.whole_columns import Column, WholeColumnsTable

if TYPE_CHECKING:
    from .dashboard import DashboardScreen

REFRESH_S = 1.0             # new steps reach the table this often


HEADERS = ("series", "at cursor", "last", "min", "min at", "max", "max at", "mean", "best", "best at")
COLUMNS = [Column(HEADERS[0], HEADERS[0])] + [Column(header, header, right=True) for header in HEADERS[1:]]
HINT = "←→ cursor · shift+←→ columns · ↑↓ rows · Esc close"


class SeriesTable(ModalScreen[None]):
    BINDINGS = [Binding(key, "close", "close", priority=True) for key in ("escape", "q", "t")] + [
        Binding("left", "cursor(-1)", "cursor left", priority=True),
        Binding("right", "cursor(1)", "cursor right", priority=True),
        # The table's own sideways scroll, where its columns do not all fit (80 columns).
        Binding("shift+left", "columns(-1)", "columns left", priority=True),
        Binding("shift+right", "columns(1)", "columns right", priority=True)]

    def __init__(self, dashboard: "DashboardScreen") -> None:
        super().__init__()
        self.dashboard = dashboard
        self._shown: tuple | None = None

    def compose(self) -> ComposeResult:
        table = WholeColumnsTable(fixed=1, id="series-table", cursor_type="row", zebra_stripes=True)
        table.border_subtitle = HINT
        yield table

    def on_mount(self) -> None:
        self.fill()
        self.set_interval(REFRESH_S, self.fill)
        self.query_one(WholeColumnsTable).focus()

    def fill(self) -> None:
        snap, plot = self.dashboard.snapshot, self.dashboard.active_plot
        if snap is None:
            return
        key = (snap.versions.get("history"), plot.zoom, plot.cursor)
        if key == self._shown:
            return
        self._shown = key
        h = snap.history
        table = self.query_one(WholeColumnsTable)
        where = zoom_text(plot.zoom) or "all steps"
        at = f"cursor at step {plot.cursor:,}" if plot.cursor is not None else "no cursor (←→ places it)"
        table.border_title = Text(f"every series · {where} · {at}")
        rows = []
        for series in series_rows(h, plot.zoom, plot.cursor):
            name, *figures = row_cells(series)      # Text, no markup: a name from a history
            rows.append((name, [Text(name), *(Text(figure, justify="right") for figure in figures)]))
        table.set_data(COLUMNS, rows)               # the cursor's row and the columns in view are kept

    def action_cursor(self, cells: int) -> None:
        self.dashboard.active_plot.move_cursor(cells)
        self.call_after_refresh(self.fill)

    def action_columns(self, direction: int) -> None:
        self.query_one(WholeColumnsTable).scroll_columns(direction)

    def on_resize(self) -> None:
        self.query_one(WholeColumnsTable).refit()

    def action_close(self) -> None:
        self.dismiss(None)
