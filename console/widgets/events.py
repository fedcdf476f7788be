"""The event log: what the console did and saw, and the tail of trainer.log."""

from __future__ import annotations

import time

from collections import deque

from rich.text import Text
from textual.widgets import RichLog

from rundir.layout import TRAINER_LOG

from ..format import LINE_LIMIT, printable
from ..views import Notice

LEVEL_STYLES = {"info": "", "good": "green", "warn": "yellow", "error": "bold red", "action": "bold cyan"}
FIRST_LOG_LINES = 8
# At most this many new trainer.log lines per update (about one a second): a trainer that
# logs every step must not scroll the console's own notices out of the pane. The rest is
# counted on one line; trainer.log itself has every line.
LOG_LINES_PER_UPDATE = 4


class EventLog(RichLog):
    def __init__(self, **kwargs) -> None:
        super().__init__(max_lines=1000, wrap=True, markup=False, highlight=False, **kwargs)
        self.border_title = "events · trainer.log"
        self._log_seen: int | None = None
        self.texts: deque[str] = deque(maxlen=1000)     # what was written, unwrapped (for tests)

    def notice(self, n: Notice) -> None:
        line = Text(time.strftime("%H:%M:%S ", time.localtime(n.time)), style="grey50")
        line.append(n.text, style=LEVEL_STYLES.get(n.level, ""))
        self.texts.append(line.plain)
        self.write(line)

    def log_lines(self, tail: tuple[str, ...], seen: int) -> None:
        """Append the trainer.log lines not shown yet (``seen`` counts every line ever read)."""
        if self._log_seen is None:       # the first update: the last few lines, nothing counted
            new, limit = min(len(tail), FIRST_LOG_LINES), FIRST_LOG_LINES
        else:
            new, limit = seen - self._log_seen, LOG_LINES_PER_UPDATE
        self._log_seen = seen
        shown = min(new, limit, len(tail))
        if new > shown:
            skipped = f"log │ … {new - shown:,} more line(s) in {TRAINER_LOG}"
            self.texts.append(skipped)
            self.write(Text(skipped, style="grey42"))
        for raw in tail[-shown:] if shown > 0 else ():
            line = printable(raw, LINE_LIMIT)      # one log line stays one line, with no escapes
            self.texts.append(f"log │ {line}")
            self.write(Text.assemble(("log │ ", "grey42"), (line, "grey62")))
