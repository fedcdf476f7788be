"""Which checkpoint a stop left (console.actions.supervise.stop_checkpoint): a new one, or, when the
stop came at a step whose checkpoint had just been written for an earlier request (a
pivot's audit), that one, named by the trainer's own stop event after the signal."""

from __future__ import annotations

import time

from console.actions.supervise import SignalResult, stop_checkpoint
from rundir import Verification, checkpoint_stamps
from tests.rundirs import RunSpec, make_run


def _sent(run, sent_at):
    return SignalResult(True, "SIGTERM sent", Verification("running", "verified"), sent_at, checkpoint_stamps(run))


def test_a_stop_at_the_step_of_the_newest_checkpoint_left_that_checkpoint(tmp_path):
    now = time.time()
    stop = {"event": "stop", "step": 300, "reason": "signal", "time": now + 0.5}
    run = make_run(tmp_path / "run", RunSpec(events=(stop,)))
    final = stop_checkpoint(run, _sent(run, now))
    assert final is not None and final.step == 300 and final.status == "complete"


def test_no_stop_event_after_the_signal_is_no_final_checkpoint(tmp_path):
    now = time.time()
    for name, events in [("none", ()),
                         ("earlier", ({"event": "stop", "step": 300, "reason": "signal", "time": now - 3600},)),
                         ("diverged", ({"event": "stop", "step": 300, "reason": "nonfinite", "time": now + 0.5},)),
                         ("other-step", ({"event": "stop", "step": 299, "reason": "signal", "time": now + 0.5},))]:
        run = make_run(tmp_path / name, RunSpec(events=events))
        assert stop_checkpoint(run, _sent(run, now)) is None, name
