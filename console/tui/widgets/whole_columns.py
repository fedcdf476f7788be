"""A table that shows whole columns only: never a value cut at its edge.

A DataTable wider than its place scrolls by cells, so its edge cuts a number mid-digits
("13,600" shown as "13"), and a refresh that rebuilds its rows scrolls it back to the
start. :class:`WholeColumnsTable` holds every column and row itself and shows its first
``fixed`` columns (the names) always, then as many of the others as fit whole from
``first`` on; → and ← move ``first`` by one column, and it is kept across new data and
resizes. ``hidden_left`` and ``hidden_right`` name the columns out of view, for a hint.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual import events
from textual.message import Message
from textual.widget import Widget
from textual.widgets import DataTable

from .whole_parts import WholeParts


@dataclass(frozen=True)
class Column:
    key: str
    label: Text | str
    right: bool = False         # right-aligned (a number)
    width: int = 0              # at least this wide; else as wide as its widest cell or label
    cap: int = 0                # at most this wide (a name, which then ends in "…"); 0: no cap


Row = tuple[str, list[Text]]    # its key, and a cell per column


class WholeColumnsTable(DataTable):
    class Moved(Message):
        """The columns in view changed (new data, a resize, → or ←): a hint can say which are out of it."""

    # Nothing to scroll sideways: the columns in view fit (but for the last one's blank padding).
    DEFAULT_CSS = """
    WholeColumnsTable {
        overflow-x: hidden;
    }
    """

    def __init__(self, fixed: int = 1, follow_row: bool = True, **kwargs) -> None:
        super().__init__(**kwargs)
        self.fixed = fixed
        self.follow_row = follow_row        # the cursor stays on its row's key (else on its place: a new sort's top)
        self.first = 0                      # the first scrolled column in view (0: the one after the fixed)
        self.specs: list[Column] = []
        self.data_rows: list[Row] = []
        self.hidden_left: list[str] = []
        self.hidden_right: list[str] = []
        self._width = 0
        self._widths: list[int] = []

    def set_data(self, columns: list[Column], rows: list[Row]) -> None:
        """Every column and row; those that fit are shown, from the column in view before."""
        self.specs, self.data_rows = list(columns), list(rows)
        self._widths = self._measure()
        self.rebuild()

    def column_widths(self) -> list[int]:
        """Each column's width (measured once per :meth:`set_data`)."""
        return self._widths

    def _measure(self) -> list[int]:
        widths = []
        for i, column in enumerate(self.specs):
            label = column.label if isinstance(column.label, Text) else Text(column.label)
            width = max([column.width, label.cell_len, *(cells[i].cell_len for _, cells in self.data_rows)])
            widths.append(min(width, column.cap) if column.cap else width)
        return widths

    def room(self) -> int:
        """The cells a row has: its container's width less the table's borders, padding and
        vertical scrollbar (the container's, not its own: a table as wide as its columns
        could never grow)."""
        width = self.parent.size.width if isinstance(self.parent, Widget) else self.size.width
        return max(width - self.styles.gutter.width - self.styles.scrollbar_size_vertical, 0)

    def shown_columns(self) -> list[int]:
        """The fixed columns, then from ``first`` on as many whole columns as fit (at least one)."""
        widths, pad = self.column_widths(), 2 * self.cell_padding
        fixed = min(self.fixed, len(widths))
        self.first = max(0, min(self.first, len(widths) - fixed - 1))
        shown = list(range(fixed))
        used = sum(widths[i] + pad for i in shown)
        for i in range(fixed + self.first, len(widths)):
            # the last column's right padding, blank, may fall outside
            if used + widths[i] + pad - self.cell_padding > self.room() and len(shown) > fixed:
                break
            shown.append(i)
            used += widths[i] + pad
        return shown

    def rebuild(self) -> None:
        widths, shown = self.column_widths(), self.shown_columns()
        # the row under the cursor, as drawn (data_rows may be new already): the cursor stays on it
        key = self.ordered_rows[self.cursor_row].key.value \
            if self.follow_row and 0 <= self.cursor_row < self.row_count else None
        row = self.cursor_row
        self.clear(columns=True)
        for i in shown:
            column = self.specs[i]
            label = column.label if isinstance(column.label, Text) else Text(column.label)
            label.justify = "right" if column.right else "left"
            self.add_column(label, key=column.key, width=widths[i])
        for row_key, cells in self.data_rows:
            self.add_row(*(cells[i] for i in shown), key=row_key)
        keys = [k for k, _ in self.data_rows]
        if self.row_count:
            self.move_cursor(row=keys.index(key) if key in keys else min(row, self.row_count - 1), animate=False)
        scrolled = [c.key for c in self.specs[self.fixed:]]
        self.hidden_left = scrolled[:self.first]
        self.hidden_right = [self.specs[i].key for i in range((shown[-1] if shown else 0) + 1, len(self.specs))]
        self._width = self.room()
        self.post_message(self.Moved())

    def columns_hint(self, stays: str = "the names stay") -> WholeParts:
        """Where columns are out of view: which, and that ← → reach them (nothing where all
        are in view). Each part is shown whole or not at all."""
        parts = [Text.assemble((arrow, "bold"), (f" {', '.join(keys)}", "grey62"))
                 for arrow, keys in (("←", self.hidden_left), ("→", self.hidden_right)) if keys]
        if parts:
            parts.append(Text.assemble(("← →", "bold"), (f" scroll the columns ({stays})", "grey62")))
        return WholeParts([parts])

    def scroll_columns(self, direction: int) -> bool:
        """One column further right (1) or left (-1); False (and nothing moves) at either end."""
        if direction > 0 and not self.hidden_right or direction < 0 and not self.hidden_left:
            return False
        self.first += 1 if direction > 0 else -1
        self.rebuild()
        return True

    def action_cursor_right(self) -> None:
        self.scroll_columns(1)

    def action_cursor_left(self) -> None:
        self.scroll_columns(-1)

    def refit(self) -> None:
        """Shown again where the room changed (its container was resized)."""
        if self.specs and self.room() != self._width:
            self.rebuild()

    def on_resize(self, event: events.Resize) -> None:
        self.refit()
