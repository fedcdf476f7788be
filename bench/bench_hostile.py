"""The console on hostile run directories (issue 17): it must stay interactive and small.

- a key press on the dashboard of a run with 20,000 bare ``step_*.bin`` files, and of one
  with 20,000 complete checkpoints (each a marker on the plot), from the key event to the
  frame that shows its effect (``l`` flips the plot's y axis), while the dashboard ticks
  and watches as usual (target: < 100 ms, the worst of several presses; the same on an
  ordinary run is the baseline);
- ``andrea-console RUN --once`` as a process on each hostile directory: 20,000 bare
  checkpoints, 100,000 zombie arms (with and without a run.toml), one 10 MB sample, a
  run.toml with a 100,000-part dotted key, an arm whose source is a directory of 117,000
  files (targets: < 2 s and a peak RSS < 200 MB; an ordinary run's ``--once`` is the
  baseline of the time);
- the dashboard's first full frame with 100,000 zombie arms, against ``--once`` on the
  same run (target: <= 2x; one alert for them all, not one bell each);
- ``--once`` on a history whose step lines name 10,000 arms over 20,000 steps, against one
  naming 3 arms over as many steps (targets: <= 2x, peak RSS < 150 MB; it took 31 s and
  1.6 GB when every arm had series of its own);
- re-reading ``.state.json`` (what a live trainer rewrites every step) when an arm's
  source is that directory: the source is not walked again (target: < 20 ms a read;
  one walk of the directory is the baseline).

``python -m bench hostile``.
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
BARE_CHECKPOINTS = 20_000
ZOMBIES = 100_000
SAMPLE_BYTES = 10_000_000
KEY_PARTS = 100_000
SOURCE_FILES = 117_000
PRESSES = 9
HISTORY_ARMS, ARM_STEPS = 10_000, 20_000


def make_hostile(root: Path) -> dict[str, Path]:
    """The hostile run directories, each a small ordinary run plus one hostile thing."""
    import orjson

    from tests.rundirs import make_run

    runs: dict[str, Path] = {"ordinary run (baseline)": make_run(root / "ordinary")}

    run = make_run(root / "bare")
    for i in range(BARE_CHECKPOINTS):
        (run / f"step_{1000 + i:06d}.bin").write_bytes(b"x")
    runs[f"{BARE_CHECKPOINTS:,} bare step_*.bin"] = run

    # Complete checkpoints of a 16-parameter model, written directly (write_checkpoint
    # syncs each file: minutes for 20,000); the quick look reads only header, size and .json.
    from rundir.checkpoint import FORMAT_VERSION, HEADER

    run = make_run(root / "complete", steps=3000, checkpoints=())
    body = bytes(12 * 16)
    for step in range(10, 10 + BARE_CHECKPOINTS):
        (run / f"step_{step:06d}.bin").write_bytes(HEADER.pack(step, 16) + body)
        (run / f"step_{step:06d}.json").write_bytes(orjson.dumps(
            {"format_version": FORMAT_VERSION, "step": step, "n_params": 16, "checksum": "crc32:00000000"}))
    runs[f"{BARE_CHECKPOINTS:,} complete checkpoints"] = run

    for name, with_toml in (("zombies", True), ("zombies-no-toml", False)):
        run = make_run(root / name, with_run_toml=with_toml)
        state = orjson.loads((run / ".state.json").read_bytes())
        for i in range(ZOMBIES):
            state["arms"][f"zombie-{i}"] = {"pulls": 1, "prob": 0.0, "source": f"data/gone-{i}.txt"}
        (run / ".state.json").write_bytes(orjson.dumps(state))
        runs[f"{ZOMBIES:,} zombie arms" + ("" if with_toml else ", no run.toml")] = run

    run = make_run(root / "sample")
    (run / ".samples.json").write_bytes(orjson.dumps({"version": 1, "samples": [
        {"step": 300, "arm": "stdlib-code", "prompt": "def f(", "completion": "x" * SAMPLE_BYTES}]}))
    runs["one 10 MB sample"] = run

    run = make_run(root / "toml")
    with open(run / "run.toml", "a") as fh:
        fh.write("\n" + ".".join(["a"] * KEY_PARTS) + " = 1\n")
    runs[f"run.toml: a {KEY_PARTS:,}-part dotted key"] = run

    run = make_run(root / "source", with_run_toml=False, state_arms=("stdlib-code", "corpus"))
    corpus = run / "data" / "corpus.txt"          # the state's recorded source of arm "corpus"
    corpus.mkdir(parents=True)
    for i in range(SOURCE_FILES):                 # empty files: the worst case, a whole walk
        (corpus / f"{i:06d}.txt").touch()
    runs[f"arm source: a directory of {SOURCE_FILES:,} files"] = run
    return runs


# Run in a small python of its own: a child forked from this (large) process would start
# with this process's pages counted in its peak RSS.
_ONCE = """
import os, sys, time
start = time.perf_counter()
pid = os.posix_spawn(sys.executable, [sys.executable, "-m", "console", sys.argv[1], "--once"], os.environ,
                     file_actions=[(os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
                                   (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0)])
_, status, usage = os.wait4(pid, 0)
print(time.perf_counter() - start, usage.ru_maxrss * 1024, os.waitstatus_to_exitcode(status))
"""


def once(run_dir: Path) -> tuple[float, int, int]:
    """``andrea-console RUN_DIR --once`` as a process: (seconds, peak RSS in bytes, exit status)."""
    import subprocess

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", _ONCE, str(run_dir)], cwd=ROOT, env=env, check=True,
                         stdout=subprocess.PIPE, text=True).stdout.split()
    return float(out[0]), int(out[1]), int(out[2])


def first_frame_s(run_dir: Path) -> float:
    """Seconds from spawning ``andrea-console RUN_DIR`` (headless) to its first full frame."""
    import subprocess

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    spawned = time.time()
    out = subprocess.run([sys.executable, "-m", "bench.bench_console", "--first-frame", str(run_dir)], cwd=ROOT,
                         env=env, check=True, stdout=subprocess.PIPE, text=True).stdout
    return float(out.split()[-1]) - spawned


def key_presses(run_dir: Path, presses: int = PRESSES, gap: float = 1.3) -> list[float]:
    """Seconds from each ``l`` key event to the frame that shows the flipped axis, on the
    real dashboard (watching, ticking), presses ``gap`` seconds apart (so that they meet
    the trainer tick and the ten-second redraw of the checkpoint ages)."""
    import asyncio

    from textual import events

    from console.tui.app import ConsoleApp

    times: list[float] = []

    async def main() -> None:
        app = ConsoleApp(run_dir)
        async with app.run_test(size=(140, 45), notifications=False) as pilot:
            deadline = time.monotonic() + 120
            while app.snapshot is None and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            await asyncio.sleep(1.0)                # start-up is not the steady state
            plot = app.dashboard.plot
            for _ in range(presses):
                want = not plot.log_y
                start = time.perf_counter()
                app._driver.send_message(events.Key("l", "l"))
                # The plot's cache key holds log_y once a frame has drawn it.
                while not (plot._cache_key and plot._cache_key[3] == want):
                    await asyncio.sleep(0.001)
                times.append(time.perf_counter() - start)
                await asyncio.sleep(gap)
            await pilot.press("q")

    asyncio.run(main())
    return times


def state_rereads(run_dir: Path, rounds: int = 5) -> tuple[float, float]:
    """Median seconds of a ``.state.json`` re-read, and of one uncached check of the arm
    source that is a directory of many files (what each re-read cost before)."""
    import statistics

    from console.read.reader import RunReader
    from rundir.layout import STATE
    from rundir.sources import check_source

    reader = RunReader(run_dir)
    reader.read()
    times = []
    for _ in range(rounds):
        (run_dir / ".state.json").touch()
        start = time.perf_counter()
        reader.read({STATE})
        times.append(time.perf_counter() - start)
    start = time.perf_counter()
    check_source("data/corpus.txt", run_dir)
    return statistics.median(times), time.perf_counter() - start


def many_arms(root: Path) -> list[Result]:
    """``--once`` with 10,000 arm names in the history, against 3 over as many steps."""
    import statistics

    from bench.common import Result
    from tests.rundirs import make_run

    many = make_run(root / "many-arms", steps=ARM_STEPS, arms=tuple(f"arm-{i}" for i in range(HISTORY_ARMS)))
    few = make_run(root / "three-arms", steps=ARM_STEPS)
    once(many), once(few)                   # warm: the page cache, the history mirrors
    pairs = [(once(many), once(few)) for _ in range(3)]     # alternated: a noisy machine's drift cancels
    t_many, t_few = (statistics.median(p[i][0] for p in pairs) for i in (0, 1))
    ratio = statistics.median(m[0] / f[0] for m, f in pairs)
    rss = max(m[1] for m, _ in pairs)
    what = f"{HISTORY_ARMS:,} arm names over {ARM_STEPS:,} steps"
    return [Result("hostile", f"--once: {what}", t_many, "s", t_few, "3 arms, as many steps", ratio, "<= 2x",
                   ratio <= 2.0),
            Result("hostile", f"--once peak RSS: {what}", rss / 2**20, "MiB", target="< 150 MB", met=rss < 150e6)]


def run() -> list[Result]:
    import statistics
    import tempfile

    from bench.common import Result, paired_ratio

    results: list[Result] = []
    with tempfile.TemporaryDirectory() as tmp:
        runs = make_hostile(Path(tmp))
        ordinary = runs.pop("ordinary run (baseline)")
        complete = runs.pop(f"{BARE_CHECKPOINTS:,} complete checkpoints")

        base_keys = key_presses(ordinary, presses=5)
        for what, run_dir in ((f"{BARE_CHECKPOINTS:,} bare step_*.bin", runs[f"{BARE_CHECKPOINTS:,} bare step_*.bin"]),
                              (f"{BARE_CHECKPOINTS:,} complete checkpoints", complete)):
            keys = key_presses(run_dir)
            results.append(Result("hostile", f"key press to frame, {what} (worst of {len(keys)})", max(keys), "s",
                                  max(base_keys), "ordinary run", target="< 100 ms", met=max(keys) < 0.100))
            results.append(Result("hostile", f"key press to frame, {what} (median)", statistics.median(keys), "s",
                                  statistics.median(base_keys), "ordinary run", target="< 100 ms",
                                  met=statistics.median(keys) < 0.100))

        once(ordinary)                              # warm the page cache and .pyc files
        t_base = statistics.median(once(ordinary)[0] for _ in range(3))
        for what, run_dir in runs.items():
            elapsed, rss, code = once(run_dir)
            results.append(Result("hostile", f"--once: {what}" + (f" (exit {code})" if code else ""), elapsed, "s",
                                  t_base, "ordinary --once", target="< 2 s", met=elapsed < 2.0))
            results.append(Result("hostile", f"--once peak RSS: {what}", rss / 2**20, "MiB", target="< 200 MB",
                                  met=rss < 200e6))

        zombies = runs[f"{ZOMBIES:,} zombie arms"]
        t_frame, t_once, ratio = paired_ratio(lambda: first_frame_s(zombies), lambda: once(zombies)[0], repeat=3)
        results.append(Result("hostile", f"first full frame, {ZOMBIES:,} zombie arms", t_frame, "s", t_once,
                              "--once of the same run", ratio, "<= 2x", ratio <= 2.0))

        results += many_arms(Path(tmp))
        source = runs[f"arm source: a directory of {SOURCE_FILES:,} files"]
        reread, walk = state_rereads(source)
        results.append(Result("hostile", f".state.json re-read, a source of {SOURCE_FILES:,} files", reread, "s",
                              walk, "one walk of it", target="< 20 ms", met=reread < 0.020))
    return results


if __name__ == "__main__":
    from bench.common import print_table

    print_table(run())
