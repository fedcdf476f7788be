"""``andrea-console RUN --checkpoint`` through SLURM against the same through a local pid.

One micro trainer runs as a SLURM job on this machine's one-node cluster (started as the
tests start it: root and Debian's slurm-wlm needed; without them this prints why and
measures nothing). The same command, on the same run, alternates between this host (the
pid path: verify, kill, watch the directory) and a UTS namespace with another host name
(the SLURM path: scontrol, scancel, watch the shared directory). Target (issue 12): the
SLURM path adds less than 1 s.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import Result
from rundir import read_trainer_record
from tests.slurm import cluster
from tests.trainer.trainer_runs import ROOT, make_trainer_run, step_lines, wait_for

PAIRS = 7


def _checkpoint(run: Path, elsewhere: bool) -> float:
    prefix = ["unshare", "--uts", "sh", "-c", 'hostname login-node && exec "$@"', "sh"] if elsewhere else []
    t0 = time.perf_counter()
    r = subprocess.run([*prefix, sys.executable, "-m", "console", str(run), "--checkpoint", "--timeout", "120"],
                       cwd=ROOT, capture_output=True, text=True, timeout=180)
    elapsed = time.perf_counter() - t0
    if r.returncode != 0:
        raise RuntimeError(f"--checkpoint failed: {r.stderr.strip()}")
    return elapsed


def run() -> list[Result]:
    why = cluster.missing()
    if why:
        print(f"# slurm: skipped ({why})", file=sys.stderr)
        return []
    home = cluster.start()
    job_id = None
    try:
        with tempfile.TemporaryDirectory(prefix="bench-slurm-") as tmp:
            run_dir = make_trainer_run(Path(tmp) / "run")
            script = Path(tmp) / "job.sh"
            script.write_text(f"#!/bin/bash\nexec {sys.executable} -m trainer {run_dir} --checkpoint-every 100000 "
                              "--keep-last 2\n")
            script.chmod(0o755)
            job_id = subprocess.run(["sbatch", "--parsable", f"--chdir={ROOT}", "-o", f"{script}.out",
                                     str(script)], capture_output=True, text=True, check=True).stdout.strip()
            wait_for(lambda: (read_trainer_record(run_dir)[0] is not None and len(step_lines(run_dir)) > 20),
                     timeout=180, what="the job training")
            local, through = [], []
            _checkpoint(run_dir, False)                     # warm-up, untimed
            for _ in range(PAIRS):
                local.append(_checkpoint(run_dir, False))
                through.append(_checkpoint(run_dir, True))
    finally:
        if job_id:
            subprocess.run(["scancel", job_id], capture_output=True)
        cluster.stop(home)
    base, ours = statistics.median(local), statistics.median(through)
    added = statistics.median(t - s for s, t in zip(local, through))
    return [Result("slurm", "--checkpoint through SLURM (scontrol, scancel)", ours, "s", base,
                   "through the local pid", ours / base, "< 1 s added", added < 1.0),
            Result("slurm", "time the SLURM path adds to --checkpoint", added, "s", target="< 1 s", met=added < 1.0)]
