"""The fence: a holder of the run's lock file that may have lost it writes nothing more.

Where flock is refused, the run's lock is ``.lock-owner.json`` with a heartbeat
(:mod:`rundir.run_lock`), and another host takes it over once the heartbeat is older than
the bound (``run.lock_stale_after``) plus a margin. A holder frozen or stalled past the
bound (a stop signal, a swap storm, a server that stalls its writes) must not write once it
may have been taken over. So each holder registers a check here, and every write of the
run's files (:mod:`rundir.atomic`'s, the history's appends) asks :func:`check` first: it
raises :class:`LockLostError` once the holder's own last confirmed heartbeat is older than
the bound, before anyone may take over. A process that holds no lock file has no check
registered, and :func:`check` costs it nothing.
"""

from __future__ import annotations

import threading
from typing import Callable

_checks: list[Callable[[], None]] = []
_guard = threading.Lock()


class LockLostError(RuntimeError):
    """This process's lock on a run directory is lost, or may be: it writes nothing more."""


def register(check: Callable[[], None]) -> None:
    """``check()`` raises :class:`LockLostError` when its holder must not write any more."""
    with _guard:
        _checks.append(check)


def unregister(check: Callable[[], None]) -> None:
    with _guard:
        if check in _checks:
            _checks.remove(check)


def check() -> None:
    """Before a write of a run's files: raises :class:`LockLostError` where a lock this process
    holds is lost or may be."""
    for one in tuple(_checks):
        one()
