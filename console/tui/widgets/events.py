"""The event log: what the console did and saw, and the tail of trainer.log.

One line per event, cut with … at the pane's width (a wrapped line would run back to
column 0 and read as a new event); Enter on a selected line shows it whole. Drawn with
Textual's Line API: only the lines in view are rendered, each once per width.
"""

from __future__ import annotations

import math
import time
from collections import deque
from itertools import count
from typing import Callable

from rich.text import Text
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

from rundir.layout import TRAINER_LOG
from rundir.text import counted

from ...model.format import LINE_LIMIT, printable
from ...model.levels import Level
from ...model.snapshot import Notice
from .rows import CURSOR_STYLE, CachedStrips, SelectableRows, cut_line_strip

LEVEL_STYLES = {Level.INFO: "", Level.GOOD: "green", Level.WARNING: "yellow", Level.ERROR: "bold red",
                Level.ACTION: "bold cyan"}
FIRST_LOG_LINES = 8
# At most this many new trainer.log lines a second, however often the run is read (a
# checkpoint landing makes reads come four times a second): a trainer that logs every step
# must not scroll the console's own notices, such as "requested checkpoint landed", out of
# the pane before they are seen. The rest is counted on one line; trainer.log itself has
# every line.
LOG_LINES_PER_UPDATE = 4
LOG_UPDATE_EVERY_S = 1.0
MAX_LINES = 1000
LOG_PREFIX = "log │ "


class EventLog(SelectableRows, CachedStrips, ScrollView, can_focus=True):
    DEFAULT_CSS = """
    EventLog { overflow-x: hidden; overflow-y: auto; }
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic, **kwargs) -> None:
        super().__init__(**kwargs)
        self.border_title = "events · trainer.log"
        self.clock = clock
        self._log_seen: int | None = None
        self._log_shown_at = -math.inf
        self._entries: deque[tuple[int, Text]] = deque(maxlen=MAX_LINES)
        self._serial = count()
        self._strips: dict[tuple[int, bool], Strip] = {}

    @property
    def texts(self) -> list[str]:
        """Every line kept, unwrapped and uncut, as plain text (oldest first)."""
        return [text.plain for _, text in self._entries]

    def notice(self, n: Notice) -> None:
        line = Text(time.strftime("%H:%M:%S ", time.localtime(n.time)), style="grey50")
        line.append(n.text, style=LEVEL_STYLES.get(n.level, ""))
        self.write(line)

    def log_lines(self, tail: tuple[str, ...], seen: int) -> None:
        """Append the trainer.log lines not shown yet (``seen`` counts every line ever read),
        at most once every :data:`LOG_UPDATE_EVERY_S`: lines that come sooner wait for the next
        update (the tick's read brings one every second)."""
        now = self.clock()
        if self._log_seen is None:       # the first update: the last few lines, nothing counted
            new, limit = min(len(tail), FIRST_LOG_LINES), FIRST_LOG_LINES
        elif seen == self._log_seen or now - self._log_shown_at < LOG_UPDATE_EVERY_S:
            return
        else:
            new, limit = seen - self._log_seen, LOG_LINES_PER_UPDATE
        self._log_seen, self._log_shown_at = seen, now
        shown = min(new, limit, len(tail))
        if new > shown:
            self.write(Text(f"{LOG_PREFIX}… {counted(new - shown, 'more line')} in {TRAINER_LOG}", style="grey42"))
        for raw in tail[-shown:] if shown > 0 else ():
            line = printable(raw, LINE_LIMIT)      # one log line stays one line, with no escapes
            self.write(Text.assemble((LOG_PREFIX, "grey42"), (line, "grey62")))

    def write(self, line: Text) -> None:
        """Append one line; the view follows the newest line unless a row is selected."""
        follow = self.cursor_shown() is None
        if len(self._entries) == MAX_LINES:
            self._strips.pop((self._entries[0][0], False), None)
            self._strips.pop((self._entries[0][0], True), None)
            if self.cursor is not None:
                self.cursor = max(0, self.cursor - 1)
        self._entries.append((next(self._serial), line))
        self.virtual_size = Size(0, len(self._entries))
        if follow:
            self.scroll_end(animate=False, immediate=True, x_axis=False, force=True)
        self.update_hint()
        self.refresh()

    # -- rows ------------------------------------------------------------------------
    def row_count(self) -> int:
        return len(self._entries)

    def default_row(self) -> int:
        return len(self._entries) - 1

    def row_detail(self, index: int) -> tuple[str, Text]:
        text = self._entries[index][1].copy()
        title = f"{TRAINER_LOG} line" if text.plain.startswith(LOG_PREFIX) else "event"
        text.no_wrap = False
        return title, text

    # -- drawing -----------------------------------------------------------------------
    def render_line(self, y: int) -> Strip:
        base, width, index = self.visible_row(y)
        if index >= len(self._entries) or width <= 0:
            return Strip.blank(max(width, 0), base)
        serial, text = self._entries[index]
        selected = index == self.cursor_shown()
        strip = self._strips.get((serial, selected))
        if strip is None:
            strip = cut_line_strip(text, width, self.app.console, base, CURSOR_STYLE if selected else None)
            self._strips[(serial, selected)] = strip
        return strip
