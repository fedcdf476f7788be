"""``andrea-console runs/`` at scale: 100 runs, each with a 200,000-step history.

- the overview's first full frame (from the spawn of its process to the frame with every
  run's row painted) against that of a runs directory holding one small run alone
  (target: <= 1.5x); the overview reads only each history's tail;
- the comparison of 5 such runs (their whole histories read and overlaid in one plot)
  against five full parses of those histories (target: <= 1.3x).

The histories are generated once and hard-linked into the 100 run directories (the
other files are generated for each run), so the data costs one history's time and disk.
``python -m bench overview``; ``--first-frame ROOT`` is the helper mode its subprocesses run.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bench.common import Result

ROOT = Path(__file__).resolve().parents[1]
RUNS = 100
STEPS = 200_000
COMPARED = 5
SIZE = (160, 48)


def make_runs(tmp: Path) -> tuple[Path, Path]:
    """``(big, small)``: a runs directory of RUNS runs of STEPS steps, and one holding one small run."""
    from rundir.layout import LOSS_JSON
    from tests.rundirs import make_run

    source = make_run(tmp / "source", steps=STEPS, checkpoints=(), with_state=False, with_samples=False)
    big = tmp / "big"
    for i in range(RUNS):
        run = make_run(big / f"run-{i:03d}", steps=1, checkpoints=(STEPS - 1000, STEPS), n_params=64, seed=i)
        os.unlink(run / LOSS_JSON)
        os.link(source / LOSS_JSON, run / LOSS_JSON)
    small = tmp / "small"
    make_run(small / "run", steps=300, checkpoints=(100, 200, 300))
    return big, small


def first_frame(root: str) -> None:
    """Open the overview headless as ``andrea-console ROOT`` does; print the time
    (``time.time()``) at which every run's row has been painted, and exit."""
    from bench.first_frame import exit_after_first_frame
    from console.commands.overview_cli import open_overview

    painted: list[float] = []
    open_overview(Path(root), customize=exit_after_first_frame(painted), watch=False, tick=None,
                  run_options={"headless": True, "size": SIZE})
    print(repr(painted[0]), flush=True)


def run() -> list[Result]:
    import subprocess
    import tempfile

    from bench.common import Result, paired_ratio
    from console.plot.overlay import build_overlay, render_overlay_runs
    from console.tui.screens.compare import read_series
    from rundir import LossHistory
    from rundir.layout import LOSS_JSON

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    results: list[Result] = []
    with tempfile.TemporaryDirectory() as tmp:
        big, small = make_runs(Path(tmp))

        def frame(root: Path) -> float:
            spawned = time.time()
            out = subprocess.run([sys.executable, "-m", "bench.bench_overview", "--first-frame", str(root)],
                                 cwd=ROOT, env=env, check=True, stdout=subprocess.PIPE, text=True)
            return float(out.stdout.split()[-1]) - spawned

        frame(big), frame(small)                      # warm the page cache and .pyc files
        t_big, t_small, ratio = paired_ratio(lambda: frame(big), lambda: frame(small), repeat=5)
        results.append(Result("overview", f"first full frame, {RUNS} runs x {STEPS:,} steps", t_big, "s", t_small,
                              "one small run alone", ratio, "<= 1.5x", ratio <= 1.5))

        runs = sorted(big.iterdir())[:COMPARED]

        def compare() -> None:
            series = read_series([(r.name, r) for r in runs]).series
            overlay = build_overlay([(steps, loss) for _, steps, _, loss in series], SIZE[0] - 10, SIZE[1] - 6)
            render_overlay_runs(overlay)

        def parses() -> None:
            for r in runs:
                LossHistory(r / LOSS_JSON).refresh()

        compare()
        t_cmp, t_parse, ratio = paired_ratio(compare, parses, repeat=5)
        results.append(Result("overview", f"comparison of {COMPARED} runs", t_cmp, "s", t_parse,
                              f"{COMPARED} full parses", ratio, "<= 1.3x", ratio <= 1.3))
    return results


if __name__ == "__main__":
    if sys.argv[1:2] == ["--first-frame"]:
        from bench.first_frame import tuned_as_the_command_line

        tuned_as_the_command_line()
        first_frame(sys.argv[2])
    else:
        from bench.common import print_table

        print_table(run())
