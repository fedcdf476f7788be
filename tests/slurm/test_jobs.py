"""Operating a trainer that runs as a SLURM job, from a console on "another node".

The cluster is real (tests/slurm/cluster.py); the console runs in a UTS namespace of its
own with another host name, so the pid record's host is never this one and only the SLURM
path can verify and signal. Jobs that must receive nothing are batch scripts that trap and
log USR1 and TERM.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rundir import SlurmPlacement, TrainerRecord, latest_resumable, read_trainer_record, write_trainer_record
from rundir.slurm import parse_job, query_job
from tests.slurm import cluster
from tests.trainer.trainer_runs import ROOT, events, step_lines, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("slurm")]

EXAMPLES = ROOT / "examples" / "slurm"


def job_env() -> dict[str, str]:
    """sbatch's environment (the job's): this one (SLURM_CONF names the session's cluster),
    andrea-train on PATH (the examples run it), and ranks on simulated nodes (host names only
    the cluster knows) meeting over the loopback."""
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
            "GLOO_SOCKET_IFNAME": "lo"}

# The figure is 10 stop/resubmit cycles: make soak runs 10; the suite runs 4 (a cycle is
# about 6 s of a CI machine's two cores, and the first and last cycle are the ones checkpointed).
CYCLES = int(os.environ.get("SLURM_STOP_CYCLES", "4"))


def last_logged(run: Path) -> int:
    lines = step_lines(run)
    return lines[-1]["step"] if lines else 0

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


def start_requeued_now(job_id: str) -> None:
    """A requeued job is eligible two minutes later (SLURM's delay for the node's cleanup): here
    it may start as soon as it is pending again (before that, the update is refused)."""
    wait_for(lambda: job_state(job_id) == "PENDING", timeout=120, what=f"job {job_id} pending again")
    r = subprocess.run(["scontrol", "update", f"JobId={job_id}", "StartTime=now"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr


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
    from console.actions.supervise import start_trainer
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


@pytest.mark.timeout(900)      # a minute's time limit, a requeue and two runs: 90 s idle, past 300 s at a load of 9
def test_a_requeue_job_at_its_time_limit_checkpoints_and_requeued_resumes_exactly(slurm, trainer_run):
    """SLURM sends SIGTERM at the time limit (then SIGKILL after KillWait, 30 s here): the
    trainer checkpoints its last completed step within it and says how long that took. The
    job (--requeue) is then requeued (scontrol requeue, as a chain does): the same job id runs
    the same batch script again, which resumes exactly, and the stopped run reaches the bytes
    of one that never stopped. (The first run waits 50 s before it starts training, so that
    a minute's time limit leaves a short run to compare with; a restart does not wait.)"""
    from tests.trainer.trainer_runs import run_trainer

    run = trainer_run("limited")
    script = run.parent / "limited.sh"
    script.write_text(f"""#!/bin/bash
[ "${{SLURM_RESTART_COUNT:-0}}" = 0 ] && sleep 50
exec {sys.executable} -m trainer {run} --checkpoint-every 100000
""")
    script.chmod(0o755)
    r = subprocess.run(["sbatch", "--parsable", "--requeue", "--time=1", f"--chdir={ROOT}", "--open-mode=append",
                        f"--output={run / 'trainer.log'}", str(script)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    job_id = r.stdout.strip().split(";")[0]
    try:
        assert job_end(job_id, timeout=300)[0] == "TIMEOUT"
        [stop] = events(run, "stop")
        assert stop["reason"] == "signal" and stop["checkpoint_s"] < 30
        limited = latest_resumable(run)
        assert limited.status == "complete" and limited.step == last_logged(run)
        r = subprocess.run(["scontrol", "requeue", job_id], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        start_requeued_now(job_id)
        wait_for(lambda: len(events(run, "resume")) == 1 and last_logged(run) > limited.step + 20, timeout=180,
                 what="the requeued job training")
        job, _ = query_job(job_id)
        assert job.fields.get("Restarts") == "1"
        r = elsewhere(str(run), "--stop", "--timeout", "120")
        assert r.returncode == 0, r.stderr
        assert job_end(job_id) == ("COMPLETED", "0:0")
    finally:
        subprocess.run(["scancel", job_id], capture_output=True)
    [resume] = events(run, "resume")
    assert resume["from_step"] == limited.step and resume["exact"] is True
    final = latest_resumable(run)
    straight = trainer_run("straight")
    assert run_trainer(straight, "--max-steps", str(final.step), timeout=300).returncode == 0
    assert (run / final.path.name).read_bytes() == (straight / final.path.name).read_bytes()


def test_a_wrapped_job_from_another_directory_is_verified_through_its_batch_script(slurm, trainer_run, tmp_path):
    """sbatch --wrap "exec andrea-train RUN" from another working directory: the scheduler keeps
    no command for it (Command=(null)); the console reads the batch script it holds
    (scontrol write batch_script JOB -) and finds the run directory there."""
    run = trainer_run("wrapped")
    there = tmp_path / "there"
    there.mkdir()
    wrapped = f"exec {sys.executable} -m trainer {os.path.relpath(run, there)} --checkpoint-every 100000"
    r = subprocess.run(["sbatch", "--parsable", f"--chdir={there}", f"--output={there / 'out.log'}",
                        f"--wrap={wrapped}"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    job_id = r.stdout.strip().split(";")[0]
    try:
        wait_for(lambda: read_trainer_record(run)[0] is not None and last_logged(run) > 5, timeout=180,
                 what="the wrapped job training")
        job, _ = query_job(job_id)
        assert job.command in ("", "(null)") and job.work_dir == str(there)
        r = elsewhere(str(run), "--checkpoint", "--timeout", "120")
        assert r.returncode == 0 and f"through SLURM job {job_id}" in r.stderr, r.stderr
        r = elsewhere(str(run), "--stop", "--timeout", "120")
        assert r.returncode == 0, r.stderr
        assert job_end(job_id) == ("COMPLETED", "0:0")
    finally:
        subprocess.run(["scancel", job_id], capture_output=True)


def test_the_multi_node_example_on_two_nodes_checkpoints_and_stops_completed(slurm, trainer_run):
    """examples/slurm/multi-node.sbatch on two nodes (n1, n2: a slurmd each, host names of their
    own): srun starts a launcher per node; rank 0's node is recorded. The console (on this host,
    another one) verifies the job through the scheduler, requests a checkpoint through the
    shared directory, and stops the job step: each launcher passes SIGTERM on, every rank
    stops at one step, and the job ends COMPLETED 0:0."""
    run = trainer_run("two-node-job")
    r = subprocess.run(["sbatch", "--parsable", f"--partition={cluster.TWO_PARTITION}", "--nodes=2", "--gres=none",
                        f"--chdir={ROOT}", f"--output={run / 'trainer.log'}", str(EXAMPLES / "multi-node.sbatch"),
                        str(run), "1", "--checkpoint-every", "100000"], capture_output=True, text=True, timeout=60,
                       env=job_env())
    assert r.returncode == 0, r.stderr
    job_id = r.stdout.strip().split(";")[0]
    try:
        def training():
            record, _ = read_trainer_record(run)
            return record is not None and record.world_size == 2 and last_logged(run) > 5
        wait_for(training, timeout=240, what="the two-node job training")
        record, _ = read_trainer_record(run)
        assert record.host in cluster.TWO_NODES and record.slurm.node == record.host and record.slurm.step_id == "0"
        r = elsewhere(str(run), "--checkpoint", "--timeout", "120")
        assert r.returncode == 0 and "through .checkpoint_request.json" in r.stderr, r.stderr
        r = elsewhere(str(run), "--stop", "--timeout", "120")
        assert r.returncode == 0 and "exited cleanly" in r.stdout, r.stdout + r.stderr
        assert job_end(job_id) == ("COMPLETED", "0:0")
    finally:
        subprocess.run(["scancel", job_id], capture_output=True)
    log = (run / "trainer.log").read_text()
    assert log.count("SIGTERM: passed on to 1 worker on this node") == 2, log[-3000:]
    final = latest_resumable(run)
    assert final.status == "complete" and final.step == last_logged(run)
    assert [c["reason"] for c in events(run, "checkpoint")] == ["signal", "signal"]


def test_a_polish_pivot_from_another_node_resubmits_the_job(slurm, trainer_run):
    """run.toml's run.launch is an sbatch command line: the pivot audits, stops the job,
    archives, writes the policy and submits the resumed trainer as a new job, all through the
    scheduler and the shared directory."""
    from console.actions.supervise import start_trainer
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


def job_end(job_id: str, timeout: float = 120) -> tuple[str, str]:
    """The job's final state and exit code, once the scheduler says it has ended (a query that
    fails, as scontrol may on a loaded machine, is asked again; a job stays known for
    MinJobAge, 300 s, after its end)."""
    def ended():
        job, _ = query_job(job_id)
        return job if job is not None and job.state not in (
            "RUNNING", "PENDING", "COMPLETING", "CONFIGURING", "SUSPENDED", "REQUEUED") else None
    job = wait_for(ended, timeout=timeout, what=f"job {job_id}'s end")
    return job.state, job.fields.get("ExitCode", "")


def torchrun_job(run: Path, *flags: str) -> str:
    """The one-node torchrun example as a job: andrea-train --nproc 2 exec'd by the batch script."""
    r = subprocess.run(["sbatch", "--parsable", f"--chdir={ROOT}", f"--output={run / 'trainer.log'}", "--gres=none",
                        str(EXAMPLES / "one-node-torchrun.sbatch"), str(run), "2", *flags], capture_output=True,
                       text=True, timeout=60, env=job_env())
    assert r.returncode == 0, r.stderr
    return r.stdout.strip().split(";")[0]


@pytest.mark.timeout(1200)
def test_a_torchrun_job_checkpointed_stopped_and_resubmitted_ends_completed_every_time(slurm, trainer_run):
    """The one-node torchrun example (andrea-train --nproc 2, the launcher exec'd by the batch
    script), operated from another node: --checkpoint is a request rank 0 takes from the shared
    directory, --stop reaches the launcher, which passes it on; every job ends COMPLETED 0:0
    (torchrun's own exit status after a SIGTERM made them FAILED). Resubmitted CYCLES times, every
    job resumes from the last one's final checkpoint, exactly (the bytes of such a chain are
    compared with a run that never stopped in test_ddp's two-node test and the requeue test)."""
    run = trainer_run("ddp-chain")
    outcomes, stops = [], []
    for cycle in range(CYCLES):
        job_id = torchrun_job(run, "--checkpoint-every", "100000")
        try:
            seen = last_logged(run)

            def training():
                record, _ = read_trainer_record(run)
                return record is not None and record.slurm and record.slurm.job_id == job_id and \
                    record.world_size == 2 and last_logged(run) > seen + 5
            wait_for(training, timeout=240, what=f"cycle {cycle}: the torchrun job training")
            if cycle in (0, CYCLES - 1):
                r = elsewhere(str(run), "--checkpoint", "--timeout", "120")
                assert r.returncode == 0 and "through .checkpoint_request.json" in r.stderr, r.stderr
                assert f"SLURM job {job_id} verified" in r.stderr
                assert Path(r.stdout.strip()).exists()
            r = elsewhere(str(run), "--stop", "--timeout", "120")
            assert r.returncode == 0 and "exited cleanly" in r.stdout, r.stdout + r.stderr
            outcomes.append(job_end(job_id))
        finally:
            subprocess.run(["scancel", job_id], capture_output=True)
        final = latest_resumable(run)
        assert final.status == "complete" and final.step == last_logged(run), cycle
        stops.append(final.step)
    assert outcomes == [("COMPLETED", "0:0")] * CYCLES, outcomes
    resumes = events(run, "resume")
    assert [e["from_step"] for e in resumes] == stops[:-1] and all(e["exact"] for e in resumes)
    assert len([e for e in events(run, "signal") if e["signal"] == "checkpoint request"]) == 2
