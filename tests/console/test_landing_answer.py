"""Which checkpoint answers a request, by the trainer's own history (console.read.landing.answer_to)."""

from __future__ import annotations

import json

from console.read.landing import AnswerSince, answer_to, reports_checkpoints
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
    assert reports_checkpoints(events) and not reports_checkpoints([ev("eval", 1.0)])


def test_a_signal_taken_during_a_write_is_answered_by_that_write():
    events = [ev("checkpoint", 12.0, path="step_000200.bin", reason="cadence"),
              ev("signal", 12.1, signal="SIGUSR1", action="checkpoint", during_checkpoint=True)]
    assert answer_to(events, 11.5) == "step_000200.bin"


def test_the_answer_is_read_from_the_lines_added_since_the_request(tmp_path):
    """Only the lines after the history's end then (less a look back) are read, by reopening the
    file each time: however long a mount hides the growth, no line is skipped."""
    history = tmp_path / ".loss.json"
    steps = [json.dumps({"step": s, "loss": 1.0, "time": 10.0}) for s in range(5000)]
    history.write_text("\n".join(steps) + "\n" + json.dumps({"event": "checkpoint", "step": 4999, "time": 10.5,
                                                             "path": "step_004999.bin", "reason": "cadence"}) + "\n")
    answer = AnswerSince(tmp_path, 11.0)
    assert answer.name() is None and answer.reports            # the cadence checkpoint answers nothing
    with open(history, "a") as fh:
        fh.write("\n".join(steps[:3000]) + "\n")
        fh.write(json.dumps({"event": "signal", "step": 5009, "time": 11.2, "signal": "SIGUSR1",
                             "action": "checkpoint", "during_checkpoint": False}) + "\n")
        fh.write(json.dumps({"event": "checkpoint", "step": 5009, "time": 11.3, "path": "step_005009.bin",
                             "reason": "signal"})[:40])          # torn: being written
    assert answer.name() is None
    with open(history, "a") as fh:
        fh.write(json.dumps({"event": "checkpoint", "step": 5009, "time": 11.3, "path": "step_005009.bin",
                             "reason": "signal"})[40:] + "\n")
    assert answer.name() == "step_005009.bin"
