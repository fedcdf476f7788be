"""Resume verification on a real micro trainer: SIGKILL it, restart it, and the console
says the re-run steps are identical; restarted with another thread count, it says the
resume changed what is computed instead of calling it a failure."""

from __future__ import annotations

import signal

import pytest

from console.cli import main
from console.read.reader import RunReader
from rundir import LossHistory, latest_resumable
from tests.trainer.trainer_runs import make_trainer_run, run_trainer, start_trainer, wait_for

CADENCE = 50


def _killed_after_a_checkpoint(run) -> tuple[int, int]:
    """Train until a checkpoint is complete (its ``.json`` written too: an asynchronous write
    renames the ``.bin`` first, and under load the loop runs steps past it before the ``.json``
    lands) and steps after it are logged, then SIGKILL: (the checkpoint's step, the last step
    logged)."""
    for _ in range(5):
        proc = start_trainer(run, "--checkpoint-every", str(CADENCE), "--threads", "1")
        history = LossHistory(run / ".loss.json")

        def past_a_checkpoint():
            history.refresh()
            ckpt = latest_resumable(run)
            return (ckpt is not None and ckpt.status == "complete" and history.last_step is not None
                    and history.last_step > ckpt.step + 5)

        try:
            wait_for(past_a_checkpoint, timeout=120, what="steps logged after a checkpoint")
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.communicate(timeout=60)
        history.refresh()
        ckpt = latest_resumable(run)
        assert ckpt.status == "complete", ckpt
        if history.last_step > ckpt.step:       # not killed right at a checkpoint: steps will be re-run
            return ckpt.step, history.last_step
    pytest.fail("every kill landed right after a checkpoint")


@pytest.mark.timeout(600)
@pytest.mark.parametrize("threads, verdict", [("1", "verified"), ("2", "changed")])
def test_kill9_and_restart_is_verified_identical(tmp_path, capsys, threads, verdict):
    run = make_trainer_run(tmp_path / "run")
    saved, logged = _killed_after_a_checkpoint(run)
    done = run_trainer(run, "--checkpoint-every", str(CADENCE), "--threads", threads, "--max-steps",
                       str(logged + 10), timeout=300)
    assert done.returncode == 0, done.stderr
    snap, _ = RunReader(run).read()
    [check] = [c for c in snap.history.resume_checks if c.from_step == saved]
    assert check.compared == logged - saved
    assert check.verdict == verdict, check.text()
    if verdict == "verified":
        assert check.identical and check.text() == f"resume at {saved} verified: {logged - saved} steps identical"
    else:
        assert check.changed == ("threads 1 -> 2",)
        assert "changed what is computed (threads 1 -> 2)" in check.text()
    assert main([str(run), "--json"]) == 0
    out = capsys.readouterr().out
    assert f'"from_step": {saved}' in out and f'"verdict": "{verdict}"' in out
