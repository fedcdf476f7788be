"""A pane of text lines that scrolls: the base of the checkpoints, arms, problems, samples
and status panes.

A Static cannot scroll its own content (its scrollable size is its box), so rows below
the pane's edge were out of reach. Here the content is one Text, split into lines (or,
with ``wrap``, wrapped to the pane's width); each line is drawn with Textual's Line API,
cut with … at the pane's width, and the pane scrolls over them.
"""

from __future__ import annotations

from rich.text import Text
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

from .rows import CachedStrips, ScrollHint, cut_line_strip


class LinesPane(ScrollHint, CachedStrips, ScrollView):
    DEFAULT_CSS = """
    LinesPane { overflow-x: hidden; overflow-y: auto; }
    """

    wrap = False           # True: long lines wrap at the pane's width; False: they are cut with …

    def __init__(self, text: str = "", **kwargs) -> None:
        super().__init__(**kwargs)
        self._text = Text(text)
        self._text_lines: list[Text] = []
        self._text_lines_width = -1
        self._strips: dict[int, Strip] = {}
        if self._text.plain:
            self._split()

    @property
    def content(self) -> Text:
        """The whole content, drawn or not."""
        return self._text

    def update(self, text: Text, layout: bool = True) -> None:
        """Show ``text`` (one line per row unless ``wrap``). ``layout`` is Static's: the
        pane's size never depends on its content, so there is nothing to lay out."""
        self._text = text
        self._split()
        self.refresh()

    def _split(self) -> None:
        width = self.scrollable_content_region.width if self.is_mounted else 0
        if self.wrap and width > 0:
            self._text_lines = list(self._text.wrap(self.app.console, width, overflow="fold"))
        else:
            self._text_lines = self._text.split("\n", allow_blank=True) if self._text.plain else []
        self._text_lines_width = width
        self._strips.clear()
        self.virtual_size = Size(0, len(self._text_lines))
        self.update_hint()

    def on_resize(self) -> None:
        if self.wrap and self.scrollable_content_region.width != self._text_lines_width:
            self._split()

    def render_line(self, y: int) -> Strip:
        base, width, index = self.visible_row(y)
        if width <= 0 or index >= len(self._text_lines):
            return Strip.blank(max(width, 0), base)
        strip = self._strips.get(index)
        if strip is None:
            strip = self._strips[index] = cut_line_strip(self._text_lines[index], width, self.app.console, base)
        return strip
