"""What the panes share about scrolling and rows.

- :class:`ScrollHint`: the bottom border says how many lines are scrolled out of view
  ("↓ 3 more"), so hidden rows are never a surprise;
- :class:`SelectableRows`: ↑/↓, PgUp/PgDn, Home/End move a cursor over the pane's rows
  while it has focus (instead of scrolling it, as they do the other panes), and
  Enter shows the selected row's whole text in a detail view. The panes keep every row to
  one line (a long reason is cut with …): the detail view is where it is read in full.
- :func:`cut_line_strip`: one row drawn for the Line API, cut with … at the pane's width;
  :class:`CachedStrips`: the drawn rows cached for the pane's width and style.
"""

from __future__ import annotations

from rich.console import Console, RenderableType
from rich.style import Style
from rich.table import Table
from rich.text import Text
from textual.binding import Binding
from textual.geometry import Region
from textual.strip import Strip
from textual.widget import Widget

from ..messages import DetailRequested

CURSOR_STYLE = "reverse"


def cut_line_strip(line: Text, width: int, console: Console, base: Style, highlight: str | None = None) -> Strip:
    """``line`` as a Strip of exactly ``width`` cells: cut with … when longer, styled with
    ``highlight`` (the cursor's style, when the row is selected), over the pane's ``base``
    style. ``line`` itself is never changed."""
    if highlight or line.cell_len > width:
        line = line.copy()
        line.truncate(width, overflow="ellipsis")
        if highlight:
            line.stylize(highlight)
    return Strip(list(line.render(console))).adjust_cell_length(width).apply_style(base)


class CachedStrips(Widget):
    """A mixin for a Line API pane that caches its drawn rows in ``self._strips`` (the
    pane decides the keys): the cache holds for one width and one style, and the pane's
    base style is asked once per style change (asking walks the DOM). Put it before the
    widget class it extends; the pane sets ``self._strips = {}`` in its ``__init__``."""

    _strips_width = -1
    _base_style: Style | None = None

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._base_style = None             # asked again at the next draw
        self._strips.clear()

    def visible_row(self, y: int) -> tuple[Style, int, int]:
        """For ``render_line(y)``: the base style, the width, and the index of the row
        drawn at ``y`` (scrolled); a new width empties the cache."""
        base = self._base_style
        if base is None:
            base = self._base_style = self.rich_style
        width = self.scrollable_content_region.width
        if width != self._strips_width:
            self._strips.clear()
            self._strips_width = width
        return base, width, round(self.scroll_y) + y


class ScrollHint(Widget):
    """A mixin for a Line API pane (its virtual height is its number of lines): its bottom
    border counts the lines out of view. Put it before the widget class it extends."""

    _hint_base = ""                    # the bottom border's own text, before the scroll hint
    _hint: str | None = None            # what the bottom border says now

    def set_hint_base(self, text: str) -> None:
        """The bottom border's own text ("6 files"); the scroll hint follows it."""
        self._hint_base = text
        self.update_hint()

    def update_hint(self) -> None:
        visible = self.scrollable_content_region.height
        above = round(self.scroll_y)
        below = max(0, self.virtual_size.height - above - visible) if visible else 0
        parts = [self._hint_base] if self._hint_base else []
        if above:
            parts.append(f"↑ {above} more")
        if below:
            parts.append(f"↓ {below} more")
        hint = " · ".join(parts)
        if hint != self._hint:          # a pane redrawn at every read keeps its border as it is
            self._hint = hint
            self.border_subtitle = hint

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        if round(old_value) != round(new_value):
            self.update_hint()

    def watch_virtual_size(self) -> None:
        self.update_hint()

    def on_resize(self) -> None:
        self.update_hint()


class SelectableRows(ScrollHint):
    """A mixin for a Line API pane of rows (put it before the widget class it extends)."""

    BINDINGS = [
        Binding("up", "move_cursor(-1)", "previous row", show=False),
        Binding("down", "move_cursor(1)", "next row", show=False),
        Binding("pageup", "move_cursor(-10)", "previous rows", show=False),
        Binding("pagedown", "move_cursor(10)", "next rows", show=False),
        Binding("home", "cursor_to(0)", "first row", show=False),
        Binding("end", "cursor_to(-1)", "last row", show=False),
        Binding("enter", "open_detail", "detail", show=False),
    ]

    cursor: int | None = None          # the selected row; None: none selected yet

    # -- what a pane says about its rows ---------------------------------------------
    def row_count(self) -> int:
        raise NotImplementedError

    def row_line(self, index: int) -> int:
        """The content line row ``index`` is drawn on."""
        return index

    def row_detail(self, index: int) -> tuple[str, RenderableType] | None:
        """The title and the whole text of row ``index``."""
        raise NotImplementedError

    def default_row(self) -> int:
        """The row Enter opens, and ↑/↓ start from, before one is selected."""
        return 0

    def cursor_changed(self) -> None:
        """Redraw with the cursor where it is now."""
        self.refresh()

    # -- the cursor ----------------------------------------------------------------------
    def cursor_shown(self) -> int | None:
        """The row drawn selected: the cursor, while the pane has focus."""
        return self.cursor if self.has_focus else None

    def _set_cursor(self, index: int) -> None:
        count = self.row_count()
        if not count:
            return
        self.cursor = max(0, min(count - 1, index))
        self.cursor_changed()
        # The first row brings the header above it back into view too.
        line = 0 if self.cursor == 0 else self.row_line(self.cursor)
        self.scroll_to_region(Region(0, line, 1, 1), animate=False, immediate=True, force=True)

    def action_move_cursor(self, delta: int) -> None:
        self._set_cursor(self.default_row() if self.cursor is None else self.cursor + delta)

    def action_cursor_to(self, index: int) -> None:
        self._set_cursor(index if index >= 0 else self.row_count() - 1)

    def action_open_detail(self) -> None:
        count = self.row_count()
        if not count:
            return
        if self.cursor is None or self.cursor >= count:
            self._set_cursor(self.default_row())
        detail = self.row_detail(self.cursor)
        if detail is not None:
            self.post_message(DetailRequested(*detail))

    def on_focus(self) -> None:
        self.cursor_changed()

    def on_blur(self) -> None:
        self.cursor_changed()


def detail_table(fields: list[tuple[str, str | Text]]) -> Table:
    """A detail view's body: one labelled field a row, long values wrapped in their column."""
    table = Table.grid(padding=(0, 2))
    table.add_column(style="grey62", no_wrap=True)
    table.add_column(overflow="fold")
    for label, value in fields:
        # A value from the run directory may look like markup: shown as it is, never parsed.
        table.add_row(label, Text(value) if isinstance(value, str) else value)
    return table


def hang_indent(text: Text, width: int, indent: int) -> Text:
    """``text`` wrapped at spaces to ``width`` columns (a longer word is cut), its continuation
    lines indented by ``indent``: a value wrapped under itself, not back at column 0."""
    if width < 8:                       # not laid out yet
        return text
    plain, out, start = text.plain, Text(), 0
    while True:
        if len(plain) - start <= width:
            out.append_text(text[start:])
            return out
        cut = plain.rfind(" ", start, start + width + 1)
        cut = cut if cut > start else start + width
        out.append_text(text[start:cut])
        out.append("\n" + " " * indent)
        start = cut + 1 if plain[cut] == " " else cut
