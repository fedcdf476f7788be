"""A Lightning fit with the run API's callback as a SLURM job (examples/slurm/lightning.sbatch on
the real cluster of tests/slurm/cluster.py), operated by a console on "another node": SLURM's SIGUSR1 stays
Lightning's save-and-requeue, the console's ``c`` checkpoints without requeueing (through the
request file) and ``s`` ends the job COMPLETED 0:0."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from rundir import read_trainer_record
from rundir.layout import STOP_REQUEUE
from rundir.slurm import query_job
from tests.slurm.test_jobs import EXAMPLES, elsewhere, job_end, job_env, job_state, start_requeued_now
from tests.trainer.trainer_runs import ROOT, events, step_lines, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("slurm")]


def test_lightning_keeps_its_requeue_and_the_console_checkpoints_and_stops_the_job(slurm, tmp_path):
    run = tmp_path / "lightning-job"
    r = subprocess.run(["sbatch", "--parsable", f"--chdir={ROOT}", f"--output={tmp_path / 'job.out'}",
                        str(EXAMPLES / "lightning.sbatch"), str(run), "--steps", "100000000"],
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
        start_requeued_now(job_id)
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


def test_a_lightning_ddp_job_of_two_tasks_checkpoints_and_ends_completed(slurm, tmp_path):
    """The same example as a job of 2 srun tasks (Lightning's SLURMEnvironment: each task a rank,
    gloo): the callback opens the run on both, the console's c lands one checkpoint through the
    request file, s (SIGTERM to the step's tasks) ends both ranks and the job COMPLETED 0:0, and
    the history holds every step once."""
    run = tmp_path / "lightning-ddp-job"
    r = subprocess.run(["sbatch", "--parsable", f"--chdir={ROOT}", f"--output={tmp_path / 'job.out'}",
                        "--ntasks-per-node=2", str(EXAMPLES / "lightning.sbatch"), str(run), "--devices", "2",
                        "--steps", "100000000"],
                       capture_output=True, text=True, timeout=60, env={**job_env(), "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stderr
    job_id = r.stdout.strip().split(";")[0]

    def output() -> str:
        return (tmp_path / "job.out").read_text(errors="replace")[-3000:] if (tmp_path / "job.out").exists() else ""
    try:
        def training() -> bool:
            record, _ = read_trainer_record(run)
            return record is not None and record.world_size == 2 and len(step_lines(run)) > 5
        wait_for(training, timeout=180, what=f"job {job_id} training on 2 ranks ({output()})")
        r = elsewhere(str(run), "--checkpoint", "--timeout", "120")
        assert r.returncode == 0, r.stderr + output()
        assert ".checkpoint_request.json" in r.stderr and Path(r.stdout.strip()).exists()
        at = events(run, "external_checkpoint")[0]["step"]
        wait_for(lambda: step_lines(run)[-1]["step"] > at + 5, timeout=60, what="training going on")
        r = elsewhere(str(run), "--stop", "--timeout", "120")
        assert r.returncode == 0, r.stderr + output()
        assert job_end(job_id) == ("COMPLETED", "0:0"), output()
    finally:
        subprocess.run(["scancel", job_id], capture_output=True)
    steps = [line["step"] for line in step_lines(run)]
    assert steps == list(range(steps[0], steps[0] + len(steps))), "a step written twice, or missing"
    saved = events(run, "external_checkpoint")
    assert [e["reason"] for e in saved] == ["signal", "signal"] and saved[-1]["step"] == steps[-1]
    assert all(e.get("world_size") == 2 for e in saved)
