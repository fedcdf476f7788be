"""The dashboard's two signals as blocking jobs: SIGUSR1 then the wait for the checkpoint
it asked for, SIGTERM then the wait for the exit.

Each runs in a thread worker of the app and reports only through the callbacks it is
given (``say(text, level)`` for a notice, ``changed(kinds)`` for a re-read), like the
watcher: it never touches a widget.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Callable

from rundir import checkpoint_stamps
from rundir.layout import ALL_KINDS, CHECKPOINT_SIGNAL, CHECKPOINTS, STOP_SIGNAL

from ..model.checkpoint_wait import WaitEnd
from ..read.landing import AwaitedCheckpoint, AwaitedCheckpoints, landed_text
from .supervise import send, wait_for_checkpoint, wait_for_exit

SIGNAL_TIMEOUT_S = 600.0

Say = Callable[[str, str], None]
Changed = Callable[[frozenset[str]], None]


def request_checkpoint(run_dir: Path, awaited: AwaitedCheckpoints | None, say: Say, changed: Changed,
                        cancelled: Callable[[], bool], timeout: float = SIGNAL_TIMEOUT_S) -> None:
    """SIGUSR1 to the verified trainer of ``run_dir``. With ``awaited`` (the open session's
    pending requests, which its reader settles at each read) the dashboard's reads drive the
    wait: the request is awaited before the signal can be answered, each read's snapshot is
    handed to it while it waits, and the read says the landing, or that the trainer exited or
    ``timeout`` passed without one. Without it (another run of the
    overview's), this job drives the same wait by polling the files
    (:func:`~console.actions.supervise.wait_for_checkpoint`) and says what came of it. Either
    way one rule decides (:class:`console.read.landing.RequestWait`), and the landing is said
    as :mod:`console.read.landing` says it."""
    request = AwaitedCheckpoint(time.time(), checkpoint_stamps(run_dir), timeout=timeout)
    if awaited is not None:
        awaited.expect(request)
    result = send(run_dir, CHECKPOINT_SIGNAL, request.baseline)
    say(result.message, "action" if result.ok else "warning")
    if awaited is not None:
        if result.ok:
            record = result.verification.record
            awaited.sent(request, record.pid if record is not None else None)
        else:
            awaited.forget(request)
        changed(frozenset({CHECKPOINTS}))
        return
    if not result.ok:
        return
    wait = wait_for_checkpoint(run_dir, result, timeout, cancelled)
    if wait.end is WaitEnd.CANCELLED:
        return
    if wait.end is not WaitEnd.LANDED:
        say(f"checkpoint request: {wait.why}", "error")
        return
    say(landed_text(wait), "good")
    changed(frozenset({CHECKPOINTS}))


def stop_and_wait(run_dir: Path, child: subprocess.Popen | None, say: Say, changed: Changed,
                  cancelled: Callable[[], bool], timeout: float = SIGNAL_TIMEOUT_S) -> subprocess.Popen | None:
    """SIGTERM to the verified trainer of ``run_dir``, then wait for it to exit. ``child``:
    a trainer this console started, waited for (and reaped) when it is the one signalled;
    returns it then, else None."""
    result = send(run_dir, STOP_SIGNAL)
    say(result.message, "action" if result.ok else "warning")
    if not result.ok:
        return None
    if child is not None and result.verification.record and child.pid != result.verification.record.pid:
        child = None
    exited, text = wait_for_exit(run_dir, result, timeout, child, cancelled)
    if not cancelled():
        # The read that sees the record gone says the exit, once, with the final checkpoint.
        if not exited or (child is not None and child.returncode != 0):
            say(text, "good" if exited else "error")
        changed(ALL_KINDS)
    return child
