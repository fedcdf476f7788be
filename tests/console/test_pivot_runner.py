"""The pivot runner's step 6 never starts a second trainer after an interrupted attempt."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from console.actions.relaunch import RELAUNCH_GRACE_S, relaunch_pending
from tests.rundirs import DEAD_PID


def test_a_recorded_relaunch_is_waited_for_while_it_can_still_come_up():
    now = time.time()
    assert not relaunch_pending(None, now)                                    # never launched
    assert relaunch_pending({"time": now, "pid": os.getpid()}, now)            # its process is alive
    assert not relaunch_pending({"time": now, "pid": DEAD_PID}, now)           # it died: launch again
    assert relaunch_pending({"time": now - 1}, now)                            # killed before its pid was written
    assert not relaunch_pending({"time": now - RELAUNCH_GRACE_S - 1}, now)     # ... long ago
    assert relaunch_pending({"time": now, "job_id": "42"}, now)                # a SLURM job reports in the run


def test_an_exited_child_is_not_pending():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    assert not relaunch_pending({"time": time.time(), "pid": proc.pid}, time.time())
