"""Enter on a row: the whole text of a checkpoint, an arm, an event or a problem.

The panes cut a long reason to one line; here it is read in full, wrapped, scrollable.
Escape, Enter or q closes it; the arrow and page keys scroll."""

from __future__ import annotations

from rich.console import RenderableType
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Static

from .reading import ReadingScreen


class DetailScreen(ReadingScreen):
    BINDINGS = [
        Binding("escape", "close", "close", priority=True),
        Binding("enter", "close", "close", priority=True),
        Binding("q", "close", "close", priority=True),
    ]

    def __init__(self, title: str, body: RenderableType) -> None:
        super().__init__()
        self.title_text = title
        self.body = body

    def compose(self) -> ComposeResult:
        box = VerticalScroll(id="detail-box")
        box.border_title = Text(self.title_text)      # a name from the run directory: no markup
        box.border_subtitle = "Esc / Enter / q close"
        with box:
            yield Static(self.body, id="detail-body")
