"""The bandit arms: pulls, share, probability, EMA reward, cap/floor, status, source.

Zombie arms (DESIGN.md section 5) are shown in red, with the reason under the table.
Drawn as aligned Text, not a DataTable: the trainer rewrites .state.json every step, and
re-rendering table cells at that rate costs more CPU than the rest of the console."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from ..format import LINE_LIMIT, format_float, format_pct, printable
from ..views import LISTED, ArmRow, ArmsView

STATUS_STYLES = {"ok": "green", "zombie": "bold red", "configured": "grey62"}
# Rows drawn (the arms that are not zombies first), zombie reasons spelled out, phase
# counters shown: past these, one line counts the rest (andrea-console --json lists all).
ROWS = 50
PHASE_KEYS = 12
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
        shown = _rows_shown(arms.rows)
        for a in shown:
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
        zombies = [a for a in arms.rows if a.status == "zombie"]
        if len(shown) < len(arms.rows):
            rest = len(arms.rows) - len(shown)
            rest_zombies = len(zombies) - sum(a.status == "zombie" for a in shown)
            text.append(f"\n… and {rest:,} more arm{'s' if rest != 1 else ''}"
                        + (f" ({rest_zombies:,} zombie)" if rest_zombies else ""), style="grey62")
        if not arms.rows:
            text.append("\nno arms: no .state.json and no run.toml" if not arms.error else "", style="grey62")
        text.append("\n\n")
        phase = " ".join(f"{printable(k)}={_short(v)}" for k, v in list(arms.phase.items())[:PHASE_KEYS])
        if len(arms.phase) > PHASE_KEYS:
            phase += f" … ({len(arms.phase) - PHASE_KEYS:,} more)"
        text.append("policy ", style="grey62")
        text.append(arms.policy_from)
        if phase:
            text.append("  phase ", style="grey62")
            text.append(phase)
        for a in zombies[:LISTED]:          # the reason, in full
            text.append(f"\nzombie {printable(a.name)}: {printable(a.reason, LINE_LIMIT)}", style="bold red")
        if len(zombies) > LISTED:
            text.append(f"\n… and {len(zombies) - LISTED:,} more zombie arms", style="bold red")
        if arms.error:
            text.append(f"\n{printable(arms.error, LINE_LIMIT)}", style="bold red")
        # The phase counters change at every step: relayout only when the line count changes.
        lines = text.plain.count("\n")
        self.update(text, layout=lines != self._lines)
        self._lines = lines
        self.border_subtitle = f"{len(zombies):,} zombie" + ("s" if len(zombies) != 1 else "") if zombies else ""


def _rows_shown(rows: tuple[ArmRow, ...]) -> tuple[ArmRow, ...]:
    """All rows, up to ROWS; past that the arms that are not zombies first, then zombies,
    ROWS in all, in their order."""
    if len(rows) <= ROWS:
        return rows
    chosen = [i for i, a in enumerate(rows) if a.status != "zombie"][:ROWS]
    chosen += [i for i, a in enumerate(rows) if a.status == "zombie"][:ROWS - len(chosen)]
    return tuple(rows[i] for i in sorted(chosen))


def _short(v: object) -> str:
    return format(v, ".4g") if isinstance(v, float) else printable(v)
