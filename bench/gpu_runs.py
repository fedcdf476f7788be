"""The pieces ``python -m bench gpu`` is made of: real ``andrea-train`` processes, what their
``.loss.json`` says about speed and checkpoints, byte comparison of two checkpoints, and a
headless console watching a run (``python -m bench.gpu_runs --console RUN READY STOP``)."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import orjson

from rundir.layout import LOSS_JSON

ROOT = Path(__file__).resolve().parents[1]
# A torch warning that a kernel without a deterministic implementation ran (warn_only on CUDA),
# or that a kernel chose a non-deterministic algorithm.
NONDETERMINISTIC_MARKS = ("does not have a deterministic implementation", "non-deterministic", "nondeterministic")


@dataclass
class TrainerRun:
    """One finished ``andrea-train`` process."""

    run_dir: Path
    returncode: int
    wall_s: float
    max_rss: int                 # bytes: the process's peak resident memory
    stderr: str
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    def problem(self) -> str:
        tail = " | ".join(self.stderr.strip().splitlines()[-3:])
        return ("timed out" if self.timed_out else f"exit status {self.returncode}") + (f": {tail}" if tail else "")


def run_trainer(run_dir: Path, *flags: str, timeout: float, env: dict[str, str] | None = None,
                started: "subprocess.Popen[bytes] | None" = None) -> TrainerRun:
    """``python -m trainer RUN_DIR FLAGS`` to completion (or ``timeout``), with its rusage."""
    proc = started or start_trainer(run_dir, *flags, env=env)
    return wait_trainer(proc, run_dir, timeout)


def start_trainer(run_dir: Path, *flags: str, env: dict[str, str] | None = None) -> "subprocess.Popen[bytes]":
    run_dir.mkdir(parents=True, exist_ok=True)
    err = open(run_dir.parent / f"{run_dir.name}.stderr", "ab")
    with err:
        return subprocess.Popen([sys.executable, "-m", "trainer", str(run_dir), *flags], cwd=ROOT,
                                stdout=subprocess.DEVNULL, stderr=err, env={**os.environ, **(env or {})})


def wait_trainer(proc: "subprocess.Popen[bytes]", run_dir: Path, timeout: float,
                 meanwhile: Callable[[], None] | None = None) -> TrainerRun:
    """Reap ``proc`` with ``wait4`` (its own peak RSS), killing it past ``timeout``;
    ``meanwhile`` is called every tenth of a second while it runs."""
    t0 = time.monotonic()
    timed_out = False
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() - t0 > timeout:
            proc.kill()
            timed_out = True
            pid, status, usage = os.wait4(proc.pid, 0)
            break
        if meanwhile is not None:
            try:
                meanwhile()
            except BaseException:               # never leave the trainer running behind an error
                proc.kill()
                os.wait4(proc.pid, 0)
                raise
        time.sleep(0.1)
    proc.returncode = os.waitstatus_to_exitcode(status)
    stderr = (run_dir.parent / f"{run_dir.name}.stderr").read_text(errors="replace")
    return TrainerRun(run_dir, proc.returncode, time.monotonic() - t0, usage.ru_maxrss * 1024, stderr, timed_out)


# -- what .loss.json says ------------------------------------------------------------

@dataclass
class History:
    """Step lines (the newest for each step) and events, in the file's order."""

    steps: dict[int, dict[str, Any]] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    order: list[dict[str, Any]] = field(default_factory=list)      # every line, as written

    @classmethod
    def read(cls, run_dir: Path) -> "History":
        h = cls()
        path = run_dir / LOSS_JSON
        data = path.read_bytes() if path.exists() else b""
        for line in data[:data.rfind(b"\n") + 1].splitlines():
            row = orjson.loads(line)
            h.order.append(row)
            if "event" in row:
                h.events.append(row)
            else:
                h.steps[row["step"]] = row
        return h

    def named(self, name: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["event"] == name]


@dataclass
class Speed:
    """A run's speed after its warm-up steps."""

    step_s: float                 # median step, where no audit or checkpoint happened at the boundary before
    tokens_per_s: float           # tokens per step / step_s
    overall_tokens_per_s: float   # every step after the warm-up, audits and checkpoints included
    first_step_s: float           # from the start event to the first step line: start-up, compile, first step
    steps: int                    # steps measured
    during_write_s: float | None  # median step while a background checkpoint was being written


def speed(history: History, warmup: int, cadence: int) -> Speed:
    numbers = sorted(history.steps)
    if len(numbers) < warmup + 3:
        raise ValueError(f"only {len(numbers)} steps logged, {warmup + 3} needed")
    t = {s: history.steps[s]["time"] for s in numbers}
    window = [s for s in numbers if s > warmup + 1 and s - 1 in t]
    writing = _steps_during_writes(history)
    clean = [t[s] - t[s - 1] for s in window if (s - 1) % cadence != 0 and s not in writing]
    during = [t[s] - t[s - 1] for s in window if (s - 1) % cadence != 0 and s in writing]
    step_s = statistics.median(clean or during)        # a disk slower than the cadence: always writing
    first, last = window[0] - 1, window[-1]
    tokens = history.steps[last]["tokens"] - history.steps[first]["tokens"]
    per_step = tokens / (last - first)
    start = (history.named("start") or history.named("resume"))[-1]["time"]
    return Speed(step_s, per_step / step_s, tokens / (t[last] - t[first]), t[numbers[0]] - start, len(window),
                 statistics.median(during) if during else None)


def _steps_during_writes(history: History) -> set[int]:
    """Steps trained while a background checkpoint was being written: after its step k (the
    step k + 1 holds the copy, the stall itself) up to the step at whose boundary the loop
    collected the finished write, where its ``checkpoint`` event is appended."""
    during: set[int] = set()
    last_step = 0
    for row in history.order:
        if "event" not in row:
            last_step = row["step"]
        elif row["event"] == "checkpoint" and row.get("background"):
            during.update(range(row["step"] + 2, last_step + 1))
    return during


@dataclass
class CheckpointTimes:
    background: list[dict[str, float]]      # cadence checkpoints written by the thread
    synchronous: list[dict[str, float]]     # written inside the loop (the final one)


def checkpoint_times(history: History) -> CheckpointTimes:
    keys = ("step", "stall_s", "write_s", "waited_s")
    rows = [{k: e.get(k, 0.0) for k in keys} | {"background": e.get("background")} for e in history.named("checkpoint")]
    return CheckpointTimes([r for r in rows if r["background"]], [r for r in rows if not r["background"]])


# -- checkpoints compared --------------------------------------------------------------

@dataclass
class Comparison:
    identical: bool
    differing: dict[str, int]          # array name -> float32 values that differ
    max_abs: dict[str, float]


def compare_checkpoints(a: Path, b: Path, chunk: int = 1 << 24) -> Comparison:
    """Byte equality of two ``.bin`` files, and where they differ, by how much (in chunks)."""
    if a.stat().st_size != b.stat().st_size:
        return Comparison(False, {"size": abs(a.stat().st_size - b.stat().st_size)}, {})
    x, y = np.memmap(a, np.uint8, "r"), np.memmap(b, np.uint8, "r")
    if all(np.array_equal(x[i:i + chunk], y[i:i + chunk]) for i in range(0, len(x), chunk)):
        return Comparison(True, {}, {})
    n = int(np.frombuffer(x[4:8].tobytes(), "<i4")[0])
    fa, fb = (np.memmap(p, "<f4", "r", offset=8, shape=(3, n)) for p in (a, b))
    differing, max_abs = {}, {}
    for i, name in enumerate(("weights", "m", "v")):
        count, worst = 0, 0.0
        for j in range(0, n, chunk):
            u, w = fa[i, j:j + chunk], fb[i, j:j + chunk]
            diff = u != w
            count += int(diff.sum())
            if diff.any():
                worst = max(worst, float(np.nanmax(np.abs(u[diff].astype(np.float64) - w[diff]))))
        differing[name], max_abs[name] = count, worst
    return Comparison(False, differing, max_abs)


def first_difference(a: History, b: History, after: int) -> dict[str, Any] | None:
    """The first step after ``after`` whose loss or grad norm differs between two runs."""
    for s in sorted(set(a.steps) & set(b.steps)):
        if s <= after:
            continue
        x, y = a.steps[s], b.steps[s]
        if (x["loss"], x["grad_norm"]) != (y["loss"], y["grad_norm"]):
            return {"step": s, "loss": [x["loss"], y["loss"]], "grad_norm": [x["grad_norm"], y["grad_norm"]]}
    return None


def nondeterminism_warnings(*stderrs: str) -> list[str]:
    """torch's warnings about kernels that are not deterministic, each once."""
    seen: dict[str, None] = {}
    for text in stderrs:
        for line in text.splitlines():
            if any(mark in line for mark in NONDETERMINISTIC_MARKS):
                seen.setdefault(line.strip()[:300], None)
    return list(seen)


# -- the console beside the trainer ------------------------------------------------------

def console_helper(run_dir: str, ready: str, stop: str) -> None:
    """The dashboard, headless and watching ``run_dir``, until the file ``stop`` exists;
    ``ready`` is created once its first frame is painted. Prints its peak RSS in bytes."""
    import asyncio
    import resource

    from console.tui.app import ConsoleApp

    app = ConsoleApp(run_dir)

    async def main() -> None:
        async with app.run_test(size=(140, 45), notifications=False) as pilot:
            await pilot.pause()
            Path(ready).touch()
            while not Path(stop).exists():
                await asyncio.sleep(0.2)
            await pilot.press("q")

    asyncio.run(main())
    print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, flush=True)


def start_console(run_dir: Path, workdir: Path, timeout: float = 120) -> tuple["subprocess.Popen[str]", Path]:
    """The headless dashboard on ``run_dir``, started and painted; returns it and its stop file."""
    ready, stop = workdir / "console.ready", workdir / "console.stop"
    ready.unlink(missing_ok=True)
    stop.unlink(missing_ok=True)
    proc = subprocess.Popen([sys.executable, "-m", "bench.gpu_runs", "--console", str(run_dir), str(ready), str(stop)],
                            cwd=ROOT, stdout=subprocess.PIPE, text=True)
    deadline = time.monotonic() + timeout
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError("the console did not start")
        time.sleep(0.05)
    return proc, stop


def console_once(run_dir: Path, timeout: float = 120) -> tuple[str, float, float]:
    """``python -m console RUN --once``: its text, wall seconds and CPU seconds."""
    t0 = time.monotonic()
    out = run_dir.parent / "once.txt"
    with open(out, "wb") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "console", str(run_dir), "--once"], cwd=ROOT, stdout=fh,
                                stderr=subprocess.STDOUT)
    pid, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.monotonic() - t0
    text = out.read_text(errors="replace")
    if proc.returncode != 0:
        raise RuntimeError(f"--once exited {proc.returncode}: {text[-300:]}")
    return text, wall, usage.ru_utime + usage.ru_stime


if __name__ == "__main__":
    if sys.argv[1:2] == ["--console"]:
        console_helper(*sys.argv[2:5])
