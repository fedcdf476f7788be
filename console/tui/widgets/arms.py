"""The bandit arms: pulls, share, probability, EMA reward, cap/floor, status, source.

Zombie arms (docs/contract.md#statejson-and-zombie-arms) are shown in red, with the reason under the table (one
line each; Enter on the selected arm shows everything about it, the whole reason too).
Drawn as aligned Text, not a DataTable: the trainer rewrites .state.json every step, and
re-rendering table cells at that rate costs more CPU than the rest of the console."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from rundir.text import BLOCK_LIMIT, counted

from ...model.findings import LISTED
from ...model.format import LINE_LIMIT, format_counter, format_float, format_pct, printable
from ...model.snapshot import ArmRow, ArmsView
from .lines import LinesPane
from .rows import CURSOR_STYLE, SelectableRows, detail_table

STATUS_STYLES = {"ok": "green", "zombie": "bold red", "configured": "grey62"}
# Rows drawn (the arms that are not zombies first), zombie reasons spelled out, phase
# counters shown: past these, one line counts the rest (andrea-console --json lists all).
ROWS = 50
PHASE_KEYS = 12
# (header, width, right-aligned); the source column takes what is left.
COLUMNS = (("arm", 18, False), ("pulls", 7, True), ("share", 6, True), ("prob", 5, True), ("ema", 7, True),
           ("cap/floor", 9, True), ("status", 10, False))
# Where the pane has less room than all the columns and this much source need, prob and
# ema (both in the selected arm's detail view) make way for the status and the source.
NARROW_DROPS = ("prob", "ema")
SOURCE_ROOM = 12
WIDE_FROM = sum(width + 2 for _, width, _ in COLUMNS) + SOURCE_ROOM


class ArmsPane(SelectableRows, LinesPane, can_focus=True):
    def __init__(self, **kwargs) -> None:
        super().__init__("", **kwargs)
        self.border_title = "bandit arms"
        self._shown: tuple | None = None
        self._rows: tuple[ArmRow, ...] = ()
        self._arms: ArmsView | None = None

    def cursor_changed(self) -> None:
        if self._arms is not None:
            self.show(self._arms)

    def on_resize(self) -> None:
        if self._arms is not None:
            self.show(self._arms)

    def show(self, arms: ArmsView) -> None:
        selected = self.cursor_shown()
        narrow = 0 < self.scrollable_content_region.width < WIDE_FROM
        if self._shown is not None and (arms, selected, narrow) == self._shown:
            return
        self._shown = (arms, selected, narrow)
        self._arms = arms
        columns = tuple(c for c in COLUMNS if not (narrow and c[0] in NARROW_DROPS))
        text = Text(no_wrap=True, overflow="ellipsis")
        header = Text(style="bold")
        for name, width, right in columns:
            header.append((name.rjust(width) if right else name.ljust(width)) + "  ")
        header.append("source")
        text.append_text(header)
        shown = self._rows = _rows_shown(arms.rows)
        for i, a in enumerate(shown):
            start = len(text)
            zombie = a.status == "zombie"
            style = "red" if zombie else ""
            cells = {"pulls": "-" if a.pulls is None else f"{a.pulls:,}", "share": format_pct(a.share),
                     "prob": format_float(a.prob, ".3f"), "ema": format_float(a.ema_reward, ".4f"),
                     "cap/floor": f"{format_float(a.cap, '.2f')}/{format_float(a.floor, '.2f')}"}
            text.append("\n")
            name = printable(a.name, 18)
            text.append(name.ljust(18) + "  ", style="bold red" if zombie else "bold")
            for column, width, _ in columns[1:-1]:
                text.append(cells[column].rjust(width) + "  ", style=style)
            text.append((a.status.upper() if zombie else a.status).ljust(10) + "  ",
                        style=STATUS_STYLES.get(a.status, ""))
            text.append(printable(a.source) or "-", style=style or "grey62")
            if i == selected:
                text.stylize(CURSOR_STYLE, start + 1, len(text))
        zombies = [a for a in arms.rows if a.status == "zombie"]
        if len(shown) < len(arms.rows):
            rest = len(arms.rows) - len(shown)
            rest_zombies = len(zombies) - sum(a.status == "zombie" for a in shown)
            text.append(f"\n… and {counted(rest, 'more arm')}"
                        + (f" ({rest_zombies:,} zombie)" if rest_zombies else ""), style="grey62")
        if not arms.rows:
            text.append(f"\nno arms: {arms.none_why}" if not arms.error else "", style="grey62")
        text.append("\n\n")
        phase = " ".join(f"{printable(k)}={format_counter(v)}" for k, v in list(arms.phase.items())[:PHASE_KEYS])
        if len(arms.phase) > PHASE_KEYS:
            phase += f" … ({len(arms.phase) - PHASE_KEYS:,} more)"
        text.append("policy ", style="grey62")
        text.append(arms.policy_from)
        if phase:
            text.append("  phase ", style="grey62")
            text.append(phase)
        for a in zombies[:LISTED]:          # the reason (one line: Enter on the arm shows it whole)
            text.append(f"\nzombie {printable(a.name)}: {printable(a.reason, LINE_LIMIT)}", style="bold red")
        if len(zombies) > LISTED:
            text.append(f"\n… and {len(zombies) - LISTED:,} more zombie arms", style="bold red")
        if arms.error:
            text.append(f"\n{printable(arms.error, LINE_LIMIT)}", style="bold red")
        # The phase counters change at every step: only the pane's lines are redrawn (its
        # size never depends on them).
        self.update(text)
        self.set_hint_base(counted(len(zombies), 'zombie') if zombies else "")

    # -- rows ------------------------------------------------------------------------
    def row_count(self) -> int:
        return len(self._rows)

    def row_line(self, index: int) -> int:
        return index + 1                    # under the header

    def row_detail(self, index: int) -> tuple[str, Table]:
        a = self._rows[index]
        fields: list[tuple[str, str | Text]] = [
            ("arm", printable(a.name, BLOCK_LIMIT)),
            ("status", Text(a.status.upper() if a.status == "zombie" else a.status,
                            style=STATUS_STYLES.get(a.status, ""))),
            ("pulls", "-" if a.pulls is None else f"{a.pulls:,}"), ("share", format_pct(a.share)),
            ("probability", format_float(a.prob, ".4f")), ("EMA reward", format_float(a.ema_reward, ".6f")),
            ("cap / floor", f"{format_float(a.cap, '.3g')} / {format_float(a.floor, '.3g')}"),
            ("source", printable(a.source, BLOCK_LIMIT) or "-")]
        if a.reason:
            fields.append(("reason", Text(printable(a.reason, BLOCK_LIMIT),
                                          style="bold red" if a.status == "zombie" else "")))
        return f"arm {printable(a.name)}", detail_table(fields)


def _rows_shown(rows: tuple[ArmRow, ...]) -> tuple[ArmRow, ...]:
    """All rows, up to ROWS; past that the arms that are not zombies first, then zombies,
    ROWS in all, in their order."""
    if len(rows) <= ROWS:
        return rows
    chosen = [i for i, a in enumerate(rows) if a.status != "zombie"][:ROWS]
    chosen += [i for i, a in enumerate(rows) if a.status == "zombie"][:ROWS - len(chosen)]
    return tuple(rows[i] for i in sorted(chosen))
