"""What the guided operations' screens (the polish pivot ``p``, the rollback ``r``) share.

Each runs its runner in a thread worker and shows its outcome under the steps; this
base holds the parts that are the same for both: starting it once (its fields locked),
asking the operator on the UI thread while the runner's thread waits for the answer,
showing the outcome, refusing to close while the operation runs, and Enter in a field
starting it.
"""

from __future__ import annotations

import threading
from typing import Any, ClassVar, TypeVar

from rich.console import Console, ConsoleOptions, RenderResult
from rich.table import Table
from rich.text import Text
from textual import on
from textual.screen import Screen
from textual.widgets import Input, Static
from textual.worker import get_current_worker

from ...model.format import LINE_LIMIT, printable
from .confirm import ConfirmScreen

OutcomeT = TypeVar("OutcomeT")


def whole_words(text: str, width: int) -> str:
    """``text`` with every word longer than ``width`` cut at its start ("…" then its end),
    so that a wrap never breaks a word (an archive's path) in two; the outcome line names
    the archive in full."""
    if width < 2:
        return text
    return " ".join(word if len(word) <= width else "…" + word[1 - width:] for word in text.split(" "))


class StepRow:
    """One step's line: number, title, status. A grid, so that a long status wraps in its
    own column, never under the titles; at word boundaries only (:func:`whole_words`)."""

    def __init__(self, key: str, titles: dict[str, str], status: str, style: str):
        self.key, self.status, self.style = key, status, style
        self.title = titles[key]
        self.title_width = max(len(t) for t in titles.values()) + 1

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        row = Table.grid(padding=(0, 1), expand=True)
        row.add_column(no_wrap=True, width=3, justify="right")
        row.add_column(no_wrap=True, width=self.title_width)
        row.add_column(ratio=1, overflow="fold")
        status_width = options.max_width - 3 - self.title_width - 2       # the two gaps between the columns
        row.add_row(Text(f"{self.key}.", style="bold"), self.title,
                    Text(whole_words(self.status, status_width), style=self.style))
        yield row


def step_row(key: str, titles: dict[str, str], status: str, style: str) -> StepRow:
    """One step's line (:class:`StepRow`)."""
    return StepRow(key, titles, status, style)


class GuidedOperationScreen(Screen[OutcomeT]):
    """A subclass sets ``WHAT`` (the operation, for messages), ``OUTCOME_ID`` (the Static
    the outcome goes in), ``CONFIRM_DETAIL`` (what follows a yes) and ``INPUTS`` (a selector
    of the fields locked once it starts), keeps ``request`` (None: not ready to start),
    ``running`` and ``outcome``, and implements ``run_operation`` (its thread worker)."""

    # The first field has the keys when the screen opens (the form's scroll container
    # would otherwise, and what is typed would go nowhere).
    AUTO_FOCUS = "Input"

    WHAT: ClassVar[str]
    OUTCOME_ID: ClassVar[str]
    CONFIRM_DETAIL: ClassVar[str]
    INPUTS: ClassVar[str]
    request: Any
    running: bool
    outcome: Any

    def run_operation(self, request: Any) -> None:
        raise NotImplementedError

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """``start`` is offered (and in the key bar) only while the operation can start."""
        if action == "start":
            return not self.running and self.outcome is None
        return True

    def action_start(self) -> None:
        """Run the operation with the request (the bell when it is not ready); once only."""
        if self.running or self.outcome is not None:
            return
        if self.request is None:
            self.app.bell()
            return
        self.running = True
        self.refresh_bindings()
        for widget in self.query(self.INPUTS):
            widget.disabled = True
        self.run_operation(self.request)

    def _confirm_from_thread(self, question: str) -> bool:
        """Ask on the UI thread and wait here (the runner's thread) for the answer."""
        answered = threading.Event()
        answer = {"yes": False}

        def decided(yes: bool | None) -> None:
            answer["yes"] = bool(yes)
            answered.set()

        # At the top, over the form: the steps done so far (the audit checkpoint's step) stay in view.
        self.app.call_from_thread(self.app.push_screen, ConfirmScreen(question, self.CONFIRM_DETAIL, at_top=True),
                                  decided)
        worker = get_current_worker()
        while not answered.wait(0.1):
            if worker.is_cancelled:         # the app is closing with the question open: no
                return False
        return answer["yes"]

    def _finish(self, outcome: Any) -> None:
        """The operation ended (``outcome``; None: closed without running): show how."""
        self.running = False
        self.outcome = outcome
        self.refresh_bindings()
        if outcome is None:
            return
        style = "bold green" if outcome.ok else "bold red"
        self.query_one(f"#{self.OUTCOME_ID}", Static).update(
            Text(f"{printable(outcome.message, LINE_LIMIT)}\nEscape returns to the dashboard.", style=style))

    @on(Input.Submitted)
    def submitted(self) -> None:
        self.action_start()

    def action_close(self) -> None:
        if self.running:
            self.app.bell()
            self.query_one(f"#{self.OUTCOME_ID}", Static).update(
                Text(f"the {self.WHAT} is running: wait for it to finish or fail", style="yellow"))
            return
        self.dismiss(self.outcome)
