"""A live run watched for minutes: does the dashboard's memory grow with the run?

A writer appends 200 step lines a second (and rewrites the bandit's state, as the trainer
does every step) to a run the dashboard (headless, 140x45, in a process of its own) is
watching. The console's RSS is sampled every few seconds after its start-up; its slope over
the lines written, in MB per 100,000 lines, is set against the columns' own bytes (8 bytes
a step for each of the history's columns: step, tokens, time, loss, lr, grad_norm, and 4
for the arm's code: about 5.2 MB per 100,000 lines). The console's CPU share is printed
beside. The run starts 40,000 steps long (past the 4 MiB from which the console keeps the
history's mirror and maps it, as any run watched for long is), and the slope is fitted from
the first minute on: in that minute the terminal's caches of text fill, which are bounded
(the RSS at the end against the RSS after start-up says the whole growth).

``python -m bench soak`` writes for 300 s (60,000 lines); ``ANDREA_SOAK_S`` sets the
seconds (``make soak`` writes for 30 minutes). With ``ANDREA_TRACE_GROWTH=1`` the console
prints what Python allocated from the soak's start to its end, by line (tracemalloc; it
slows the console, so the figures of such a run are not the bench's).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bench.common import Result

ROOT = Path(__file__).resolve().parents[1]
LINES_PER_S = 200
WARMUP_S = 8.0
SAMPLE_S = 5.0
START_STEPS = 40_000
SETTLE_S = 60.0                         # the slope is fitted from here on
COLUMN_BYTES_PER_LINE = 8 * 6 + 4


def soak_seconds() -> float:
    return float(os.environ.get("ANDREA_SOAK_S", "300"))


def _line(step: int) -> dict:
    return {"step": step, "loss": 2.0 + (step % 97) / 1000, "lr": 1e-3, "grad_norm": 1.0, "arm": "stdlib-code",
            "tokens": step * 512, "time": 1.8e9 + step / LINES_PER_S}


def soak(run_dir: Path, seconds: float, last_step: int) -> tuple[list[tuple[int, int]], float]:
    """(lines written, console RSS) samples, and the console's CPU share of one core."""
    import psutil

    from rundir import LossHistoryWriter, write_state

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if env.get("ANDREA_TRACE_GROWTH"):
        env["ANDREA_TRACE_GROWTH"] = str(WARMUP_S)
    proc = subprocess.Popen([sys.executable, "-m", "bench.bench_console", "--serve", str(run_dir),
                             str(WARMUP_S + seconds + 2.0)], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    console = psutil.Process(proc.pid)
    time.sleep(WARMUP_S)                    # start-up and the first full read are not the steady state
    if proc.poll() is not None:             # a console that died has no memory to measure: not a flat 0
        raise RuntimeError(f"the console exited during start-up (exit status {proc.returncode})")
    step = last_step
    samples = [(0, console.memory_info().rss)]
    cpu_before, started = console.cpu_times(), time.monotonic()
    next_sample, written = started + SAMPLE_S, 0
    with LossHistoryWriter(run_dir / ".loss.json") as writer:
        while (now := time.monotonic()) - started < seconds:
            due = int((now - started) * LINES_PER_S) - written
            for _ in range(due):
                step += 1
                writer.append(_line(step))
            written += due
            if due:
                write_state(run_dir, {"version": 1, "step": step, "policy": {"caps": {}, "floors": {}},
                                      "arms": {"stdlib-code": {"pulls": step, "source": "builtin:stdlib-code"}},
                                      "phase": {"step": step}})
            if now >= next_sample:
                samples.append((written, console.memory_info().rss))
                next_sample += SAMPLE_S
            time.sleep(0.02)
    cpu_after = console.cpu_times()
    cpu = (cpu_after.user + cpu_after.system - cpu_before.user - cpu_before.system) / (time.monotonic() - started)
    proc.communicate(timeout=120)
    if proc.returncode != 0:
        raise RuntimeError(f"the console failed while it was watched (exit status {proc.returncode})")
    return samples, cpu


def run() -> list[Result]:
    import tempfile

    import numpy as np

    from bench.common import Result
    from tests.rundirs import make_run

    seconds = soak_seconds()
    with tempfile.TemporaryDirectory() as tmp:
        samples, cpu = soak(make_run(Path(tmp) / "run", steps=START_STEPS), seconds, START_STEPS)
    lines, rss = np.array(samples, dtype=np.float64).T
    settled = lines >= min(SETTLE_S, seconds / 2) * LINES_PER_S
    slope = float(np.polyfit(lines[settled], rss[settled], 1)[0]) * 100_000 / 1e6        # MB per 100k lines
    columns = COLUMN_BYTES_PER_LINE * 100_000 / 1e6
    what = f"{int(lines[-1]):,} lines at {LINES_PER_S}/s"
    return [Result("soak", f"dashboard RSS growth per 100k lines ({what})", slope, "MB", columns,
                   "the columns' own bytes", target="<= 1.0x", met=slope <= columns),
            Result("soak", f"dashboard RSS at the end ({what})", rss[-1] / 2**20, "MiB", rss[0] / 2**20,
                   "after start-up"),
            Result("soak", f"dashboard CPU while {LINES_PER_S} lines/s are written", cpu * 100, "% of a core")]


if __name__ == "__main__":
    from bench.common import print_table

    print_table(run())
