"""A modal screen that is read and closed (help, a row's whole text, the ranks): the arrow and
page keys scroll it, its bindings close it, and no other key reaches the dashboard behind."""

from __future__ import annotations

from textual import events
from textual.screen import ModalScreen

SCROLL_KEYS = frozenset({"up", "down", "pageup", "pagedown", "home", "end"})


class ReadingScreen(ModalScreen[None]):
    def on_key(self, event: events.Key) -> None:
        if event.key not in SCROLL_KEYS:        # no key reaches the dashboard behind
            event.stop()
            event.prevent_default()

    def action_close(self) -> None:
        self.dismiss(None)
