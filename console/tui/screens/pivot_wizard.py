"""The polish pivot screen (``p``): edit caps and floors, then run the six steps live.

The sequence itself is :class:`console.actions.pivot_runner.PivotRunner`, shared with ``--pivot``; this
screen only collects the new policy (validated as you type), runs the runner in a thread
worker, shows a live status line per step, and asks before the trainer is stopped. It is
dismissed with the outcome (None when closed without running).
"""

from __future__ import annotations

import math
from pathlib import Path

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Checkbox, Footer, Input, Static
from textual.worker import get_current_worker

from rundir import ConfigError
from rundir.pivot_files import plan_policy

from ...actions.pivot_runner import STEP_TITLES, PivotOutcome, PivotRequest, PivotRunner, rollback_pivot
from ...model.format import LINE_LIMIT, printable
from ...model.snapshot import RunSnapshot
from ..keys import PIVOT_KEYS, bindings
from ..messages import PivotProgress
from ..widgets.tick_box import TickBox
from .guided import GuidedOperationScreen, StepRow, step_row

STEP_KEYS = ("1", "2", "3", "4", "5", "6")
# Fewer rows than this: one-line inputs and no blank lines between the parts.
COMPACT_BELOW = 40

def _fmt(value: float | None, spec: str = ".3g") -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, spec)

class PivotScreen(GuidedOperationScreen[PivotOutcome | None]):
    """Caps and floors per arm, the six steps, and the outcome."""

    WHAT = "pivot"
    OUTCOME_ID = "pivot-outcome"
    CONFIRM_DETAIL = "Steps 3-6 follow at once: archive, new run.toml, resume with a fresh bandit."
    INPUTS = "Input, Checkbox"

    BINDINGS = bindings(PIVOT_KEYS)

    def __init__(self, run_dir: Path, snapshot: RunSnapshot | None, pending: str | None = None):
        super().__init__()
        self.run_dir = run_dir
        self.snapshot = snapshot
        self.pending = pending                  # an interrupted pivot found in the journal
        self.config = snapshot.config if snapshot else None
        self.rows = {row.name: row for row in snapshot.arms.rows} if snapshot else {}
        self.arms = list(self.config.arms) if self.config else []
        self.request: PivotRequest | None = None
        self.running = False
        self.outcome: PivotOutcome | None = None

    # -- layout ------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        # Only the form scrolls: the six steps and the outcome stay in view under it at
        # any size (80x24 too), and the inputs are one line high where rows are few.
        compact = self.app.size.height < COMPACT_BELOW
        self.set_class(compact, "-compact")
        with VerticalScroll(id="pivot"):
            yield Static(Text(f"Polish pivot of {printable(self.run_dir.name)}", style="bold"), id="pivot-title")
            yield Static(self._intro(), id="pivot-intro")
            if self.config is not None:
                # The headings stand over the fields' first characters (a full field has a
                # border and a padding before it, a one-line field a bar).
                cap = " cap" if compact else "  cap"
                yield Static(Text.assemble(("arm".ljust(22), "bold"), ("pulls".rjust(8), "bold"),
                                           ("share".rjust(8), "bold"), (cap.ljust(12) + "floor", "bold")),
                             id="pivot-head")
                for i, arm in enumerate(self.arms):
                    row = self.rows.get(arm)
                    zombie = row is not None and row.status == "zombie"
                    label = Text(arm[:21].ljust(22), style="bold red" if zombie else "")
                    label.append(_fmt(row.pulls if row else None, ",d").rjust(8))
                    label.append(_fmt(row.share if row else None, ".0%").rjust(8))
                    with Horizontal(classes="pivot-arm"):
                        yield Static(label, classes="pivot-arm-label")
                        yield Input(f"{self.config.arms[arm].cap:g}", id=f"cap-{i}", classes="pivot-num",
                                    disabled=self.pending is not None, compact=compact)
                        yield Input(f"{self.config.arms[arm].floor:g}", id=f"floor-{i}", classes="pivot-num",
                                    disabled=self.pending is not None, compact=compact)
                        yield TickBox("drop", zombie, id=f"drop-{i}", classes="pivot-drop",
                                       disabled=self.pending is not None, compact=compact)
            yield Static("", id="pivot-validation")
        with Vertical(id="pivot-progress"):
            with Vertical(id="pivot-steps"):
                for key in STEP_KEYS:
                    yield Static(self._step_text(key, "pending", "dim"), id=f"step-{key}")
            yield Static("", id="pivot-outcome")
        yield Footer(compact=True)

    def _intro(self) -> Text:
        if self.config is None:
            why = self.snapshot.config_error if self.snapshot else "the run has not been read yet"
            return Text(f"No pivot possible: {printable(why, LINE_LIMIT)}", style="red")
        if self.pending:
            return Text(f"{self.pending}. ctrl+s completes it with its recorded policy; ctrl+r rolls it back.",
                        style="yellow")
        return Text("Edit caps and floors (each in [0, 1], floor <= cap, sum of floors <= 1 <= sum of caps); "
                    "tick drop to remove an arm. ctrl+s starts: audit checkpoint, stop (asks first), archive "
                    ".samples.json and .state.json, keep .loss.json, write run.toml, resume with a fresh bandit.",
                    style="grey70")

    @staticmethod
    def _step_text(key: str, status: str, style: str) -> StepRow:
        return step_row(key, STEP_TITLES, status, style)

    def on_mount(self) -> None:
        self.validate()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "rollback":          # shown only while an interrupted pivot waits
            return bool(self.pending) and not self.running and self.outcome is None
        return super().check_action(action, parameters)

    # -- validation as you type ----------------------------------------------------
    @on(Input.Changed)
    @on(Checkbox.Changed)
    def validate(self) -> None:
        status = self.query_one("#pivot-validation", Static)
        self.request = None
        if self.config is None:
            return
        if self.pending:
            self.request = PivotRequest()
            status.update(Text("ready to complete the interrupted pivot", style="green"))
            return
        caps, floors, drop = {}, {}, []
        for i, arm in enumerate(self.arms):
            if self.query_one(f"#drop-{i}", Checkbox).value:
                drop.append(arm)
                continue
            for kind, target in (("cap", caps), ("floor", floors)):
                text = self.query_one(f"#{kind}-{i}", Input).value.strip()
                try:
                    target[arm] = float(text)
                except ValueError:
                    status.update(Text(f"{kind} of {arm}: {text!r} is not a number", style="bold red"))
                    return
        try:
            plan_policy(self.config, caps, floors, drop)
        except ConfigError as err:
            status.update(Text(str(err).removeprefix("pivot: "), style="bold red"))
            return
        self.request = PivotRequest(caps, floors, drop)
        dropped = f"; drop {', '.join(drop)}" if drop else ""
        status.update(Text(f"policy OK: floors sum to {sum(floors.values()):.3g}, caps to "
                           f"{sum(caps.values()):.3g}{dropped}. ctrl+s starts the pivot.", style="green"))

    # -- running -------------------------------------------------------------------
    @work(thread=True, exclusive=True, group="pivot", exit_on_error=False)
    def run_operation(self, request: PivotRequest) -> None:
        """The pivot runner, in this thread worker; its steps and outcome come back as messages."""
        worker = get_current_worker()
        runner = PivotRunner(self.run_dir, request, confirm=self._confirm_from_thread,
                             report=lambda key, text, under_way=False: self.post_message(
                                 PivotProgress(key, text, under_way=under_way)),
                             cancelled=lambda: worker.is_cancelled)
        self.post_message(PivotProgress("done", "", runner.run()))

    def on_pivot_progress(self, message: PivotProgress) -> None:
        if message.step == "done":
            self._finish(message.outcome)
            return
        text = printable(message.text, LINE_LIMIT)       # it names checkpoints and archives
        if message.step in STEP_TITLES:
            self.query_one(f"#step-{message.step}", Static).update(
                self._step_text(message.step, text, "yellow" if message.under_way else "green"))
        else:
            self.query_one("#pivot-validation", Static).update(Text(text, style="green"))

    def action_rollback(self) -> None:
        if self.running or not self.pending or self.outcome is not None:
            return
        self.running = True
        self.refresh_bindings()
        self.roll_back()

    @work(thread=True, exclusive=True, group="pivot", exit_on_error=False)
    def roll_back(self) -> None:
        self.post_message(PivotProgress("done", "", rollback_pivot(self.run_dir)))
