"""Which checkpoint answers a request, by the trainer's own history (console.read.landing.answer_to)."""

from __future__ import annotations

from console.read.landing import answer_to, reports_checkpoints
from rundir.history.records import HistoryEvent


def ev(kind, t, **data):
    return HistoryEvent(kind, 0, t, 0, data)


def test_the_answer_is_the_checkpoint_after_the_signal_never_a_scheduled_one_before_it():
    events = [ev("checkpoint", 10.0, path="step_000100.bin", reason="cadence"),
              ev("checkpoint", 12.0, path="step_000200.bin", reason="cadence"),     # landed after the request
              ev("signal", 12.5, signal="SIGUSR1", action="checkpoint", during_checkpoint=False),
              ev("checkpoint", 12.6, path="step_000209.bin", reason="signal")]
    assert answer_to(events, 11.0) == "step_000209.bin"
    assert answer_to(events[:3], 11.0) is None                  # taken, not written yet
    assert answer_to(events, 13.0) is None                      # a later request: not answered
    assert reports_checkpoints(events) and not reports_checkpoints(events[2:3])


def test_a_signal_taken_during_a_write_is_answered_by_that_write():
    events = [ev("checkpoint", 12.0, path="step_000200.bin", reason="cadence"),
              ev("signal", 12.1, signal="SIGUSR1", action="checkpoint", during_checkpoint=True)]
    assert answer_to(events, 11.5) == "step_000200.bin"
