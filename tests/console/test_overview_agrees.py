"""The overview's row and the dashboard's reader answer the same questions the same way:
whether the trainer is stalled (rundir.run_summary.trainer_stall), against real trainers."""

from __future__ import annotations

import os

from console.read.reader import RunReader
from rundir.layout import LOSS_JSON, TMP_PREFIX
from rundir.run_summary import summarize_run
from tests.console.trainer_proc import Trainer


def test_a_checkpoint_being_written_is_progress_for_the_overview_as_for_the_dashboard(tmp_path):
    """The dashboard counted a growing checkpoint temporary as progress; the overview called
    the same trainer stalled. Times are given (``now``), so no wait decides anything."""
    run = tmp_path / "runs" / "writing"
    run.mkdir(parents=True)
    with Trainer(run):
        later = os.stat(run / LOSS_JSON).st_mtime + 100.0      # the trainer's files are older than this
        seen = summarize_run(run, now=later, stall_after=10.0)
        snap, _ = RunReader(run, now=lambda: later, stall_after=10.0).read()
        assert seen.trainer_state == "running" and seen.stalled
        assert snap.trainer.stalled and snap.trainer.stalled_for > 10.0

        temporary = run / f"{TMP_PREFIX}step_000100.bin"     # a checkpoint being written, 5 s before
        temporary.write_bytes(b"\0" * 4096)
        os.utime(temporary, (later - 5.0, later - 5.0))
        seen = summarize_run(run, now=later, stall_after=10.0)
        snap, _ = RunReader(run, now=lambda: later, stall_after=10.0).read()
        assert not seen.stalled and not any("STALLED" in p for p in seen.problems), seen.problems
        assert not snap.trainer.stalled and snap.trainer.stall_threshold == 10.0
