"""The dashboard's signal jobs on their own (no app): what they say and when they ask for a
re-read, against a real trainer and against a run with nothing to signal."""

from __future__ import annotations

from rundir import list_checkpoints
from rundir.layout import ALL_KINDS, CHECKPOINTS

from console.signal_jobs import checkpoint_and_wait, stop_and_wait
from tests.console.trainer_proc import Trainer
from tests.rundirs import make_run


def recorder():
    said, changed = [], []
    return said, changed, (lambda text, level: said.append((level, text))), changed.append


def test_nothing_to_signal_is_said_and_asks_for_no_read(tmp_path):
    run = make_run(tmp_path / "run", steps=50, checkpoints=())
    for job in (lambda s, c: checkpoint_and_wait(run, None, s, c, lambda: False),
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
        checkpoint_and_wait(run, None, say, change, lambda: False)
        assert said[0][0] == "action" and said[-1][0] == "good" and said[-1][1].startswith("checkpoint landed: step_")
        assert changed == [frozenset({CHECKPOINTS})]
        assert list_checkpoints(run)[-1].status == "complete"

        said, changed, say, change = recorder()
        assert stop_and_wait(run, trainer.proc, say, change, lambda: False) is trainer.proc
        assert trainer.proc.returncode == 0
        assert [level for level, _ in said] == ["action"]       # a clean exit is said by the next read
        assert changed == [ALL_KINDS]
