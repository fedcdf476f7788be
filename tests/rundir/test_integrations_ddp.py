"""The framework callbacks in a job of 2 processes (CPU, gloo), each as its example runs it and
as the README says to use it (the callback given once, to the Trainer): Lightning
``strategy="ddp"`` (Lightning's own launcher) and a Hugging Face ``Trainer`` under torchrun.
The console's own paths operate them: the history is written once (no step twice),
``--checkpoint`` lands a complete checkpoint written at one step and training goes on, ``--stop`` ends
every rank with exit 0. A job that does not get somewhere fails with its ranks' stacks
(tests/ddp_jobs.py)."""

from __future__ import annotations

import json
import sys
import zipfile
from pathlib import Path

import numpy as np
import psutil

from rundir import read_trainer_record, verify_trainer
from rundir.external import external_checkpoints
from tests.console.test_cli import console
from tests.ddp_jobs import ROOT, Job, torchrun
from tests.rundirs import history_steps as steps
from tests.rundirs import read_history as history

EXAMPLES = ROOT / "examples"


class LightningJob(Job):
    """Lightning's launcher: the script's process is rank 0, the ranks it starts are its children
    (their rank in ``LOCAL_RANK``, one node)."""

    def workers(self) -> dict[int, psutil.Process]:
        if self.proc.poll() is not None:
            return {}
        found = {0: psutil.Process(self.proc.pid)}
        for child in found[0].children():
            try:
                rank = child.environ().get("LOCAL_RANK", "")
            except psutil.Error:
                continue
            if rank.isdigit() and int(rank) > 0:
                found[int(rank)] = child
        return found


def operated(job: Job, run: Path, *args: str):
    """The console's ``args`` on the job's run; one that fails (a wait timed out: the job stuck)
    fails the test with the ranks' stacks."""
    r = console(run, *args, "--timeout", "60", timeout=90)
    if r.returncode != 0:
        raise job.stuck(f"the console's {args[0]} (exit {r.returncode}: {r.stdout.strip()} {r.stderr.strip()})")
    return r


def operate(job: Job, run: Path, stacks: bool = False) -> int:
    """--checkpoint, training on, --stop; the step the checkpoint landed at. ``stacks``: also
    check, while it trains, that a job stuck would fail with both ranks' stacks (LightningJob's
    ranks found, each dumping its stack on SIGUSR2, and going on)."""
    job.until(lambda: verify_trainer(run).ok and steps(run) > 5, "rank 0 verified and training")
    assert len(job.workers()) == 2
    record, _ = read_trainer_record(run)
    assert record.world_size == 2 and record.rank == 0
    r = operated(job, run, "--checkpoint")
    assert "through .checkpoint_request.json" in r.stderr
    landed = Path(r.stdout.strip())
    assert landed.exists() and landed.parent.parent == run, r.stdout
    at = external_checkpoints(history(run).events)[0].step
    job.until(lambda: history(run).step[-1] > at + 5, "training going on after the checkpoint")
    if stacks:
        message = str(job.stuck("a check of the stacks"))
        assert message.count("Current thread") == 2 and "lightning_module.py" in message, message[-3000:]
    r = operated(job, run, "--stop")
    assert "exited cleanly" in r.stdout and "final checkpoint" in r.stdout, r.stdout
    return at


def written_once(run: Path, at: int) -> list:
    """The history: every step once, one start, one stop on the signal; the checkpoints."""
    h = history(run)
    assert np.all(np.diff(h.step) == 1), "a step written twice, or missing"
    events = [e.event for e in h.events]
    assert events.count("start") == 1 and events[-1] == "stop" and h.events[-1].data["reason"] == "signal", events
    assert [e.data["signal"] for e in h.events if e.event == "signal"] == ["checkpoint request", "SIGTERM"]
    saved = external_checkpoints(h.events)
    assert [e.reason for e in saved] == ["signal", "signal"] and saved[0].step == at
    assert saved[1].step == h.step[-1] and all(e.size > 0 for e in saved)
    return saved


def test_lightning_ddp_checkpoints_on_every_rank_and_stops_every_rank_with_exit_0(tmp_path):
    run = tmp_path / "lightning"
    with LightningJob([sys.executable, str(EXAMPLES / "lightning_module.py"), str(run), "--devices", "2", "--steps",
                       "100000000"], tmp_path / "job.out") as job:
        at = operate(job, run, stacks=True)
        assert job.wait("the fit's exit after the stop") == 0, job.output()[-4000:]
        assert not job.workers() and "Traceback" not in job.output(), job.output()[-4000:]
    saved = written_once(run, at)
    assert [Path(e.path).name for e in saved] == [f"step-{e.step}.ckpt" for e in saved]
    for e in saved:                     # whole (a torch.save zip, every member's CRC good), never unpickled
        with zipfile.ZipFile(run / e.path) as ckpt:
            assert ckpt.testzip() is None and any(n.endswith("/data.pkl") for n in ckpt.namelist())


def test_a_hugging_face_trainer_under_torchrun_checkpoints_and_stops_with_exit_0(tmp_path):
    run = tmp_path / "hf"
    with torchrun(EXAMPLES / "hf_trainer.py", str(run), "--steps", "100000000", out=tmp_path / "job.out") as job:
        at = operate(job, run)
        assert job.wait("torchrun's exit after the stop") == 0, job.output()[-4000:]
    saved = written_once(run, at)
    assert [Path(e.path).name for e in saved] == [f"checkpoint-{e.step}" for e in saved]
    for e in saved:                     # whole, and of the step it was reported at
        state = json.loads((run / e.path / "trainer_state.json").read_text())
        assert state["global_step"] == e.step and (run / e.path / "model.safetensors").stat().st_size > 0
