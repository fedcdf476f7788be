"""What the journalled guided operations (the polish pivot, the rollback) share.

Each runner (:class:`console.actions.pivot_runner.PivotRunner`,
:class:`console.actions.rollback_runner.RollbackRunner`) takes the run directory, a request, a
``confirm`` question, a ``report`` of live status lines per step and a ``cancelled``
poll; turns its expected failures into a failed outcome with the one-line reason; stops
the trainer with SIGTERM the same way; and, once the trainer runs again, files the
finished journal as its archive's record and removes the journal.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Callable, ClassVar

from rundir.atomic import atomic_write_json
from rundir.journal import StagedJournal, remove_staged
from rundir.layout import STOP_SIGNAL

from . import supervise
from .relaunch import StepFailed

# (step key "plan" or "1".., status text, under_way=...): ``under_way`` is True while the
# step waits for something (a checkpoint, an exit, a relaunch), False once it is done.
Report = Callable[..., None]


class JournalledRunner:
    """Runs (or completes) one guided operation. A subclass sets ``OUTCOME`` (its outcome
    class, built as ``OUTCOME(ok, message)``) and ``FAILURES`` (the exceptions whose
    message is the failed outcome's), and implements ``_run``."""

    OUTCOME: ClassVar[Callable[[bool, str], Any]]
    FAILURES: ClassVar[tuple[type[Exception], ...]]

    def __init__(self, run_dir: str | os.PathLike[str], request: Any, *,
                 confirm: Callable[[str], bool], report: Report, timeout: float = 300.0,
                 cancelled: Callable[[], bool] = lambda: False):
        self.run_dir = Path(run_dir)
        self.request = request
        self.confirm = confirm
        self.report = report
        self.timeout = timeout
        self.cancelled = cancelled

    def run(self) -> Any:
        """The outcome: ``_run``'s, or a failed one saying why."""
        try:
            return self._run()
        except self.FAILURES as err:
            return self.OUTCOME(False, str(err))

    def _run(self) -> Any:
        raise NotImplementedError

    def _send_stop_and_wait(self, key: str, failed: type[StepFailed] = StepFailed,
                            after_timeout: str = "") -> tuple[supervise.SignalResult, str]:
        """SIGTERM the (verified) trainer and wait for its exit, reporting under step ``key``.
        Raises ``failed`` naming the step when the signal is not sent or the trainer does not
        exit (``after_timeout`` is appended: what to do next). Returns the signal's result and
        the exit's description."""
        self.report(key, "SIGTERM sent; waiting for the final checkpoint and the exit ...", under_way=True)
        sent = supervise.send(self.run_dir, STOP_SIGNAL)
        if not sent.ok:
            raise failed(f"step {key}: {sent.message}")
        exited, description = supervise.wait_for_exit(self.run_dir, sent, self.timeout, cancelled=self.cancelled)
        if not exited:
            raise failed(f"step {key}: {description}{after_timeout}")
        return sent, description

    def _file_finished_journal(self, journal: StagedJournal, record: str, resumed_from: int) -> None:
        """The last stage: the journal, marked resumed, becomes ``record`` in its archive
        (with the time it finished), and the journal file is removed."""
        journal.advance("resumed", f"trainer running from step {resumed_from}")
        archive = journal.archive       # type: ignore[attr-defined]   (both journals name their archive)
        atomic_write_json(self.run_dir / archive / record, {**journal.to_dict(), "finished": time.time()})
        remove_staged(self.run_dir, type(journal))
