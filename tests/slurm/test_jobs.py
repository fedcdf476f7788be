"""Operating a trainer that runs as a SLURM job, from a console on "another node".

The cluster is real (tests/slurm/cluster.py); the console runs in a UTS namespace of its
own with another host name, so the pid record's host is never this one and only the SLURM
path can verify and signal. Jobs that must receive nothing are batch scripts that trap and
log USR1 and TERM.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rundir import SlurmPlacement, TrainerRecord, latest_resumable, read_trainer_record, write_trainer_record
from rundir.slurm import parse_job, query_job
from tests.trainer.trainer_runs import ROOT, step_lines, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("slurm")]

TRAP = """#!/bin/bash
trap 'echo got USR1 >> {log}' USR1
trap 'echo got TERM >> {log}; exit 0' TERM
echo ready >> {log}
while true; do sleep 0.2; done
"""


def submit(script: Path, body: str, *sbatch: str, chdir: Path = ROOT) -> str:
    script.write_text(body)
    script.chmod(0o755)
    r = subprocess.run(["sbatch", "--parsable", f"--chdir={chdir}", "-o", f"{script}.out", "-J", script.stem,
                        *sbatch, str(script)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip().split(";")[0]


def job_state(job_id: str) -> str:
    job, _ = query_job(job_id)
    return job.state if job else "GONE"


def elsewhere(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """``andrea-console ARGS`` in a UTS namespace whose host name is not this one."""
    return subprocess.run(["unshare", "--uts", "sh", "-c", 'hostname login-node && exec "$@"', "sh", sys.executable,
                           "-m", "console", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def training_job(trainer_run, name: str, launch: str) -> tuple[Path, str]:
    """A micro trainer as a job: ``launch`` is ``exec`` (the batch script becomes the trainer)
    or ``srun`` (a job step)."""
    run = trainer_run(name)
    cmd = f"{sys.executable} -m trainer {run} --checkpoint-every 100000"
    body = f"#!/bin/bash\n{'exec ' + cmd if launch == 'exec' else 'srun --ntasks=1 ' + cmd}\n"
    job_id = submit(run.parent / f"{name}.sh", body)

    def recorded():
        record, _ = read_trainer_record(run)
        return record is not None and record.slurm is not None and record.slurm.job_id == job_id and \
            len(step_lines(run)) > 5
    wait_for(recorded, timeout=180, what=f"job {job_id} training")
    return run, job_id


@pytest.mark.parametrize("launch, step", [("exec", "batch"), ("srun", "0")])
def test_checkpoint_and_stop_a_job_from_another_node(slurm, trainer_run, launch, step):
    run, job_id = training_job(trainer_run, f"job-{launch}", launch)
    record, _ = read_trainer_record(run)
    assert record.slurm.step_id == step and record.slurm.node == socket.gethostname()
    try:
        once = elsewhere(str(run), "--json", timeout=60)
        trainer = __import__("json").loads(once.stdout)["trainer"]
        assert trainer["state"] == "running" and trainer["slurm"]["state"] == "RUNNING", once.stdout
        before = latest_resumable(run)
        r = elsewhere(str(run), "--checkpoint", "--timeout", "120")
        assert r.returncode == 0, r.stderr
        assert f"through SLURM job {job_id}" in r.stderr
        landed = Path(r.stdout.strip())
        assert landed.exists() and (before is None or landed.name != before.path.name)
        r = elsewhere(str(run), "--stop", "--timeout", "120")
        assert r.returncode == 0, r.stderr
        wait_for(lambda: job_state(job_id) in ("COMPLETED", "FAILED", "CANCELLED", "GONE"), timeout=60,
                 what="the job's end")
        job, _ = query_job(job_id)
        assert job is None or (job.state == "COMPLETED" and job.fields.get("ExitCode") == "0:0"), job
        final = latest_resumable(run)
        assert final.step == step_lines(run)[-1]["step"]         # the last logged step, nothing lost
    finally:
        subprocess.run(["scancel", job_id], capture_output=True)


def forged(run: Path, job_id: str, node: str | None = None) -> None:
    write_trainer_record(run, TrainerRecord(
        pid=4242, create_time=1.0, host="compute-1", argv=["andrea-train", str(run)], started=1.0,
        slurm=SlurmPlacement(job_id=job_id, step_id="batch", node=node or socket.gethostname(),
                             cluster="local", job_name="x", user="root")))


@pytest.mark.parametrize("case, why", [
    ("not-naming", "do not name this run directory"),
    ("other-node", "not on the recorded node"),
    ("finished", "not RUNNING"),
])
def test_a_record_naming_the_wrong_job_is_refused_and_nothing_is_signalled(slurm, tmp_path, case, why):
    run = tmp_path / "run"
    run.mkdir()
    elsewhere_dir = tmp_path / "elsewhere"
    elsewhere_dir.mkdir()
    log = tmp_path / "trap.log"
    if case == "finished":
        job_id = submit(tmp_path / "done.sh", "#!/bin/bash\ntrue\n", chdir=elsewhere_dir)
        wait_for(lambda: job_state(job_id) in ("COMPLETED", "GONE"), timeout=120, what="the job's end")
    else:
        job_id = submit(tmp_path / "trap.sh", TRAP.format(log=log), chdir=elsewhere_dir)
        wait_for(lambda: log.exists() and "ready" in log.read_text(), timeout=120, what="the trap job")
    try:
        forged(run, job_id, node="node-99" if case == "other-node" else None)
        for flag in ("--checkpoint", "--stop"):
            r = elsewhere(str(run), flag, "--timeout", "5", timeout=60)
            assert r.returncode == 1 and why in r.stderr, r.stderr
            assert r.stderr.count("\n") == 1
        if case != "finished":
            time.sleep(1)
            assert log.read_text().splitlines() == ["ready"]          # nothing reached it
            assert job_state(job_id) == "RUNNING"
    finally:
        subprocess.run(["scancel", job_id], capture_output=True)


def test_parse_job_reads_a_real_scontrol_line(slurm, tmp_path):
    job_id = submit(tmp_path / "p.sh", "#!/bin/bash\nsleep 30\n", chdir=tmp_path)
    try:
        wait_for(lambda: job_state(job_id) == "RUNNING", timeout=120, what="the job running")
        line = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True).stdout
        job = parse_job(line)
        assert job.job_id == job_id and job.uid == os.getuid() and job.work_dir == str(tmp_path)
        assert job.command == str(tmp_path / "p.sh") and job.nodes == socket.gethostname()
    finally:
        subprocess.run(["scancel", job_id], capture_output=True)


def test_a_submitted_job_stopped_and_resubmitted_resumes_exactly(slurm, trainer_run):
    """What --start --slurm submits (sbatch --wrap, the batch step exec-ing the trainer); a
    chain of jobs, each resuming the newest complete checkpoint, reaches the bytes of a run
    that never stopped."""
    from console.supervise import start_trainer
    from tests.trainer.trainer_runs import run_trainer

    steps = ("--max-steps", "1500", "--checkpoint-every", "500")
    straight = trainer_run("straight")
    assert run_trainer(straight, *steps, timeout=600).returncode == 0
    run = trainer_run("chained")
    first = start_trainer(run, extra_args=steps, sbatch_args=[])
    try:
        assert first.child is None and first.job_id
        job, _ = query_job(first.job_id)
        assert job.fields.get("JobName") == f"andrea:{run.name}" and job.work_dir == str(run.resolve())
        wait_for(lambda: len(step_lines(run)) > 50, timeout=180, what="the first job training")
        r = elsewhere(str(run), "--stop", "--timeout", "120")
        assert r.returncode == 0, r.stderr
        stopped_at = latest_resumable(run).step
        assert stopped_at < 1500
        second = start_trainer(run, extra_args=steps, sbatch_args=[])
        wait_for(lambda: job_state(second.job_id) in ("COMPLETED", "GONE"), timeout=600, what="the second job")
    finally:
        subprocess.run(["scancel", first.job_id], capture_output=True)
    resume = [e for e in __import__("tests.trainer.trainer_runs", fromlist=["events"]).events(run, "resume")]
    assert resume[-1]["from_step"] == stopped_at and resume[-1]["exact"] is True
    name = "step_001500.bin"
    assert (run / name).read_bytes() == (straight / name).read_bytes()


def test_a_job_at_its_time_limit_ends_with_a_complete_final_checkpoint(slurm, trainer_run):
    """SLURM sends SIGTERM at the time limit (then SIGKILL after KillWait, 30 s here): the
    trainer checkpoints its last completed step within it and says how long that took."""
    from console.supervise import start_trainer
    from tests.trainer.trainer_runs import events

    run = trainer_run("limited")
    launch = start_trainer(run, extra_args=("--checkpoint-every", "100000"), sbatch_args=["--time=1"])
    try:
        wait_for(lambda: job_state(launch.job_id) in ("TIMEOUT", "COMPLETED", "FAILED", "CANCELLED", "GONE"), timeout=300,
                 what="the job to reach its time limit")
        assert job_state(launch.job_id) in ("TIMEOUT", "GONE")
    finally:
        subprocess.run(["scancel", launch.job_id], capture_output=True)
    [stop] = events(run, "stop")
    assert stop["reason"] == "signal" and stop["checkpoint_s"] < 30
    final = latest_resumable(run)
    assert final.status == "complete" and final.step == step_lines(run)[-1]["step"]


def test_a_checkpoint_request_to_a_torchrun_job_is_refused_and_a_stop_goes_through(slurm, tmp_path):
    """No scancel form reaches torchrun's workers: the console says so instead of sending a
    SIGUSR1 that would never arrive. SIGTERM is forwarded by torchrun's agent."""
    run = tmp_path / "run"
    run.mkdir()
    log = tmp_path / "trap.log"
    job_id = submit(tmp_path / "ddp.sh", TRAP.format(log=log), chdir=run)      # its working directory is the run
    wait_for(lambda: log.exists() and "ready" in log.read_text(), timeout=120, what="the job")
    try:
        forged(run, job_id)
        record, _ = read_trainer_record(run)
        write_trainer_record(run, dataclasses.replace(record, rank=0, world_size=2))
        r = elsewhere(str(run), "--checkpoint", "--timeout", "5", timeout=60)
        assert r.returncode == 1 and "cannot reach the 2 torchrun workers" in r.stderr, r.stderr
        time.sleep(1)
        assert log.read_text().splitlines() == ["ready"]
        r = elsewhere(str(run), "--stop", "--timeout", "30", timeout=90)
        assert f"SIGTERM sent to trainer pid 4242 on compute-1, through SLURM job {job_id}" in r.stderr, r.stderr
        wait_for(lambda: "got TERM" in log.read_text(), timeout=30, what="the TERM trap")
    finally:
        subprocess.run(["scancel", job_id], capture_output=True)


def test_a_polish_pivot_from_another_node_resubmits_the_job(slurm, trainer_run):
    """run.toml's run.launch is an sbatch command line: the pivot audits, stops the job,
    archives, writes the policy and submits the resumed trainer as a new job, all through the
    scheduler and the shared directory."""
    from console.supervise import start_trainer
    from rundir import load_run_config, write_run_config
    from tests.trainer.trainer_runs import events

    run = trainer_run("pivoted")
    script = run.parent / "pivoted.sh"
    script.write_text(f'#!/bin/bash\nexec {sys.executable} -m trainer "$@"\n')
    script.chmod(0o755)
    config = load_run_config(run)
    config.run.launch = ["sbatch", f"--chdir={ROOT}", f"--output={run / 'trainer.log'}", "--open-mode=append",
                         str(script), "{run_dir}", "--checkpoint-every", "100000"]
    write_run_config(run, config)
    first = start_trainer(run)
    jobs = [first.job_id]
    try:
        wait_for(lambda: (read_trainer_record(run)[0] is not None and len(step_lines(run)) > 20), timeout=180,
                 what="the first job training")
        r = elsewhere(str(run), "--pivot", "--cap", "prose=0.6", "--yes", "--timeout", "180")
        assert r.returncode == 0, r.stdout + r.stderr
        record, _ = read_trainer_record(run)
        jobs.append(record.slurm.job_id)
        assert jobs[1] != jobs[0] and job_state(jobs[1]) == "RUNNING"
        [pivot] = events(run, "pivot")
        assert pivot["policy"]["caps"]["prose"] == 0.6
        assert events(run, "resume")[-1]["fresh_bandit"] is True
    finally:
        for job_id in jobs:
            subprocess.run(["scancel", job_id], capture_output=True)


def test_a_torchrun_job_of_two_processes_stops_from_another_node(slurm, trainer_run):
    """andrea-train --nproc 2 as the batch script's process (torchrun's agent and two
    workers): the stop reaches the agent, which forwards it; the ranks agree on one final
    checkpoint at the last logged step. torchrun itself then exits 1 (its own status after a
    SIGTERM), so SLURM reports the job FAILED although every worker exited 0."""
    run = trainer_run("ddp-job")
    body = f"#!/bin/bash\nexec {sys.executable} -m trainer {run} --nproc 2 --checkpoint-every 100000\n"
    job_id = submit(run.parent / "ddp-job.sh", body)
    try:
        def recorded():
            record, _ = read_trainer_record(run)
            return record is not None and record.world_size == 2 and len(step_lines(run)) > 5
        wait_for(recorded, timeout=240, what="the torchrun job training")
        r = elsewhere(str(run), "--stop", "--timeout", "120")
        assert r.returncode == 0, r.stderr
        assert "exited cleanly" in r.stdout
        wait_for(lambda: job_state(job_id) in ("COMPLETED", "FAILED", "GONE"), timeout=120, what="the job's end")
        final = latest_resumable(run)
        assert final.status == "complete" and final.step == step_lines(run)[-1]["step"]
    finally:
        subprocess.run(["scancel", job_id], capture_output=True)
