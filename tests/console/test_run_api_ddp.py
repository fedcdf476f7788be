"""A plain DDP loop on the run API under torchrun (examples/ddp_loop.py: 2 processes, gloo),
every rank calling open_run, operated by the console's own checkpoint-now and stop paths:
the history is written once, ``--checkpoint`` lands a checkpoint every rank wrote its part
of at one step and training goes on, so does a SIGUSR1 to rank 1, ``--stop`` ends every rank with exit 0 and torchrun
exits 0. A job that does not get somewhere fails with its ranks' stacks (tests/ddp_jobs.py)."""

from __future__ import annotations

import signal
from pathlib import Path

import numpy as np

from rundir import verify_trainer
from rundir.external import external_checkpoints
from rundir.ranks import read_ranks
from tests.console.test_cli import console
from tests.ddp_jobs import ROOT, torchrun
from tests.rundirs import history_steps as steps
from tests.rundirs import read_history as history


def test_a_ddp_loop_checkpoints_on_every_rank_and_stops_with_exit_0(tmp_path):
    run = tmp_path / "ddp"
    with torchrun(ROOT / "examples" / "ddp_loop.py", str(run), "--steps", "100000000",
                     out=tmp_path / "job.out") as job:
        job.until(lambda: verify_trainer(run).ok and steps(run) > 5, "rank 0 verified and training")
        assert len(job.workers()) == 2
        # Every rank keeps its record, of the launch .trainer.json names, as andrea-train's workers do.
        job.until(lambda: {r.rank for r in read_ranks(run).records} == {0, 1}, "both ranks' records")
        assert {r.rank: r.pid for r in read_ranks(run).records} == {k: w.pid for k, w in job.workers().items()}
        r = console(run, "--checkpoint", "--timeout", "60", timeout=90)
        assert r.returncode == 0, r.stderr + job.output()[-4000:]
        landed = Path(r.stdout.strip())
        assert landed.parent == run and landed.name.startswith("step-"), r.stdout
        assert sorted(p.name for p in landed.iterdir()) == ["model.pt", "rank-0.pt", "rank-1.pt"]
        at = int(landed.name.removeprefix("step-"))
        job.until(lambda: history(run).step[-1] > at + 5, "training going on after the checkpoint")
        job.workers()[1].send_signal(signal.SIGUSR1)           # a signal to another rank counts too
        job.until(lambda: len(external_checkpoints(history(run).events)) == 2, "rank 1's SIGUSR1 answered")
        r = console(run, "--stop", "--timeout", "60", timeout=90)
        assert r.returncode == 0, r.stderr + job.output()[-4000:]
        assert job.wait("torchrun's exit after the stop") == 0, job.output()[-4000:]
    h = history(run)
    assert np.all(np.diff(h.step) == 1) and h.step[0] == 1, "a step written twice, or missing"
    saved = external_checkpoints(h.events)
    assert [e.reason for e in saved] == ["signal"] * 3 and saved[0].step == at
    for part in saved[1:]:
        assert sorted(p.name for p in (run / part.path).iterdir()) == ["model.pt", "rank-0.pt", "rank-1.pt"]
    assert saved[2].step == h.step[-1]
    events = [e.event for e in h.events]
    assert events[0] == "start" and events[-1] == "stop" and events.count("start") == 1, events
    assert h.events[-1].data["reason"] == "signal"
    assert [e.data["signal"] for e in h.events if e.event == "signal"] == ["checkpoint request",
                                                                              "SIGUSR1 (another rank)", "SIGTERM"]


def test_a_job_that_does_not_get_there_fails_with_every_ranks_stacks(tmp_path):
    run = tmp_path / "ddp"
    with torchrun(ROOT / "examples" / "ddp_loop.py", str(run), "--steps", "100000000",
                     out=tmp_path / "job.out") as job:
        job.until(lambda: steps(run) > 5, "training")
        try:
            job.until(lambda: False, "what never comes", timeout=1.0)
        except AssertionError as err:
            message = str(err)
        else:
            raise AssertionError("job.until returned")
    assert "what never comes" in message
    assert message.count("Current thread") == 2 and "ddp_loop.py" in message, message[-3000:]     # each rank's
