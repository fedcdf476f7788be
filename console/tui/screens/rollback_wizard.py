"""The rollback screen (``r``): the proposal, what is lost, then the three steps live.

The sequence is :class:`console.actions.rollback_runner.RollbackRunner`, shared with
``--rollback``; this screen shows the proposal (worked out in a thread worker: the
history, the spikes and the checkpoints are read there), lets the operator choose
another checkpoint step or batch count, runs the runner in a thread worker with a live
status line per step, and asks (:class:`ConfirmScreen`) before anything changes. It is
dismissed with the outcome (None when closed without running).
"""

from __future__ import annotations

from pathlib import Path

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Footer, Input, Static
from textual.worker import get_current_worker

from rundir import ConfigError
from rundir.rollback_files import ChoiceNames, RollbackError

from ...actions.rollback_runner import STEP_TITLES, RollbackOutcome, RollbackRequest, RollbackRunner, propose_rollback
from ...model.format import LINE_LIMIT, printable
from ..keys import ROLLBACK_KEYS, bindings
from ..messages import RollbackProgress
from .guided import GuidedOperationScreen, StepRow, step_row

STEP_KEYS = ("1", "2", "3")
# Fewer rows than this: one-line fields and no blank lines between the parts.
COMPACT_BELOW = 40
# The fields, as the screen's messages name them (not the command line's --to and --skip-batches).
TO_FIELD, SKIP_FIELD = "to step", "skip batches"
FIELD_NAMES = ChoiceNames(to=f'"{TO_FIELD}"', choose_to=f'type a checkpoint\'s step in "{TO_FIELD}"',
                          skip=f'"{SKIP_FIELD}"')


class RollbackScreen(GuidedOperationScreen[RollbackOutcome | None]):
    """The proposed checkpoint and skip, the three steps, and the outcome."""

    WHAT = "rollback"
    OUTCOME_ID = "rollback-outcome"
    CONFIRM_DETAIL = ("The trainer is stopped (its final checkpoint is kept), the checkpoints after the step are "
                      "set aside into archive/, and training resumes from the step.")
    INPUTS = "Input"

    BINDINGS = bindings(ROLLBACK_KEYS)

    def __init__(self, run_dir: Path, pending: str | None = None,
                 spikes: tuple[int | None, float | None] = (None, None)):
        super().__init__()
        self.run_dir = run_dir
        self.spikes = spikes                    # --spike-window and --spike-k (None: run.toml's)
        self.pending = pending                  # an interrupted rollback found in the journal
        self.request: RollbackRequest | None = None
        self.running = False
        self.outcome: RollbackOutcome | None = None

    def compose(self) -> ComposeResult:
        # As the pivot screen: only the form scrolls; the three steps and the outcome stay
        # in view under it at any size (80x24 too), the fields one line high where rows are few.
        compact = self.app.size.height < COMPACT_BELOW
        self.set_class(compact, "-compact")
        locked = self.pending is not None
        with VerticalScroll(id="rollback"):
            yield Static(Text(f"Rollback of {printable(self.run_dir.name)}", style="bold"), id="rollback-title")
            yield Static(self._intro(), id="rollback-intro")
            with Horizontal(classes="rollback-field"):
                yield Static(f"{TO_FIELD} (blank: proposed)", classes="rollback-label")
                yield Input("", id="rollback-to", classes="rollback-num", disabled=locked, compact=compact)
            with Horizontal(classes="rollback-field"):
                yield Static(f"{SKIP_FIELD} per arm", classes="rollback-label")
                yield Input("", id="rollback-skip", classes="rollback-num", disabled=locked, compact=compact)
            yield Static(Text("working out the proposal ...", style="grey70"), id="rollback-plan")
        with Vertical(id="rollback-progress"):
            with Vertical(id="rollback-steps"):
                for key in STEP_KEYS:
                    yield Static(self._step_text(key, "pending", "dim"), id=f"rollback-step-{key}")
            yield Static("", id="rollback-outcome")
        yield Footer(compact=True)

    def _intro(self) -> Text:
        if self.pending:
            return Text(f"{self.pending}. ctrl+s completes it as planned.", style="yellow")
        return Text("Goes back past the newest loss spike: the newest complete checkpoint at least "
                    "alerts.rollback_margin steps before it (or the step you type), each arm skipping the batches "
                    "up to the spike's end (or the number you type). ctrl+s asks, then: stop the trainer (its final "
                    "checkpoint is kept), set aside the checkpoints after the step, resume from it.", style="grey70")

    @staticmethod
    def _step_text(key: str, status: str, style: str) -> StepRow:
        return step_row(key, STEP_TITLES, status, style)

    def on_mount(self) -> None:
        self.validate()

    # -- the proposal, worked out again as the fields change --------------------------
    @on(Input.Changed)
    def validate(self) -> None:
        self.request = None
        if self.pending:
            self.request = RollbackRequest()
            self.query_one("#rollback-plan", Static).update(Text("ready to complete the interrupted rollback",
                                                                 style="green"))
            return
        values: list[int | None] = []
        for field, name in (("#rollback-to", TO_FIELD), ("#rollback-skip", SKIP_FIELD)):
            text = self.query_one(field, Input).value.strip()
            if not text:
                values.append(None)
                continue
            try:
                value = int(text)
            except ValueError:
                value = -1
            if value < 0:
                self.query_one("#rollback-plan", Static).update(
                    Text(f'"{name}": {text!r} is not a whole number >= 0', style="bold red"))
                return
            values.append(value)
        self.propose(RollbackRequest(values[0], values[1], *self.spikes))

    @work(thread=True, exclusive=True, group="rollback-plan", exit_on_error=False)
    def propose(self, request: RollbackRequest) -> None:
        try:
            proposal = propose_rollback(self.run_dir, request)
        except RollbackError as err:
            self.post_message(RollbackProgress("refused", err.worded(FIELD_NAMES)))
            return
        except ConfigError as err:
            self.post_message(RollbackProgress("refused", str(err)))
            return
        if not get_current_worker().is_cancelled:
            self.post_message(RollbackProgress("plan", proposal.describe() + ". ctrl+s starts the rollback.",
                                               request=request))

    # -- running ---------------------------------------------------------------------
    @work(thread=True, exclusive=True, group="rollback", exit_on_error=False)
    def run_operation(self, request: RollbackRequest) -> None:
        """The rollback runner, in this thread worker; its steps and outcome come back as messages."""
        worker = get_current_worker()
        runner = RollbackRunner(self.run_dir, request, confirm=self._confirm_from_thread,
                                report=lambda key, text, under_way=False: self.post_message(
                                    RollbackProgress(key, text, under_way=under_way)),
                                cancelled=lambda: worker.is_cancelled)
        self.post_message(RollbackProgress("done", "", outcome=runner.run()))

    def on_rollback_progress(self, message: RollbackProgress) -> None:
        text = printable(message.text, LINE_LIMIT)       # it names checkpoints, spikes and archives
        plan = self.query_one("#rollback-plan", Static)
        if message.step == "done":
            self._finish(message.outcome)
        elif message.step == "refused":
            if not self.running:
                self.request = None
                plan.update(Text(f"no rollback: {text}", style="bold red"))
        elif message.step == "plan":
            if message.request is not None:
                self.request = message.request
            plan.update(Text(text, style="green"))
        elif message.step in STEP_TITLES:
            self.query_one(f"#rollback-step-{message.step}", Static).update(
                self._step_text(message.step, text, "yellow" if message.under_way else "green"))
