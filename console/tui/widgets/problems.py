"""The pinned problems line, above the event log: what is wrong with the run now.

The event log says each problem once, when it is seen, and a trainer that logs fast
scrolls it away; this line shows the current :meth:`~console.model.snapshot.RunSnapshot.problems`
(most important first, a few of them, each on one line) for as long as they last, and
is hidden when there are none. In the compact layout it is a pane of its own (key 5)
that lists them all; Enter on the selected one shows it whole.
"""

from __future__ import annotations

from rich.text import Text

from rundir.text import counted

from ...model.findings import Finding
from .lines import LinesPane
from .rows import CURSOR_STYLE, SelectableRows

# Problems spelled out above the event log; the rest are counted (andrea-console --once
# lists them all). As a pane of its own, up to ALL of them.
SHOWN = 3
ALL = 50


class ProblemsBar(SelectableRows, LinesPane, can_focus=True):
    DEFAULT_CSS = """
    ProblemsBar {
        display: none;
        height: auto;
        padding: 0 1;
        background: $error 15%;
        scrollbar-size-vertical: 1;
    }
    ProblemsBar.-shown { display: block; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__("", **kwargs)
        self.border_title = "problems"
        self._shown: tuple | None = None
        self._problems: tuple[Finding, ...] = ()
        self.limit = SHOWN

    def set_limit(self, limit: int) -> None:
        """Spell out at most ``limit`` problems (the rest are counted)."""
        if limit != self.limit:
            self.limit = limit
            self.show(self._problems)

    def cursor_changed(self) -> None:
        self.show(self._problems)

    def show(self, problems: tuple[Finding, ...]) -> None:
        """Pin ``problems`` (one line each, a few at most); none: the line is hidden."""
        selected = self.cursor_shown()
        key = (tuple(problems), self.limit, selected)
        if key == self._shown:
            return
        self._shown = key
        self._problems = problems
        self.set_class(bool(problems), "-shown")
        text = Text(no_wrap=True, overflow="ellipsis")
        for i, problem in enumerate(problems[:self.limit]):
            if i:
                text.append("\n")
            start = len(text)
            text.append("! ", style="bold red")
            text.append(problem.text, style="bold red" if i == 0 else "red")
            if i == selected:
                text.stylize(CURSOR_STYLE, start, len(text))
        if len(problems) > self.limit:
            more = len(problems) - self.limit
            text.append(f"\n… and {counted(more, 'more problem')} (andrea-console RUN_DIR --once "
                        "lists them)", style="grey62")
        if not problems:
            text.append("no problems: nothing is wrong with the run now", style="grey62")
        self.update(text)
        self.set_hint_base(counted(len(problems), 'problem') if problems else "")

    # -- rows ------------------------------------------------------------------------
    def row_count(self) -> int:
        return min(len(self._problems), self.limit)

    def row_detail(self, index: int) -> tuple[str, Text]:
        return "problem", Text(self._problems[index].text, style="bold red")
