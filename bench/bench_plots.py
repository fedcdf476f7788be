"""The plots of any series: zoom, pan and cursor moves on a 1M-step history, the ingest
of 100 new lines with the grid of small plots on screen, and the memory the grid adds.

Key to frame is measured in-process (the key pressed through Textual's pilot, CPU time of
this process until the frame is painted), beside one full-plot render of the same history
in the same run (the plot drawn anew from its columns: what every frame cost if nothing
were kept): the ratio says how much of that a key costs; the targets are absolute (30 ms).
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from pathlib import Path

from bench.bench_console import ingest_and_repaint
from bench.common import Result

BIG_STEPS = 1_000_000
SIZE = (160, 48)


def _write_history(run_dir: Path, steps: int) -> None:
    """A plain history of ``steps`` step lines (fast: one orjson dump per line, no generator)."""
    import numpy as np
    import orjson

    rng = np.random.default_rng(0)
    loss = 5.5 * np.exp(-np.arange(steps) / 40_000) + 1.6 + rng.normal(0, 0.05, steps)
    grad = 0.5 + rng.random(steps)
    arms = ("stdlib-code", "stdlib-docstrings", "pydoc-topics")
    with open(run_dir / ".loss.json", "wb") as fh:
        fh.write(orjson.dumps({"event": "start", "step": 0, "time": 1.7e9}) + b"\n")
        for i in range(steps):
            s = i + 1
            fh.write(orjson.dumps({"step": s, "loss": float(loss[i]), "lr": 3e-3, "grad_norm": float(grad[i]),
                                   "arm": arms[s % 3], "tokens": s * 512, "time": 1.7e9 + s * 0.5}) + b"\n")


def _keys_on_a_big_history(run_dir: Path) -> list[Result]:
    from console.tui.app import ConsoleApp
    from console.tui.options import ConsoleOptions

    results: list[Result] = []

    async def main() -> None:
        app = ConsoleApp(run_dir, ConsoleOptions(watch=False, tick=None))
        async with app.run_test(size=SIZE) as pilot:
            await app.workers.wait_for_complete()
            await pilot.pause()
            from console.plot.ema import SmoothedLines

            plot = app.dashboard.plot
            plot.focus()
            await pilot.pause()

            def full_render() -> float:
                plot._cache_key = None
                plot._line, plot._lines = None, SmoothedLines()     # the smoothed line too: drawn anew
                t0 = time.process_time()
                plot._build()
                return time.process_time() - t0
            base = statistics.median(full_render() for _ in range(5))
            for what, keys in (("zoom in (z)", "z"), ("pan (. and ,)", ".,"), ("cursor move (→)", "right"),
                               ("zoom out (Z)", "Z")):
                times = []
                for i in range(6):
                    key = keys if len(keys) == 1 or keys == "right" else keys[i % 2]
                    if what.startswith("zoom out"):
                        plot.zoom = (400_000, 400_100)
                        await pilot.pause()
                    t0 = time.process_time()
                    await pilot.press(key)
                    await pilot.pause()
                    times.append(time.process_time() - t0)
                t = statistics.median(times)
                results.append(Result("plots", f"{what}, key to frame, 1M steps", t * 1e3, "ms", base * 1e3,
                                      "one full-plot render", target="<= 30 ms", met=t <= 0.030))
    asyncio.run(main())
    return results


# The dashboard in a process of its own (so that its RSS is the dashboard's): RSS after the
# first frame, then after the grid of small plots is shown and 2,000 lines are read with it.
_GRID_MEMORY = """
import asyncio, sys
from pathlib import Path
import psutil
from bench.first_frame import tuned_as_the_command_line
tuned_as_the_command_line()
from bench.bench_console import ingest_rounds
from console.tui.app import ConsoleApp
from console.tui.options import ConsoleOptions

async def main(run_dir):
    app = ConsoleApp(run_dir, ConsoleOptions(watch=False, tick=None))
    async with app.run_test(size=(160, 48)) as pilot:
        await app.workers.wait_for_complete()
        await pilot.pause()
        before = psutil.Process().memory_info().rss
        await pilot.press("g")
        await pilot.pause()
        await ingest_rounds(app, pilot, run_dir, 20)
        print(before, psutil.Process().memory_info().rss)

asyncio.run(main(Path(sys.argv[1])))
"""


def _grid_memory(run_dir: Path) -> tuple[int, int]:
    """The dashboard's RSS at its first frame, and with the grid shown and 2,000 lines read."""
    import os
    import subprocess

    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-c", _GRID_MEMORY, str(run_dir)], capture_output=True, text=True,
                         cwd=root, env={**os.environ, "PYTHONPATH": str(root)}, timeout=600, check=True)
    before, after = map(int, out.stdout.split()[-2:])
    return before, after


def run() -> list[Result]:
    import tempfile

    from bench.bench_console import make_big_run

    results: list[Result] = []
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = make_big_run(Path(tmp))
        single = ingest_and_repaint(run_dir, size=SIZE)
        ingest = ingest_and_repaint(run_dir, size=SIZE, grid=True)
        results.append(Result("plots", "ingest 100 lines + repaint, grid of 4 shown, 200k steps", ingest * 1e3, "ms",
                              single * 1e3, "the same, main plot only", target="< 30 ms", met=ingest < 0.030))
        before, after = _grid_memory(run_dir)
        added = (after - before) / 2**20
        results.append(Result("plots", "RSS added by the grid of 4, shown, 2,000 lines read, 200k steps", added, "MB",
                              before / 2**20, "the dashboard's RSS at its first frame", target="<= 10 MB",
                              met=added <= 10))
        big = Path(tmp) / "million"
        big.mkdir()
        _write_history(big, BIG_STEPS)
        results += _keys_on_a_big_history(big)
    return results


if __name__ == "__main__":
    from bench.common import print_table

    print_table(run())
    sys.exit(0)
