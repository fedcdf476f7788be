"""The ranks of a job of several processes: the summary line, then a row per rank, worst first
(:mod:`console.model.rank_rows`'s columns: host, step, step time, work against the median, the
batch's share, CPU, RSS, the heartbeat's age, the verdict). It fits 80 columns; from
:data:`STRIP_FROM` columns each row adds a step-lag strip: how far behind the leading rank's step
it is, as a bar scaled to the rank furthest behind."""

from __future__ import annotations

from rich.text import Text

from rundir.text import counted

from ...model.format import printable
from ...model.rank_rows import COLUMNS, header_line, rank_line
from ...model.snapshot import RanksView
from .lines import LinesPane

VERDICT_STYLES = {"dead": "bold red", "stopped": "bold red", "silent": "bold red", "behind": "yellow",
                  "straggling": "yellow", "exited": "grey62", "ok": "green"}
STRIP_FROM = 110        # columns from which each row carries its step-lag strip
STRIP_WIDTH = 24
ROWS = 512              # rows drawn; past these one line counts the rest (--json lists all)


def lag_strip(lag: int, worst: int, width: int = STRIP_WIDTH) -> str:
    """``███······ -120``: ``lag`` steps behind the leader, as a bar of ``width`` scaled to ``worst``."""
    filled = 0 if worst <= 0 else max(1 if lag > 0 else 0, round(width * lag / worst))
    return "█" * filled + "·" * (width - filled) + (f" -{lag:,}" if lag else " lead")


def ranks_text(ranks: RanksView, now: float, width: int) -> Text:
    """The pane's whole content for a pane ``width`` columns wide."""
    text = Text(no_wrap=True, overflow="ellipsis")
    if not ranks.statuses:
        text.append("no rank records: a job of one process, or one that has not started yet", style="grey62")
        return text
    text.append(ranks.summary, style="bold")
    if ranks.earlier:
        text.append(f" · {counted(ranks.earlier, 'record')} of an earlier launch ignored", style="grey62")
    strip = width >= STRIP_FROM
    steps = [s.record.step for s in ranks.statuses if s.record.step is not None]
    lead = max(steps, default=0)
    worst = max((lead - step for step in steps), default=0)
    full = sum(width for _, width in COLUMNS) + len(COLUMNS) - 1
    text.append("\n" + (header_line().ljust(full) + "  step lag" if strip else header_line()), style="bold")
    for status in ranks.statuses[:ROWS]:
        line = rank_line(status, now)
        verdict = status.verdict
        cut = len(line) - len(verdict)
        text.append("\n" + line[:cut])
        text.append(verdict, style=VERDICT_STYLES.get(verdict, ""))
        if strip and status.record.step is not None:
            text.append(" " * (full - len(line) + 2) + lag_strip(lead - status.record.step, worst), style="grey62")
    if len(ranks.statuses) > ROWS:
        text.append(f"\n... and {len(ranks.statuses) - ROWS:,} more ranks", style="grey62")
    for status in ranks.problems[:8]:
        text.append(f"\nrank {status.record.rank}: {printable(status.why, 200)}",
                    style=VERDICT_STYLES.get(status.verdict, ""))
    return text


class RanksPane(LinesPane, can_focus=True):
    def __init__(self, **kwargs) -> None:
        super().__init__("", **kwargs)
        self.border_title = "ranks"
        self._last: tuple[RanksView, float] | None = None
        self._shown: tuple | None = None

    def on_resize(self) -> None:
        if self._last is not None:
            self.show(*self._last)

    def show(self, ranks: RanksView, now: float) -> None:
        self._last = (ranks, now)
        width = self.scrollable_content_region.width
        key = (ranks, int(now), width)
        if key == self._shown:
            return
        self._shown = key
        self.update(ranks_text(ranks, now, width))
