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


def test_a_checkpoint_reported_by_a_fast_loop_is_seen_though_more_than_a_tail_was_written_since(tmp_path):
    """A loop of a step a millisecond writes more than a tail's worth of lines between two looks of a
    busy console: the checkpoint's event must still be found (it scrolled out of a fixed tail)."""
    import time

    from console.read.landing import AnswerSince, ExternalSince
    from rundir import LossHistoryWriter
    from rundir.history.limits import TAIL_BYTES
    from rundir.layout import LOSS_JSON

    run = tmp_path / "run"
    run.mkdir()
    (run / "step-5.pt").write_bytes(b"x")
    writer = LossHistoryWriter(run / LOSS_JSON)
    writer.append({"step": 1, "loss": 1.0, "time": time.time()})
    sent = time.time()
    external, answer = ExternalSince(run, sent), AnswerSince(run, sent)
    assert external() is None and answer.name() is None
    writer.append({"event": "signal", "step": 5, "time": time.time(), "signal": "SIGUSR1", "action": "checkpoint"})
    writer.append({"event": "external_checkpoint", "step": 5, "time": time.time(), "path": "step-5.pt", "size": 1,
                   "reason": "signal"})
    step = 6
    while (run / LOSS_JSON).stat().st_size < 4 * TAIL_BYTES:
        writer.append({"step": step, "loss": 1.0 / step, "lr": 1e-3, "tokens": step * 64, "time": time.time()})
        step += 1
    writer.close()
    found = external()
    assert found is not None and found.path == "step-5.pt" and found.step == 5
