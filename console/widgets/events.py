"""The event log: what the console did and saw, and the tail of trainer.log."""

from __future__ import annotations

import time

from collections import deque

from rich.text import Text
from textual.widgets import RichLog

from ..snapshot import Notice

LEVEL_STYLES = {"info": "", "good": "green", "warn": "yellow", "error": "bold red", "action": "bold cyan"}
FIRST_LOG_LINES = 8


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
        new = FIRST_LOG_LINES if self._log_seen is None else seen - self._log_seen
        self._log_seen = seen
        for raw in tail[-new:] if new > 0 else ():
            self.texts.append(f"log │ {raw}")
            self.write(Text.assemble(("log │ ", "grey42"), (raw, "grey62")))
