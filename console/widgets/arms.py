"""The bandit arms: pulls, share, probability, EMA reward, cap/floor, status, source.

Zombie arms (DESIGN.md section 5) are shown in red, with the reason under the table.
Drawn as aligned Text, not a DataTable: the trainer rewrites .state.json every step, and
re-rendering table cells at that rate costs more CPU than the rest of the console."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from ..format import LINE_LIMIT, format_float, format_pct, printable
from ..views import ArmsView

STATUS_STYLES = {"ok": "green", "zombie": "bold red", "configured": "grey62"}
# (header, width, right-aligned); the source column takes what is left.
COLUMNS = (("arm", 18, False), ("pulls", 7, True), ("share", 6, True), ("prob", 5, True), ("ema", 7, True),
           ("cap/floor", 9, True), ("status", 10, False))


class ArmsPane(Static):
    def __init__(self, **kwargs) -> None:
        super().__init__("", **kwargs)
        self.border_title = "bandit arms"
        self._shown: ArmsView | None = None
        self._lines = -1

    def show(self, arms: ArmsView) -> None:
        if arms is self._shown:
            return
        self._shown = arms
        text = Text(no_wrap=True, overflow="ellipsis")
        header = Text(style="bold")
        for name, width, right in COLUMNS:
            header.append((name.rjust(width) if right else name.ljust(width)) + "  ")
        header.append("source")
        text.append_text(header)
        for a in arms.rows:
            zombie = a.status == "zombie"
            style = "red" if zombie else ""
            cells = ["-" if a.pulls is None else f"{a.pulls:,}", format_pct(a.share), format_float(a.prob, ".3f"),
                     format_float(a.ema_reward, ".4f"),
                     f"{format_float(a.cap, '.2f')}/{format_float(a.floor, '.2f')}"]
            text.append("\n")
            name = printable(a.name, 18)
            text.append(name.ljust(18) + "  ", style="bold red" if zombie else "bold")
            for cell, (_, width, _) in zip(cells, COLUMNS[1:6]):
                text.append(cell.rjust(width) + "  ", style=style)
            text.append((a.status.upper() if zombie else a.status).ljust(10) + "  ",
                        style=STATUS_STYLES.get(a.status, ""))
            text.append(printable(a.source) or "-", style=style or "grey62")
        if not arms.rows:
            text.append("\nno arms: no .state.json and no run.toml" if not arms.error else "", style="grey62")
        text.append("\n\n")
        phase = " ".join(f"{printable(k)}={_short(v)}" for k, v in arms.phase.items())
        text.append("policy ", style="grey62")
        text.append(arms.policy_from)
        if phase:
            text.append("  phase ", style="grey62")
            text.append(phase)
        for a in arms.rows:
            if a.status == "zombie":      # the reason, in full
                text.append(f"\nzombie {printable(a.name)}: {printable(a.reason, LINE_LIMIT)}", style="bold red")
        if arms.error:
            text.append(f"\n{printable(arms.error, LINE_LIMIT)}", style="bold red")
        # The phase counters change at every step: relayout only when the line count changes.
        lines = text.plain.count("\n")
        self.update(text, layout=lines != self._lines)
        self._lines = lines
        zombies = sum(a.status == "zombie" for a in arms.rows)
        self.border_subtitle = f"{zombies} zombie" + ("s" if zombies != 1 else "") if zombies else ""


def _short(v: object) -> str:
    return format(v, ".4g") if isinstance(v, float) else printable(v)
