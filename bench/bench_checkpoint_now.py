"""``andrea-console RUN --checkpoint`` to a 2-process torchrun job against the same to a plain
trainer, on this host and through SLURM, in the same run.

Locally, a plain micro trainer and ``andrea-train --nproc 2`` (the launcher and its two
workers) train side by side; ``--checkpoint`` alternates between them: to the plain one it is
a verified SIGUSR1, to the torchrun one a ``.checkpoint_request.json`` that rank 0 takes at a
step boundary (at most every 0.1 s) and the ranks agree on. Through SLURM (this machine's
cluster, as the tests start it; root and Debian's slurm-wlm needed, else that half is
skipped and says why), the same two trainers run as jobs and the console runs in a UTS
namespace with another host name: scontrol and scancel for the plain job, the scheduler's
check and the request for the torchrun job. The time is the console's wall time, from its
start to the new complete checkpoint it prints. Target (issue 26): the torchrun job's
checkpoint lands no more than 1 s later than the plain trainer's (the median of the per-pair
differences).
"""

from __future__ import annotations

import os
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
ELSEWHERE = ["unshare", "--uts", "sh", "-c", 'hostname login-node && exec "$@"', "sh"]
TRAIN = ("--checkpoint-every", "100000", "--keep-last", "2")


def _checkpoint(run: Path, elsewhere: bool) -> float:
    t0 = time.perf_counter()
    r = subprocess.run([*(ELSEWHERE if elsewhere else []), sys.executable, "-m", "console", str(run), "--checkpoint",
                        "--timeout", "120"], cwd=ROOT, capture_output=True, text=True, timeout=180)
    elapsed = time.perf_counter() - t0
    if r.returncode != 0:
        raise RuntimeError(f"--checkpoint failed: {r.stderr.strip()}")
    return elapsed


def _training(run: Path, world_size: int) -> None:
    def ready() -> bool:
        record, _ = read_trainer_record(run)
        return record is not None and (record.world_size or 1) == world_size and len(step_lines(run)) > 20
    wait_for(ready, timeout=240, what=f"{run.name} training")


def _pairs(plain: Path, ddp: Path, elsewhere: bool) -> tuple[list[float], list[float]]:
    _checkpoint(plain, elsewhere)                  # warm-up, untimed
    _checkpoint(ddp, elsewhere)
    ones, twos = [], []
    for _ in range(PAIRS):
        ones.append(_checkpoint(plain, elsewhere))
        twos.append(_checkpoint(ddp, elsewhere))
    return ones, twos


def _results(where: str, ones: list[float], twos: list[float]) -> list[Result]:
    added = statistics.median(t - o for o, t in zip(ones, twos))
    base, ours = statistics.median(ones), statistics.median(twos)
    return [Result("checkpoint_now", f"--checkpoint to a 2-process torchrun job, {where}", ours, "s", base,
                   "to a plain trainer", ours / base, "<= 1 s added", added <= 1.0),
            Result("checkpoint_now", f"time a 2-process job adds to --checkpoint, {where}", added, "s",
                   target="<= 1 s", met=added <= 1.0)]


def _local(tmp: Path) -> list[Result]:
    plain, ddp = make_trainer_run(tmp / "plain"), make_trainer_run(tmp / "ddp")
    procs = [subprocess.Popen([sys.executable, "-m", "trainer", str(plain), *TRAIN], cwd=ROOT,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
             subprocess.Popen([sys.executable, "-m", "trainer", str(ddp), "--nproc", "2", *TRAIN], cwd=ROOT,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    try:
        _training(plain, 1)
        _training(ddp, 2)
        ones, twos = _pairs(plain, ddp, elsewhere=False)
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=120)
    return _results("on this host", ones, twos)


def _submit(run: Path, *trainer_flags: str) -> str:
    script = run.parent / f"{run.name}.sh"
    script.write_text(f"#!/bin/bash\nexec {sys.executable} -m trainer {run} {' '.join(trainer_flags)}\n")
    script.chmod(0o755)
    r = subprocess.run(["sbatch", "--parsable", f"--chdir={ROOT}", f"--output={run / 'trainer.log'}", str(script)],
                       capture_output=True, text=True, check=True,
                       env={**os.environ, "GLOO_SOCKET_IFNAME": "lo"})
    return r.stdout.strip().split(";")[0]


def _through_slurm(tmp: Path) -> list[Result]:
    why = cluster.missing()
    if why:
        print(f"# checkpoint_now: the SLURM half skipped ({why})", file=sys.stderr)
        return []
    home = cluster.start()
    jobs: list[str] = []
    try:
        plain, ddp = make_trainer_run(tmp / "job-plain"), make_trainer_run(tmp / "job-ddp")
        jobs = [_submit(plain, *TRAIN), _submit(ddp, "--nproc", "2", *TRAIN)]
        _training(plain, 1)
        _training(ddp, 2)
        ones, twos = _pairs(plain, ddp, elsewhere=True)
    finally:
        for job_id in jobs:
            subprocess.run(["scancel", job_id], capture_output=True)
        cluster.stop(home)
    return _results("through SLURM", ones, twos)


def run() -> list[Result]:
    with tempfile.TemporaryDirectory(prefix="bench-checkpoint-now-", dir=os.environ.get("ANDREA_BENCH_DIR")) as tmp:
        return [*_local(Path(tmp)), *_through_slurm(Path(tmp))]


if __name__ == "__main__":
    from bench.common import print_table
    print_table(run())
