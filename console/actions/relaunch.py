"""The last step of a guided operation (pivot, rollback): relaunch the trainer, wait for it.

The launch is recorded in the operation's journal before (a kill right after must not
make the next attempt launch a second trainer) and after (its pid or SLURM job); the
wait ends when the trainer runs verified and its history holds the event the operation
waits for. An attempt resumed after an interruption waits for the earlier launch while
it may still come up, and launches again when it never did.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import psutil

from rundir import LossHistory, verify_trainer
from rundir.layout import LOSS_JSON

from . import supervise

RELAUNCH_GRACE_S = 60.0      # how long a relaunch without a recorded pid may take to show itself


class StepFailed(Exception):
    """A step could not complete; the message says which and what state the run is in."""


def _relaunched_process_alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def relaunch_pending(relaunch: dict | None, now: float) -> bool:
    """Whether a relaunch by an earlier attempt may still come up: its process is alive,
    or it was started moments ago and its pid was never recorded (killed between the two
    journal writes)."""
    if not relaunch:
        return False
    pid = relaunch.get("pid")
    if isinstance(pid, int):
        return _relaunched_process_alive(pid)
    if relaunch.get("job_id"):
        return True                  # a SLURM job: it reports through the run directory
    started = relaunch.get("time")
    return isinstance(started, (int, float)) and now - started < RELAUNCH_GRACE_S


def last_log_line(run_dir: Path) -> str:
    """The trainer's last words, from the end of trainer.log."""
    try:
        with open(run_dir / supervise.TRAINER_LOG, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 4096))
            lines = [ln for ln in fh.read().decode("utf-8", "replace").splitlines() if ln.strip()]
    except OSError:
        return f"no {supervise.TRAINER_LOG}"
    return lines[-1].strip() if lines else f"{supervise.TRAINER_LOG} is empty"


def relaunch_and_wait(run_dir: Path, journal: Any, save: Callable[[], None], extra_args: Sequence[str], *,
                      arrived: Callable[[LossHistory], bool], report: Callable[[str], None], launching: str,
                      awaited: str, step: str, retry: str, timeout: float,
                      cancelled: Callable[[], bool] = lambda: False,
                      confirm_launch: Callable[[str], bool] | None = None) -> None:
    """Launch ``andrea-train RUN_DIR EXTRA_ARGS`` (under run.toml's ``run.launch``, SLURM
    included) unless an earlier attempt's launch runs or may still come up, and wait until
    the trainer runs verified and ``arrived(history)``. ``journal.relaunch`` is recorded
    through ``save``. Raises :class:`StepFailed` (``step``: its name in messages; ``retry``:
    what the operator does next) when the trainer cannot be launched or exits instead, or
    nothing arrives in time. ``confirm_launch`` is asked before an untrusted run.toml's launch
    command runs (:func:`console.actions.supervise.untrusted_launch`)."""
    def launch():
        report(launching, under_way=True)
        journal.relaunch = {"time": time.time()}
        save()
        try:
            started = supervise.start_trainer(run_dir, extra_args=list(extra_args), confirm_launch=confirm_launch)
        except OSError as err:
            raise StepFailed(f"{step}: {err}; {retry}") from None
        journal.relaunch = {**journal.relaunch,
                            **({"pid": started.child.pid} if started.child else {"job_id": started.job_id})}
        save()
        return started.child          # None for a SLURM job: its progress is read from the run directory

    history = LossHistory(run_dir / LOSS_JSON)
    history.refresh()
    child, launched = None, False
    if verify_trainer(run_dir).ok:
        pass                          # relaunched by an earlier, interrupted attempt, and running
    elif relaunch_pending(journal.relaunch, time.time()):
        report("an earlier attempt launched the trainer: waiting for it to resume ...", under_way=True)
    else:
        child, launched = launch(), True
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not cancelled():
        history.refresh()
        if arrived(history) and verify_trainer(run_dir).ok:
            return
        if not launched and not relaunch_pending(journal.relaunch, time.time()) and not verify_trainer(run_dir).ok:
            child, launched = launch(), True     # the earlier one never came up
        if child is not None and child.poll() is not None:
            raise StepFailed(f"{step}: the trainer exited with code {child.returncode} instead of resuming "
                             f"({last_log_line(run_dir)}); {retry}")
        time.sleep(supervise.POLL_S)
    raise StepFailed(f"{step}: the trainer did not report {awaited} within {timeout:g} s; {retry}")
