"""``k``: every rank of a job of several processes, worst first (the ranks pane), kept fresh
while it is open. Escape, ``k`` or ``q`` closes it; the arrow and page keys scroll."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding

from ..keys import RANKS_SCREEN_KEYS, bindings
from ..widgets.ranks_pane import RanksPane
from .reading import ReadingScreen

REFRESH_S = 1.0


class RanksScreen(ReadingScreen):
    DEFAULT_CSS = """
    RanksScreen { align: center middle; }
    RanksScreen > RanksPane { width: 100%; height: 100%; border: thick $accent; border-subtitle-color: $text-muted; }
    """
    BINDINGS = [*bindings(RANKS_SCREEN_KEYS), Binding("q", "close", "close", priority=True)]

    def compose(self) -> ComposeResult:
        pane = RanksPane(id="ranks-pane")
        pane.border_subtitle = "K stacks · Esc / k / q close"
        yield pane

    def on_mount(self) -> None:
        self.show_ranks()
        self.set_interval(REFRESH_S, self.show_ranks)

    def show_ranks(self) -> None:
        snap = getattr(self.app, "snapshot", None)
        if snap is not None:
            self.query_one(RanksPane).show(snap.ranks, self.app.now())  # type: ignore[attr-defined]
