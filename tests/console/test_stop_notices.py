"""What the event log says of a trainer's ``stop`` event: a failure (``error: ...``, a
framework's error) is an error, never a clean stop; a framework's SLURM requeue says so."""

from __future__ import annotations

from console.read.changes import event_notice
from rundir import HistoryEvent
from rundir.layout import STOP_REQUEUE, is_error_stop


def stop(reason: str | None) -> HistoryEvent:
    return HistoryEvent("stop", 40, 1.0, 7, {} if reason is None else {"reason": reason})


def test_a_stop_that_failed_is_said_as_an_error():
    text, level = event_notice(stop("error: RuntimeError"))
    assert level == "error" and "STOPPED at step 40 with an error (error: RuntimeError" in text
    assert is_error_stop("error: OSError") and not is_error_stop("signal") and not is_error_stop(None)


def test_a_requeue_and_a_plain_stop_are_information():
    text, level = event_notice(stop(STOP_REQUEUE))
    assert level == "info" and "for a SLURM requeue" in text and "the next job resumes" in text
    assert event_notice(stop("signal")) == ("trainer logged stop at step 40 (signal)", "info")
