"""The overview's row and the dashboard's reader answer the same questions the same way:
whether the trainer is stalled (console.read.run_summary.trainer_stall), and what is wrong with the
run (console.model.findings: the overview's problems are the findings --check and the
problems pane say), against real trainers and run directories."""

from __future__ import annotations

import os
import signal

from console.actions.alerts import check_report, exit_code
from console.model.findings import summary_problems
from console.read.reader import RunReader
from console.read.run_summary import summarize_run
from console.text.overview_report import row_cells
from rundir.layout import LOSS_JSON, TMP_PREFIX
from tests.console.trainer_proc import Trainer
from tests.rundirs import make_run


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
        assert not seen.stalled and [p.kind for p in summary_problems(seen)] == []
        assert not snap.trainer.stalled and snap.trainer.stall_threshold == 10.0


def _agree(run, now: float, stall_after: float | None = None) -> list[tuple[str, str]]:
    """The overview row's findings for ``run``, checked against the pane's and --check's: the
    same kinds at the same levels in the same order, the same words (a stall's figures aside:
    the dashboard also says why a stopped process makes no progress), the same exit status and
    the same count in the row. Returns ``(kind, level)`` of each."""
    overview = summary_problems(summarize_run(run, now=now, stall_after=stall_after))
    snap, _ = RunReader(run, now=lambda: now, stall_after=stall_after).read()
    pane = snap.problems
    assert [(f.kind, f.level) for f in overview] == [(f.kind, f.level) for f in pane], (overview, pane)
    for mine, theirs in zip(overview, pane):
        if mine.kind == "stall":
            assert mine.text.startswith("trainer STALLED: no new step for") and theirs.text.startswith(mine.text[:32])
        else:
            assert mine.text == theirs.text
    code, lines = check_report(snap)
    assert code == exit_code({f.level for f in overview}), lines
    assert all(any(f.text in line for line in lines) for f in overview if f.kind != "stall"), lines
    assert row_cells(summarize_run(run, now=now, stall_after=stall_after), now)[2] == str(len(pane))
    return [(f.kind, f.level.value) for f in overview]


def test_the_overview_row_says_what_check_and_the_pane_say(tmp_path):
    """A stalled trainer, a zombie arm, an error stop and a healthy run: the overview said
    "trainer STALLED: no new step for 100 s" where --check named the threshold, never said an
    error stop at all, and listed a zombie arm in words of its own."""
    root = tmp_path / "runs"
    healthy = make_run(root / "healthy", steps=300, checkpoints=(100, 200, 300))
    zombie = make_run(root / "zombie", steps=300, checkpoints=(300,), state_arms=("stdlib-code", "gone-arm"))
    failed = make_run(root / "failed", steps=300, checkpoints=(300,),
                      events=({"event": "stop", "step": 300, "reason": "error: ValueError"},))
    now = os.stat(failed / LOSS_JSON).st_mtime + 1.0
    assert _agree(healthy, now) == []
    assert _agree(zombie, now) == [("zombie", "error")]
    assert _agree(failed, now) == [("exit", "error")]

    stalled = root / "stalled"
    stalled.mkdir()
    with Trainer(stalled) as trainer:
        os.kill(trainer.proc.pid, signal.SIGSTOP)        # no file of it changes between the two reads
        try:
            assert _agree(stalled, os.stat(stalled / LOSS_JSON).st_mtime + 100.0, stall_after=10.0) == \
                [("stall", "warning")]
        finally:
            os.kill(trainer.proc.pid, signal.SIGCONT)
