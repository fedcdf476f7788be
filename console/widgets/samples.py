"""The newest sample of each arm, from .samples.json."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from ..snapshot import RunSnapshot, printable


class SamplesPane(Static):
    def __init__(self, **kwargs) -> None:
        super().__init__("", **kwargs)
        self.border_title = "samples · newest per arm"
        self._shown: tuple | None = None

    def show(self, snap: RunSnapshot) -> None:
        key = (snap.samples, snap.samples_error)
        if key == self._shown:
            return
        self._shown = key
        text = Text(no_wrap=False)
        for s in snap.samples:
            text.append(f"{s.arm}", style="bold cyan")
            text.append(f" @ {s.step:,}\n", style="grey62")
            text.append(printable(s.prompt), style="bold")
            text.append(printable(s.completion.rstrip()) + "\n")
        if snap.samples_error:
            text.append(snap.samples_error + "\n", style="bold red")
        if not snap.samples and not snap.samples_error:
            text.append("no samples yet", style="grey62")
        self.update(text.rstrip() or text)
