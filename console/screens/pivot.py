"""The polish pivot's screen route (``p``): the hook the pivot workflow fills (issue 5).

The app pushes the ``"pivot"`` screen route; this placeholder only says that the pivot
is not available yet. The workflow (DESIGN.md section 7) replaces this class.
"""

from __future__ import annotations

from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static


class PivotScreen(ModalScreen[bool]):
    def compose(self) -> ComposeResult:
        with Vertical(id="pivot-box"):
            yield Static(Text("pivot: not yet available", style="bold"))
            yield Static(Text("any key closes", style="grey62"))

    def on_key(self, event: events.Key) -> None:
        event.stop()
        self.dismiss(False)
