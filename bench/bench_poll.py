"""Following a run where change events cannot be trusted (a shared filesystem): what polling costs.

- one console's watcher polling a live run (a writer appends a step line every 50 ms): its
  thread's CPU seconds over the wall seconds it ran, i.e. the share of a core (target <= 1%);
- the overview's rescan of 100 runs, every history grown since the last scan (every run
  live, the worst case), at one scan per REFRESH_S: the share of a core (target <= 5%);
- the step the dashboard shows against the step the file holds, through a FUSE mount of
  the run directory (bindfs, as a login node sees a compute node's writes; needs bindfs and
  /dev/fuse): the largest and the median lag over the run (target: the largest <= 2 s);
- the newest checkpoint the dashboard shows through sshfs with its default options (listings
  cached for 20 s), a real trainer checkpointing every second or two with keep_last 2: how
  late each checkpoint is shown after its ``checkpoint`` event, the largest and the median
  (target: the largest <= 3 s; needs sshfs and sshd, run as root).

``python -m bench poll``.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.common import Result

ROOT = Path(__file__).resolve().parents[1]
WATCH_S = 8.0
LAG_S = 12.0
CKPT_S = 40.0         # watching a trainer that checkpoints every second or two through sshfs
RUNS = 100

# A stand-in trainer: one step line every 50 ms, its time the wall clock, until killed.
WRITER = """
import json, sys, time
path, step = sys.argv[1], int(sys.argv[2])
with open(path, "a", buffering=1) as f:
    while True:
        step += 1
        f.write(json.dumps({"step": step, "loss": 2.0, "lr": 1e-3, "grad_norm": 1.0, "arm": "a",
                            "tokens": step * 512, "time": time.time()}) + "\\n")
        time.sleep(0.05)
"""


def _writer(run: Path) -> subprocess.Popen:
    from rundir.history import read_history_tail

    last = read_history_tail(run / ".loss.json").step
    return subprocess.Popen([sys.executable, "-c", WRITER, str(run / ".loss.json"), str(int(last[-1]))])


def watcher_share(tmp: Path) -> Result:
    from console.read.watcher import watch_run
    from tests.rundirs import make_run

    run = make_run(tmp / "watched", steps=1000)
    writer = _writer(run)
    stop, posted, cpu = threading.Event(), [], []

    def follow() -> None:
        start = time.thread_time()
        watch_run(run, posted.append, stop, poll=True)
        cpu.append(time.thread_time() - start)

    thread = threading.Thread(target=follow)
    try:
        started = time.perf_counter()
        thread.start()
        time.sleep(WATCH_S)
        stop.set()
        thread.join()
        wall = time.perf_counter() - started
    finally:
        writer.kill()
        writer.wait()
    share = cpu[0] / wall
    return Result("poll", "watcher polling a live run: its thread's cpu / wall "
                          f"({len(posted)} changes in {wall:.0f} s)",
                  100 * share, "% of a core", target="<= 1%", met=share <= 0.01)


def overview_share(tmp: Path) -> Result:
    from console.read.run_summary import RunsSummarizer
    from console.read.runs_watcher import REFRESH_S
    from rundir import verify_trainer
    from tests.rundirs import make_run

    root = tmp / "runs"
    runs = [make_run(root / f"run-{i:03d}", steps=2000, checkpoints=(1000, 2000), n_params=64, seed=i)
            for i in range(RUNS)]
    summarizer = RunsSummarizer(root, verify_trainer, None)
    summarizer.scan()
    times = []
    for step in range(2001, 2006):
        for run in runs:                  # every run grew since the last scan
            with open(run / ".loss.json", "a") as f:
                f.write(f'{{"step": {step}, "loss": 2.0, "lr": 0.001, "grad_norm": 1.0, "arm": "a", '
                        f'"tokens": {step * 512}, "time": {time.time()}}}\n')
        start = time.process_time()
        summarizer.scan()
        times.append(time.process_time() - start)
    scan = statistics.median(times)
    share = scan / REFRESH_S
    return Result("poll", f"overview rescanning {RUNS} runs, all grown: a scan's cpu / {REFRESH_S:g} s between scans",
                  100 * share, "% of a core", target="<= 5%", met=share <= 0.05)


async def _shown_steps(run: Path, seconds: float) -> list[tuple[float, int]]:
    """(wall time, step shown) for every snapshot of a headless dashboard on ``run``."""
    from console.tui.app import ConsoleApp

    shown: list[tuple[float, int]] = []

    class Recording(ConsoleApp):
        def on_snapshot_ready(self, message) -> None:
            super().on_snapshot_ready(message)
            step = message.snapshot.history.last_step
            if step is not None:
                shown.append((time.time(), step))

    app = Recording(run, tick=2.0)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause(seconds)
    return shown


def fuse_lag(tmp: Path) -> list[Result]:
    from rundir.history import LossHistory
    from tests.mounts import bindfs, fuse_missing
    from tests.rundirs import make_run

    missing = fuse_missing()
    if missing:
        return [Result("poll", f"step shown through a FUSE mount: not measured ({missing})", 0.0, "s")]
    node = make_run(tmp / "node" / "run", steps=100)
    writer = _writer(node)
    try:
        with bindfs(node.parent, tmp / "login") as login:
            shown = asyncio.run(_shown_steps(login / "run", LAG_S))
    finally:
        writer.kill()
        writer.wait()
    history = LossHistory(node / ".loss.json")
    history.refresh()
    written = dict(zip(history.step.tolist(), history.time.tolist()))
    lags, i = [], 0
    settled = shown[0][0] + 2.0 if shown else 0.0       # after start-up's first read
    for step, at in sorted(written.items()):
        if at < settled:
            continue
        while i < len(shown) and shown[i][1] < step:
            i += 1
        if i == len(shown):
            break                                        # written after the last snapshot taken
        lags.append(shown[i][0] - at)
    lags.sort()
    worst, p95, median = lags[-1], lags[int(0.95 * (len(lags) - 1))], statistics.median(lags)
    return [Result("poll", f"step shown through a FUSE mount, largest lag ({len(lags)} steps)", worst, "s",
                   target="<= 2 s", met=worst <= 2.0),
            Result("poll", "step shown through a FUSE mount, 95th percentile lag", p95, "s"),
            Result("poll", "step shown through a FUSE mount, median lag", median, "s")]


async def _shown_checkpoints(run: Path, seconds: float) -> list[tuple[float, int]]:
    """(wall time, newest complete checkpoint shown) for every snapshot of a headless dashboard."""
    from console.tui.app import ConsoleApp

    shown: list[tuple[float, int]] = []

    class Recording(ConsoleApp):
        def on_snapshot_ready(self, message) -> None:
            super().on_snapshot_ready(message)
            steps = [c.step for c in message.snapshot.checkpoints if c.status == "complete"]
            shown.append((time.time(), max(steps, default=-1)))

    app = Recording(run, tick=2.0)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause(seconds)
    return shown


def sshfs_checkpoint_lag(tmp: Path) -> list[Result]:
    """A real trainer checkpointing every ~1-2 s with keep_last 2, watched through sshfs with its
    default options (listings cached 20 s): how late each checkpoint is shown as the newest,
    from its ``checkpoint`` event (the moment it was complete)."""
    from tests.console.trainer_proc import train_command
    from tests.mounts import sshfs, sshfs_missing

    what = "newest checkpoint shown through sshfs (default options)"
    missing = sshfs_missing()
    if missing:
        return [Result("poll", f"{what}: not measured ({missing})", 0.0, "s")]
    node = tmp / "sshfs-node" / "run"
    node.parent.mkdir(parents=True)
    with open(tmp / "trainer.out", "wb") as log:
        trainer = subprocess.Popen(train_command(node, "--checkpoint-every", "150", "--keep-last", "2"), cwd=ROOT,
                                   stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        deadline = time.monotonic() + 120
        while not (node.is_dir() and any(n.startswith("step_") and n.endswith(".json") for n in os.listdir(node))):
            if trainer.poll() is not None or time.monotonic() > deadline:
                return [Result("poll", f"{what}: not measured (the trainer did not checkpoint)", 0.0, "s")]
            time.sleep(0.2)
        with sshfs(node.parent, tmp / "sshfs-laptop") as laptop:
            shown = asyncio.run(_shown_checkpoints(laptop / "run", CKPT_S))
    finally:
        trainer.terminate()
        trainer.wait(60)
    landed = []
    for line in (node / ".loss.json").read_bytes().splitlines():    # every event line, not the tail's
        record = json.loads(line) if b'"event":"checkpoint"' in line else {}
        if isinstance(record.get("time"), float) and isinstance(record.get("step"), int):
            landed.append((record["time"], record["step"]))
    settled = shown[0][0] + 2.0 if shown else 0.0        # after start-up's first read
    lags, never = [], 0
    for at, step in landed:
        if at < settled or at > shown[-1][0] - 5.0:
            continue
        first = next((t for t, newest in shown if newest >= step), None)
        if first is None:
            continue
        if not any(newest == step for _, newest in shown):
            never += 1                                   # a newer one was shown first: never the newest
        lags.append(max(first - at, 0.0))
    if not lags:
        return [Result("poll", f"{what}: no checkpoint landed while watched", 0.0, "s")]
    worst, median = max(lags), statistics.median(lags)
    return [Result("poll", f"{what}, largest lag ({len(lags)} checkpoints, {never} never shown as newest)", worst,
                   "s", target="<= 3 s", met=worst <= 3.0),
            Result("poll", f"{what}, median lag", median, "s")]


def run() -> list[Result]:
    with tempfile.TemporaryDirectory(prefix="andrea-bench-poll-") as tmp:
        tmp_path = Path(tmp)
        return [watcher_share(tmp_path), overview_share(tmp_path), *fuse_lag(tmp_path),
                *sshfs_checkpoint_lag(tmp_path)]


if __name__ == "__main__":
    os.chdir(ROOT)
    for result in run():
        print(result)
