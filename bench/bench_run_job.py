"""The run API on a job of several processes (rundir/job.py): what the agreed decision costs a
step, and how much later the console's checkpoint-now lands on a 2-process job than on a
1-process one.

**The decision's cost.** One ``torchrun --standalone --nproc_per_node 2`` job (gloo, CPU, one
thread per process) trains a tiny DDP model (32-64-1, batch 32 per rank) on the run API, in
alternate chunks of ``CHUNK`` steps: with ``run.log`` and its checks of
``checkpoint_requested`` and ``stop_requested`` each step (the history line on rank 0, and the
agreement: the all-reduce the previous ``run.log`` started waited for, the next one started),
and without the run API at all. The per-step difference between the two kinds of chunk
(the median over ``PAIRS`` pairs) is what the run API costs a step of a real loop, the
agreement and its waits included, the history line too (so an upper bound of the
agreement's); against the bare step, reported (on a loaded machine the pairs' differences
swing by more than a millisecond either way). The agreement's own time is also measured
inside it on rank 0 (the wait for the all-reduce the previous point started, the answer
applied, the next one started), per step: target (issue 43) <= 1% of a step.

**Checkpoint now.** ``examples/ddp_loop.py`` under torchrun with 2 processes and with 1 (the
same script and launcher), side by side; ``andrea-console RUN --checkpoint`` alternates between
them (to the 1-process job a verified SIGUSR1, to the 2-process job ``.checkpoint_request.json``
that rank 0 takes and the ranks agree on, every rank writing its part). The time is the
console's wall time, from its start to the checkpoint it prints. Target: the 2-process job's
median <= 1.5x the 1-process job's.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import Result

ROOT = Path(__file__).resolve().parents[1]
CHUNK = 200
PAIRS = 25
WARMUP = 200
CHECKPOINT_PAIRS = 7


def _worker(run_dir: Path, out_json: Path) -> None:
    """One process of the decision's job."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    import rundir

    dist.init_process_group("gloo")
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(),
                                                        torch.nn.Linear(64, 1)))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, order = torch.randn(4096, 32), torch.Generator().manual_seed(dist.get_rank())
    y = x.sin().sum(1, keepdim=True)
    step = 0

    def chunk(run: "rundir.Run", api: bool) -> float:
        nonlocal step
        t0 = time.perf_counter()
        for _ in range(CHUNK):
            step += 1
            batch = torch.randint(0, len(x), (32,), generator=order)
            loss = torch.nn.functional.mse_loss(model(x[batch]), y[batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            value = loss.item()
            if api:
                run.log(step, loss=value, lr=1e-3)
                if run.checkpoint_requested or run.stop_requested:
                    raise RuntimeError("nothing asks this job for a checkpoint or a stop")
        return (time.perf_counter() - t0) / CHUNK

    inside = [0.0]

    def timed(agree: Any) -> Any:
        def wrapper() -> None:
            t0 = time.perf_counter()
            agree()
            inside[0] += time.perf_counter() - t0
        return wrapper

    try:
        with rundir.open_run(run_dir) as run:
            run._agree = timed(run._agree)      # type: ignore[method-assign]  (the agreement's own time)
            for _ in range(WARMUP // CHUNK):
                chunk(run, True)
            plain, more = [], []
            for i in range(PAIRS):
                dist.barrier()                  # start each pair together
                first = i % 2 == 0
                a, b = chunk(run, first), chunk(run, not first)
                more.append(a if first else b)
                plain.append(b if first else a)
            if run.is_owner:
                calls = (WARMUP // CHUNK + PAIRS) * CHUNK
                out_json.write_text(json.dumps({"plain": plain, "more": more, "agree": inside[0] / calls}))
    finally:
        dist.destroy_process_group()


def _decision(tmp: Path) -> list[Result]:
    out_json = tmp / "decision.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m",
           "bench.bench_run_job", "--worker", str(tmp / "decision"), str(out_json)]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600,
                       env={**os.environ, "OMP_NUM_THREADS": "1"})
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{r.stderr[-3000:]}")
    data = json.loads(out_json.read_text())
    step = statistics.median(data["plain"])
    cost = statistics.median(m - p for p, m in zip(data["plain"], data["more"]))
    share = cost / step
    agree = data["agree"]
    return [Result("run_job", "run.log with the agreed decision, per step, 2 gloo processes, tiny DDP model",
                   cost * 1e6, "us", step * 1e6, "the bare step", share, "report"),
            Result("run_job", "inside the agreement (the previous all-reduce waited for, the next started), rank 0",
                   agree * 1e6, "us", step * 1e6, "the bare step", agree / step, "<= 1% of a step",
                   agree / step <= 0.01)]


def _job(run_dir: Path, nproc: int, out: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone",
                             f"--nproc_per_node={nproc}", str(ROOT / "examples" / "ddp_loop.py"), str(run_dir),
                             "--steps", "1000000000"], cwd=ROOT, stdout=open(out, "wb"), stderr=subprocess.STDOUT,
                            env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)},
                            start_new_session=True)


def _checkpoint(run_dir: Path) -> float:
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "console", str(run_dir), "--checkpoint", "--timeout", "120"], cwd=ROOT,
                       capture_output=True, text=True, timeout=180)
    if r.returncode != 0:
        raise RuntimeError(f"--checkpoint failed: {r.stderr.strip()}")
    return time.perf_counter() - t0


def _training(run_dir: Path, world_size: int, timeout: float = 240) -> None:
    from rundir import read_trainer_record

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        record, _ = read_trainer_record(run_dir)
        if record is not None and (record.world_size or 1) == world_size and (run_dir / ".loss.json").exists() \
                and (run_dir / ".loss.json").stat().st_size > 2000:
            return
        time.sleep(0.2)
    raise RuntimeError(f"{run_dir.name} did not start training in {timeout:.0f} s")


def _checkpoint_now(tmp: Path) -> list[Result]:
    one, two = tmp / "one", tmp / "two"
    jobs = [_job(one, 1, tmp / "one.out"), _job(two, 2, tmp / "two.out")]
    try:
        _training(one, 1)
        _training(two, 2)
        _checkpoint(one)                        # warm-up, untimed
        _checkpoint(two)
        ones, twos = [], []
        for _ in range(CHECKPOINT_PAIRS):
            ones.append(_checkpoint(one))
            twos.append(_checkpoint(two))
    finally:
        for job in jobs:
            job.terminate()                     # torchrun passes SIGTERM on: a clean stop
        for job in jobs:
            try:
                job.wait(timeout=120)
            except subprocess.TimeoutExpired:
                job.kill()
    base, ours = statistics.median(ones), statistics.median(twos)
    return [Result("run_job", "--checkpoint to a 2-process run API job (examples/ddp_loop.py), to landing", ours, "s",
                   base, "to the same loop as 1 process", ours / base, "<= 1.5x", ours / base <= 1.5)]


def run() -> list[Result]:
    with tempfile.TemporaryDirectory(prefix="bench-run-job-", dir=os.environ.get("ANDREA_BENCH_DIR")) as tmp:
        return [*_decision(Path(tmp)), *_checkpoint_now(Path(tmp))]


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        _worker(Path(sys.argv[2]), Path(sys.argv[3]))
    else:
        from bench.common import print_table
        print_table(run())
