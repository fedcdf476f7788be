"""The console on a big run: 200,000 history lines and 100 checkpoints, the lines with every
series the trainer writes (``p``, the GPU figures every 10 steps, an eval event every 100).

- the first full frame of the dashboard (from the spawn of its process to the moment the
  frame with the whole history is painted), and ``--once`` as a whole process, against a
  bare ``python -c`` that imports orjson and parses the same history (target: <= 2x), the
  sources byte-compiled first as an installed console's are (see :func:`compile_sources`);
- ingesting 100 new history lines and repainting (target: < 30 ms);
- the console's CPU while a writer appends 10 steps a second for 10 s (target: < 5% of a core);
- the console's peak RSS (target: < 200 MB).

``python -m bench console``. The helper modes (``--first-frame``, ``--serve``) are what the
benchmark runs in its subprocesses.
"""

from __future__ import annotations

# Only what the --first-frame helper needs: that process must start as light as
# andrea-console does (the rest is imported where it is used).
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import subprocess

    from bench.common import Result

ROOT = Path(__file__).resolve().parents[1]
STEPS = 200_000
CHECKPOINTS = 100
WRITE_S = 10.0
WRITE_HZ = 10
# The trainer's other series in the history (p, the GPU figures, eval events): every column
# the console keeps. BENCH_CONSOLE_SERIES=0 for loss-only lines (the figures before them).
SERIES = os.environ.get("BENCH_CONSOLE_SERIES", "1") != "0"


def make_big_run(root: Path) -> Path:
    from tests.rundirs import make_run

    every = STEPS // CHECKPOINTS
    return make_run(root / "big", steps=STEPS, checkpoints=tuple(range(every, STEPS + 1, every)), n_params=64,
                    spikes={123_457: 25.0}, log_lines=tuple(f"step {s} loss 2.0" for s in range(0, 2000, 10)),
                    series=SERIES)


def _python(*args: str, **kw) -> subprocess.CompletedProcess:
    import subprocess

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    kw.setdefault("stdout", subprocess.DEVNULL)
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, check=True, **kw)


def compile_sources() -> None:
    """Byte-compile the project's packages, as installing a wheel does. The editable install
    never does, and with PYTHONDONTWRITEBYTECODE set no run writes the .pyc files either:
    every start would then compile the console's 48 modules from source (about 0.1 s of
    CPU, a third of the baseline), which an installed console never pays, and the baseline,
    whose orjson and standard library are compiled, does not either."""
    import compileall

    for package in ("bench", "console", "rundir"):
        compileall.compile_dir(ROOT / package, quiet=1)


# -- helper modes (run in subprocesses) --------------------------------------------

def first_frame(run_dir: str) -> None:
    """Open the dashboard headless the way ``andrea-console RUN_DIR`` does; print the time
    (``time.time()``) at which the first full read has been painted, and exit."""
    from bench.first_frame import exit_after_first_frame
    from console.commands.dashboard_cli import open_dashboard

    painted: list[float] = []
    open_dashboard(Path(run_dir), customize=exit_after_first_frame(painted), watch=False, tick=None,
                   run_options={"headless": True, "size": (140, 45)})
    print(repr(painted[0]), flush=True)


def serve(run_dir: str, seconds: float) -> None:
    """The dashboard, headless, watching, for ``seconds``; prints the peak RSS in bytes."""
    import asyncio
    import resource

    from console.tui.app import ConsoleApp

    app = ConsoleApp(run_dir)
    # ANDREA_TRACE_GROWTH=S: what Python allocated between S seconds in and the end, by line,
    # printed to stderr (bench soak's way of saying what grows).
    trace_from = float(os.environ.get("ANDREA_TRACE_GROWTH", "0") or 0)

    async def main() -> None:
        async with app.run_test(size=(140, 45), notifications=False) as pilot:
            if trace_from:
                import tracemalloc

                tracemalloc.start()
                await asyncio.sleep(trace_from)
                before = tracemalloc.take_snapshot()
                await asyncio.sleep(max(0.0, seconds - trace_from))
                for stat in tracemalloc.take_snapshot().compare_to(before, "lineno")[:12]:
                    print(f"growth: {stat}", file=sys.stderr, flush=True)
            else:
                await asyncio.sleep(seconds)
            await pilot.press("q")

    asyncio.run(main())
    print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, flush=True)


# -- measurements ------------------------------------------------------------------

def ingest_and_repaint(run_dir: Path, rounds: int = 20, size: tuple[int, int] = (140, 45),
                       grid: bool = False) -> float:
    """Median CPU seconds to read 100 new lines and repaint the dashboard, in-process, at
    ``size`` (with the grid of small plots shown when ``grid``)."""
    import asyncio
    import statistics

    from console.tui.app import ConsoleApp
    from console.tui.options import ConsoleOptions
    from console.tui.widgets import loss_plot

    loss_plot.DATA_REPAINT_S = 0.0          # every ingest repaints the plot too: the worst case
    times: list[float] = []

    async def main() -> None:
        app = ConsoleApp(run_dir, ConsoleOptions(watch=False, tick=None))
        async with app.run_test(size=size) as pilot:
            await app.workers.wait_for_complete()
            await pilot.pause()
            if grid:
                await pilot.press("g")
                await pilot.pause()
            times.extend(await ingest_rounds(app, pilot, run_dir, rounds))

    asyncio.run(main())
    return statistics.median(times)


async def ingest_rounds(app: Any, pilot: Any, run_dir: Path, rounds: int) -> list[float]:
    """``rounds`` times: 100 new step lines appended, read and shown by the running dashboard
    ``app``; the CPU seconds of each round's read, panes and frame (not the pilot's idle waits)."""
    from console.tui.messages import SnapshotReady
    from rundir import LossHistoryWriter
    from rundir.layout import HISTORY

    times: list[float] = []
    step = int(app.snapshot.history.last_step)
    with LossHistoryWriter(run_dir / ".loss.json") as writer:
        for _ in range(rounds):
            for _ in range(100):
                step += 1
                writer.append({"step": step, "loss": 2.0, "lr": 1e-3, "grad_norm": 1.0,
                               "arm": "stdlib-code", "tokens": step * 512, "time": 1.8e9 + step})
            t0 = time.process_time()
            snap, notices = app.reader.read({HISTORY})
            app.on_snapshot_ready(SnapshotReady(snap, notices))
            await pilot.pause()
            times.append(time.process_time() - t0)
    return times


def _cpu_while_writing(run_dir: Path) -> tuple[float, int]:
    """The console's CPU share of one core while 10 steps/s are appended, and its peak RSS."""
    import subprocess

    import psutil

    from rundir import LossHistoryWriter, write_state

    warmup = 6.0
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "bench.bench_console", "--serve", str(run_dir),
                             str(warmup + WRITE_S + 1.0)], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    ps = psutil.Process(proc.pid)
    time.sleep(warmup)                          # start-up and the first full read are not the steady state
    before = ps.cpu_times()
    t0 = time.monotonic()
    step = STEPS + 10_000
    with LossHistoryWriter(run_dir / ".loss.json") as writer:
        while time.monotonic() - t0 < WRITE_S:
            step += 1
            writer.append({"step": step, "loss": 2.0, "lr": 1e-3, "grad_norm": 1.0, "arm": "stdlib-code",
                           "tokens": step * 512, "time": 1.8e9 + step})
            # Like the trainer: the bandit state is rewritten every step.
            write_state(run_dir, {"version": 1, "step": step, "policy": {"caps": {}, "floors": {}},
                                  "arms": {"stdlib-code": {"pulls": step, "source": "builtin:stdlib-code"}},
                                  "phase": {"step": step}})
            time.sleep(max(0.0, t0 + (step - STEPS - 10_000) / WRITE_HZ - time.monotonic()))
    after = ps.cpu_times()
    elapsed = time.monotonic() - t0
    out, _ = proc.communicate(timeout=60)
    cpu = (after.user + after.system - before.user - before.system) / elapsed
    return cpu, int(out.strip().splitlines()[-1])


def run() -> list[Result]:
    import subprocess
    import tempfile

    from bench.common import Result, paired_ratio

    results: list[Result] = []
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = make_big_run(Path(tmp))
        history = str(run_dir / ".loss.json")
        def baseline() -> subprocess.CompletedProcess:
            return _python("-c", "import orjson, sys\nwith open(sys.argv[1], 'rb') as f:\n"
                                 "    rows = [orjson.loads(line) for line in f]", history)

        def frame() -> float:
            spawned = time.time()
            out = _python("-m", "bench.bench_console", "--first-frame", str(run_dir), stdout=subprocess.PIPE)
            return float(out.stdout.split()[-1]) - spawned

        def once() -> subprocess.CompletedProcess:
            return _python("-m", "console", str(run_dir), "--once")

        compile_sources()
        frame()                                   # warm the page cache
        t_frame, t_base, ratio = paired_ratio(frame, baseline, repeat=5)
        results.append(Result("console", "first full frame (from spawn)", t_frame, "s", t_base,
                              "python + orjson parse", ratio, "<= 2x", ratio <= 2.0))
        t_once, t_base, ratio = paired_ratio(once, baseline, repeat=5)
        results.append(Result("console", "--once (process)", t_once, "s", t_base, "python + orjson parse",
                              ratio, "<= 2x", ratio <= 2.0))
        ingest = ingest_and_repaint(run_dir)
        results.append(Result("console", "ingest 100 lines + repaint", ingest, "s", target="< 30 ms",
                              met=ingest < 0.030))
        cpu, rss = _cpu_while_writing(run_dir)
        results.append(Result("console", f"CPU while {WRITE_HZ} steps/s are written", 100 * cpu, "% core",
                              target="< 5%", met=cpu < 0.05))
        results.append(Result("console", "peak RSS", rss / 2**20, "MiB", target="< 200 MB",
                              met=rss < 200e6))
    return results


if __name__ == "__main__":
    if sys.argv[1:2] in (["--first-frame"], ["--serve"]):
        from bench.first_frame import tuned_as_the_command_line

        tuned_as_the_command_line()
    if sys.argv[1:2] == ["--first-frame"]:
        first_frame(sys.argv[2])
    elif sys.argv[1:2] == ["--serve"]:
        serve(sys.argv[2], float(sys.argv[3]))
    else:
        from bench.common import print_table

        print_table(run())
