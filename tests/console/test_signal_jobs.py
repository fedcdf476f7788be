"""The dashboard's signal jobs on their own (no app): what they say and when they ask for a
re-read, against a real trainer and against a run with nothing to signal."""

from __future__ import annotations

import os
import signal
import time

import pytest

from console.actions.signal_jobs import request_checkpoint, stop_and_wait
from console.read.reader import RunReader
from rundir import list_checkpoints
from rundir.layout import ALL_KINDS, CHECKPOINTS, TRAINER
from tests.console.trainer_proc import Trainer
from tests.rundirs import make_run


def recorder():
    said, changed = [], []
    return said, changed, (lambda text, level: said.append((level, text))), changed.append


def test_nothing_to_signal_is_said_and_asks_for_no_read(tmp_path):
    run = make_run(tmp_path / "run", steps=50, checkpoints=())
    for job in (lambda s, c: request_checkpoint(run, None, s, c, lambda: False),
                lambda s, c: stop_and_wait(run, None, s, c, lambda: False)):
        said, changed, say, change = recorder()
        job(say, change)
        assert [level for level, _ in said] == ["warning"] and "no trainer is running" in said[0][1]
        assert changed == []


def test_checkpoint_then_stop_a_real_trainer(tmp_path):
    run = tmp_path / "live"
    with Trainer(run) as trainer:
        trainer.wait_verified()
        said, changed, say, change = recorder()
        request_checkpoint(run, None, say, change, lambda: False)
        assert said[0][0] == "action" and said[-1][0] == "good" and said[-1][1].startswith("checkpoint landed: step_")
        assert changed == [frozenset({CHECKPOINTS})]
        assert list_checkpoints(run)[-1].status == "complete"

        said, changed, say, change = recorder()
        assert stop_and_wait(run, trainer.proc, say, change, lambda: False) is trainer.proc
        assert trainer.proc.returncode == 0
        assert [level for level, _ in said] == ["action"]       # a clean exit is said by the next read
        assert changed == [ALL_KINDS]


def _read_until(reader, kinds, wanted, ceiling=120.0):
    """Reads of ``kinds`` (the tick's) until a notice contains ``wanted``; every notice seen."""
    seen = []
    deadline = time.monotonic() + ceiling
    while time.monotonic() < deadline:
        seen += [(n.level, n.text) for n in reader.read(kinds)[1]]
        if any(wanted in text for _, text in seen):
            return seen
        time.sleep(0.1)
    raise AssertionError(f"no notice with {wanted!r} within {ceiling} s: {seen}")


def test_the_dashboards_reader_is_the_one_detector_of_a_landing(tmp_path):
    run = tmp_path / "live"
    with Trainer(run) as trainer:
        trainer.wait_verified()
        reader = RunReader(run)
        reader.read()
        said, changed, say, change = recorder()
        request_checkpoint(run, reader.awaited, say, change, lambda: False)
        assert [level for level, _ in said] == ["action"]     # the job waits for nothing
        assert changed == [frozenset({CHECKPOINTS})]
        # Reads the tick asks for (the trainer's kind only) see it land: no file event needed.
        seen = _read_until(reader, {TRAINER}, "requested checkpoint landed")
        assert sum("requested checkpoint landed" in text for _, text in seen) == 1
        assert list_checkpoints(run)[-1].status == "complete"


@pytest.mark.parametrize("end", ["trainer exits", "timeout"])
def test_an_unanswered_request_is_said_by_the_reader(tmp_path, end):
    run = tmp_path / "live"
    with Trainer(run) as trainer:
        trainer.wait_verified()
        reader = RunReader(run)
        reader.read()
        os.kill(trainer.proc.pid, signal.SIGSTOP)       # it cannot answer
        try:
            said, _, say, change = recorder()
            request_checkpoint(run, reader.awaited, say, change, lambda: False,
                               timeout=0.0 if end == "timeout" else 600.0)
            assert said[0][0] == "action"
            if end == "trainer exits":
                trainer.proc.kill()
                trainer.proc.wait()
                wanted = f"checkpoint request: trainer pid {trainer.proc.pid} exited without a new checkpoint"
            else:
                wanted = "checkpoint request: no new checkpoint within 0 s"
            seen = _read_until(reader, {TRAINER}, wanted)
            assert ("error", wanted) in seen
            assert not any("landed" in text for _, text in seen)
            assert not any(wanted in n.text for n in reader.read({TRAINER})[1])    # said once
        finally:
            if trainer.proc.poll() is None:
                os.kill(trainer.proc.pid, signal.SIGCONT)


def test_a_trainer_seen_gone_by_the_ticks_read_is_read_with_its_last_lines(tmp_path):
    """The tick reads the trainer only; one that exited after writing its stop event and
    final checkpoint is read with them in that same read: a clean exit, never an alert that
    it 'ended without a stop event' from the lines read before it wrote them."""
    run = tmp_path / "live"
    with Trainer(run) as trainer:
        trainer.wait_verified()
        reader = RunReader(run)
        reader.read()
        assert reader.snapshot.trainer.state == "running"
        trainer.proc.send_signal(signal.SIGTERM)
        assert trainer.proc.wait(60) == 0
        snap, notices = reader.read({TRAINER})
        assert snap.trainer.state == "stopped"
        assert any(ev.event == "stop" for ev in snap.history.events)
        assert [a.kind for a in snap.alerts] == [], [a.text for a in snap.alerts]
        assert any(n.text.startswith("trainer exited cleanly") for n in notices), [n.text for n in notices]
