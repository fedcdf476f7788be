"""A Lightning fit with the run API's callback as a SLURM job (the real cluster of
tests/slurm/cluster.py), operated by a console on "another node": SLURM's SIGUSR1 stays
Lightning's save-and-requeue, the console's ``c`` checkpoints without requeueing (through the
request file) and ``s`` ends the job COMPLETED 0:0."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rundir import read_trainer_record
from rundir.layout import STOP_REQUEUE
from rundir.slurm import query_job
from tests.slurm.test_jobs import elsewhere, job_end, job_env, job_state
from tests.trainer.trainer_runs import ROOT, events, step_lines, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("slurm")]

FIT = '''
import sys, time
import lightning as L
import torch
from rundir.integrations.lightning import RundirCallback

class Tiny(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(8, 1)
    def training_step(self, batch, batch_idx):
        time.sleep(0.02)                    # a step of some length: a history of modest size
        return self.net(batch[0]).pow(2).mean()
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)

torch.set_num_threads(1)
run_dir = sys.argv[1]
data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(256, 8)), batch_size=8)
L.Trainer(max_steps=1_000_000, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
          enable_progress_bar=False, enable_model_summary=False, default_root_dir=f"{run_dir}/lightning",
          callbacks=[RundirCallback(run_dir)]).fit(Tiny(), data)
'''


def test_lightning_keeps_its_requeue_and_the_console_checkpoints_and_stops_the_job(slurm, tmp_path):
    run = tmp_path / "lightning-job"
    script = tmp_path / "fit.py"
    script.write_text(FIT)
    batch = tmp_path / "fit.sh"
    batch.write_text(f"#!/bin/bash\nsrun {sys.executable} {script} {run}\n")
    batch.chmod(0o755)
    r = subprocess.run(["sbatch", "--parsable", "--requeue", "--ntasks-per-node=1", f"--chdir={ROOT}",
                        "--open-mode=append", f"--output={tmp_path / 'job.out'}", str(batch)],
                       capture_output=True, text=True, timeout=60, env={**job_env(), "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stderr
    job_id = r.stdout.strip().split(";")[0]

    def output() -> str:
        return (tmp_path / "job.out").read_text(errors="replace")[-3000:] if (tmp_path / "job.out").exists() else ""

    def training(after: int = 0) -> bool:
        record, _ = read_trainer_record(run)
        lines = step_lines(run) if record is not None else []
        return record is not None and record.slurm is not None and record.slurm.job_id == job_id and \
            len(lines) > 5 and lines[-1]["step"] > after
    try:
        wait_for(training, timeout=180, what=f"job {job_id} training ({output()})")
        record, _ = read_trainer_record(run)
        assert record.checkpoint_requests == "file" and record.slurm.step_id == "0"

        # c: a checkpoint through the request file; Lightning's requeue is not touched.
        r = elsewhere(str(run), "--checkpoint", "--timeout", "120")
        assert r.returncode == 0, r.stderr + output()
        assert ".checkpoint_request.json" in r.stderr
        saved = Path(r.stdout.strip())
        assert saved.exists() and saved.parent == run / "checkpoints"
        assert job_state(job_id) == "RUNNING" and not list((run / "lightning").glob("hpc_ckpt_*"))
        assert query_job(job_id)[0].fields.get("Restarts") == "0"

        # SLURM's SIGUSR1 (what --signal=USR1@90 sends every step): Lightning saves and requeues.
        r = subprocess.run(["scancel", "--signal=USR1", job_id], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        wait_for(lambda: query_job(job_id)[0].fields.get("Restarts") == "1", timeout=60,
                 what=f"Lightning's requeue ({output()})")
        hpc = run / "lightning" / "hpc_ckpt_1.ckpt"
        assert hpc.exists()
        wait_for(lambda: events(run, "stop"), timeout=60, what="the requeued job's stop")
        # A requeued job is eligible two minutes later (SLURM's delay for the node's cleanup):
        # here it may start now.
        subprocess.run(["scontrol", "update", f"JobId={job_id}", "StartTime=now"], capture_output=True, timeout=60)
        [stop] = events(run, "stop")
        assert stop["reason"] == STOP_REQUEUE
        reported = [e["path"] for e in events(run, "external_checkpoint")]
        assert "lightning/hpc_ckpt_1.ckpt" in reported, reported
        wait_for(lambda: events(run, "resume") and training(stop["step"]), timeout=180,
                 what=f"the requeued job resuming ({output()})")
        [resume] = events(run, "resume")
        assert resume["checkpoint"] == "lightning/hpc_ckpt_1.ckpt"
        once = elsewhere(str(run), "--json", timeout=60)
        assert json.loads(once.stdout)["trainer"]["state"] == "running", once.stdout

        # s: the stop ends the job COMPLETED 0:0, with its final checkpoint.
        r = elsewhere(str(run), "--stop", "--timeout", "120")
        assert r.returncode == 0, r.stderr + output()
        assert "final checkpoint checkpoints/" in r.stdout, r.stdout
        assert job_end(job_id) == ("COMPLETED", "0:0")
        assert events(run, "stop")[-1]["reason"] == "signal"
    finally:
        subprocess.run(["scancel", job_id], capture_output=True)
