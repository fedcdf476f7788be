"""A yes/no question: ``y`` or Enter confirms, any other key cancels."""

from __future__ import annotations

from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static

CONFIRM_KEYS = ("y", "Y", "enter")


class ConfirmScreen(ModalScreen[bool]):
    """``at_top``: the box stands at the top of the screen, over what it may hide (the
    guided screens' form, done with once it starts), not over their steps below."""

    def __init__(self, question: str, detail: str = "", at_top: bool = False) -> None:
        super().__init__(classes="-at-top" if at_top else None)
        self.question = question
        self.detail = detail

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm-box"):
            yield Static(Text(self.question, style="bold"), id="confirm-question")
            if self.detail:
                yield Static(Text(self.detail, style="grey70"), id="confirm-detail")
            yield Static(Text.assemble(("y", "bold reverse"), " / ", ("Enter", "bold reverse"), " confirm    ",
                                       ("any other key", "bold"), " cancels"), id="confirm-keys")

    def on_key(self, event: events.Key) -> None:
        event.stop()
        event.prevent_default()
        self.dismiss(event.key in CONFIRM_KEYS)

    def on_click(self, event: events.Click) -> None:
        event.stop()
        self.dismiss(False)
