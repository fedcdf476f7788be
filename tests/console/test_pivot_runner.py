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


def test_the_pivot_screen_says_an_unfinished_pivot_as_every_other_view(tmp_path):
    """One wording of an unfinished pivot: the pivot screen's line is the problems' and the overview's."""
    from console.actions.pivot_runner import pending_pivot
    from rundir.pivot_files import PivotJournal, read_journal, unfinished_text, write_journal
    from tests.rundirs import make_run

    run = make_run(tmp_path / "run", steps=20)
    assert pending_pivot(run) is None
    write_journal(run, PivotJournal(stage="config_written", started=time.time(), old_policy={}, new_policy={}))
    journal, error = read_journal(run)
    assert error is None and journal is not None
    assert pending_pivot(run) == unfinished_text(journal)
    assert "(last completed stage: config_written)" in unfinished_text(journal)
