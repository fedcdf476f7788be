"""The pinned problems line, above the event log: what is wrong with the run now.

The event log says each problem once, when it is seen, and a trainer that logs fast
scrolls it away; this line shows the current :meth:`~console.views.RunSnapshot.problems`
(most important first, a few of them, each on one line) for as long as they last, and
is hidden when there are none.
"""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from ..format import printable

# Problems spelled out; the rest are counted (andrea-console --once lists them all).
SHOWN = 3


class ProblemsBar(Static):
    DEFAULT_CSS = """
    ProblemsBar {
        display: none;
        height: auto;
        padding: 0 1;
        background: $error 15%;
        text-wrap: nowrap;
        text-overflow: ellipsis;
    }
    ProblemsBar.-shown { display: block; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__("", **kwargs)
        self._shown: tuple[str, ...] | None = None

    def show(self, problems: list[str]) -> None:
        """Pin ``problems`` (one line each, a few at most); none: the line is hidden."""
        key = tuple(problems)
        if key == self._shown:
            return
        self._shown = key
        self.set_class(bool(problems), "-shown")
        text = Text(no_wrap=True, overflow="ellipsis")
        for i, problem in enumerate(problems[:SHOWN]):
            if i:
                text.append("\n")
            text.append("! ", style="bold red")
            text.append(printable(problem), style="bold red" if i == 0 else "red")
        if len(problems) > SHOWN:
            more = len(problems) - SHOWN
            text.append(f"\n… and {more} more problem{'s' if more != 1 else ''} (andrea-console RUN_DIR --once "
                        "lists them)", style="grey62")
        self.update(text)
