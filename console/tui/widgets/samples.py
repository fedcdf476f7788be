"""The newest sample of each arm, from .samples.json."""

from __future__ import annotations

from rich.text import Text

from rundir import Sample

from ...model.format import LINE_LIMIT, printable, printable_block
from .lines import LinesPane


class SamplesPane(LinesPane, can_focus=True):
    wrap = True

    def __init__(self, **kwargs) -> None:
        super().__init__("", **kwargs)
        self.border_title = "samples · newest per arm"
        self._shown: tuple | None = None

    def show(self, samples: tuple[Sample, ...], error: str | None) -> None:
        """The newest sample of each arm, or why there is none."""
        key = (samples, error)
        if key == self._shown:
            return
        self._shown = key
        text = Text(no_wrap=False)
        for s in samples:
            text.append(printable(s.arm), style="bold cyan")
            text.append(f" @ {s.step:,}\n", style="grey62")
            text.append(printable_block(s.prompt), style="bold")
            text.append(printable_block(s.completion.rstrip()) + "\n")
        if error:
            text.append(printable(error, LINE_LIMIT) + "\n", style="bold red")
        if not samples and not error:
            text.append("no samples yet", style="grey62")
        self.update(text.rstrip() or text)
