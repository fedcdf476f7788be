"""One open run's session (console/tui/session.py): its reads, paced and then closed."""

from __future__ import annotations

import time

from console.read.reader import RunReader
from console.tui.messages import SnapshotReady
from console.tui.session import RunSession
from rundir.layout import ALL_KINDS


def test_a_session_reads_its_run_and_once_closed_reads_and_takes_nothing(make_run_dir):
    run, other = make_run_dir("run", steps=40), make_run_dir("other", steps=20)
    posted, loops = [], []
    session = RunSession(run, RunReader(run), posted.append, time.time, lambda reads: loops.append(reads) or True)
    session.request_read(ALL_KINDS)
    session.request_read(ALL_KINDS)                 # a burst: one read loop asked for
    assert loops == [session.reads]
    session.reads.drain(lambda: False)              # the loop, here on this thread
    [ready] = posted
    assert isinstance(ready, SnapshotReady) and ready.snapshot.history.last_step == 40
    assert session.takes(ready.snapshot)
    assert not session.takes(RunReader(other).read(ALL_KINDS)[0])     # another run's read is dropped

    session.close()
    assert session.stop_watch.is_set() and not session.takes(ready.snapshot)
    session.request_read(ALL_KINDS)                 # asked after the close: nothing is read
    assert loops == [session.reads]
    session.reads.drain(lambda: False)
    assert posted == [ready]
