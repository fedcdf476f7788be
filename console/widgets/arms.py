"""The bandit arms: pulls, share, probability, EMA reward, cap, floor, source, status.

Zombie arms (DESIGN.md section 5) are shown in red with the reason."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable, Static

from ..snapshot import ArmsView, format_float, format_pct

STATUS_STYLES = {"ok": "green", "zombie": "bold red", "configured": "grey62"}


class ArmsPane(Vertical):
    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.border_title = "bandit arms"
        self._shown: ArmsView | None = None

    def compose(self) -> ComposeResult:
        table = DataTable(cursor_type="row", id="arms-table")
        # Status before source: a zombie's reason must be visible even in a narrow pane.
        table.add_columns("arm", "pulls", "share", "prob", "ema", "cap/floor", "status", "source")
        yield table
        yield Static("", id="arms-policy")

    def show(self, arms: ArmsView) -> None:
        if arms is self._shown:
            return
        self._shown = arms
        table = self.query_one(DataTable)
        table.clear()
        for a in arms.rows:
            zombie = a.status == "zombie"
            style = "red" if zombie else ""
            status = Text(a.status.upper() if zombie else a.status, style=STATUS_STYLES.get(a.status, ""))
            cells = [Text(a.name, style="bold red" if zombie else "bold"),
                     *(Text(v, style=style, justify="right") for v in (
                         "-" if a.pulls is None else f"{a.pulls:,}", format_pct(a.share),
                         format_float(a.prob, ".3f"), format_float(a.ema_reward, ".4f"),
                         f"{format_float(a.cap, '.2f')}/{format_float(a.floor, '.2f')}")),
                     status, Text(a.source or "-", style=style or "grey62")]
            table.add_row(*cells, key=a.name)
        phase = " ".join(f"{k}={_short(v)}" for k, v in arms.phase.items())
        policy = Text.assemble(("policy ", "grey62"), arms.policy_from,
                               *((("  phase ", "grey62"), phase) if phase else ()))
        for a in arms.rows:
            if a.status == "zombie":      # the reason, in full, under the table
                policy.append(f"\nzombie {a.name}: {a.reason}", style="bold red")
        if arms.error:
            policy.append(f"  {arms.error}", style="bold red")
        elif not arms.rows:
            policy.append("  no arms: no .state.json and no run.toml", style="grey62")
        self.query_one("#arms-policy", Static).update(policy)
        zombies = sum(a.status == "zombie" for a in arms.rows)
        self.border_subtitle = f"{zombies} zombie" + ("s" if zombies != 1 else "") if zombies else ""


def _short(v: object) -> str:
    return format(v, ".4g") if isinstance(v, float) else str(v)
