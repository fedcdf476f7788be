"""``m``: pick the series a plot draws, from those the run's history has.

Each row is a series' name and label (:mod:`console.model.series`), the current one
selected; ↑/↓ move, Enter picks, Escape (or ``m`` again, or ``q``) leaves the plot as it was."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import ModalScreen
from textual.widgets import OptionList
from textual.widgets.option_list import Option

from ...model.format import printable
from ...model.series import spec_of


class SeriesPicker(ModalScreen[str | None]):
    """Dismissed with the series picked, or None."""

    BINDINGS = [Binding(key, "close", "close", priority=True) for key in ("escape", "q", "m")]

    def __init__(self, names: list[str], current: str, title: str = "series") -> None:
        super().__init__()
        self.names = names or [current]
        self.current = current
        self.title_text = title

    def compose(self) -> ComposeResult:
        shown = [printable(name) for name in self.names]          # a name from the history
        width = max(len(n) for n in shown)
        options = OptionList(*(Option(Text.assemble((text.ljust(width), "bold"), "  ", (spec_of(name).label, "grey62")),
                                      id=str(i)) for i, (name, text) in enumerate(zip(self.names, shown))),
                             id="series-list")
        options.border_title = Text(self.title_text)
        options.border_subtitle = "↑↓ move · Enter pick · Esc close"
        yield options

    def on_mount(self) -> None:
        options = self.query_one(OptionList)
        options.highlighted = self.names.index(self.current) if self.current in self.names else 0
        options.focus()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self.dismiss(self.names[int(event.option.id)])

    def action_close(self) -> None:
        self.dismiss(None)
