"""The history mirror's full check (console/read/history_part.py: the CRC-32 of every byte the
mirror covers, in a thread of the lowest priority, started once the first frame is painted).

- the console's first frame from a valid mirror of a long run (``BENCH_CONSOLE_STEPS``, 5M
  by default, the history bench mirror generates and keeps), with the full check on: <= 1.05x
  the same first frame with it off (each a fresh process from its spawn to the first full
  frame, alternated);
- beside it: how long the check takes for that history (the time from the first frame until
  the console is proven to show the file, or re-reads it);
- a first open (the parse, with the CRC of the whole history computed beside it, and the
  mirror's save): <= 1.10x the same open with no CRC computed.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bench.common import Result

CACHE_ENV = "ANDREA_CACHE_DIR"


def first_frame(run_dir: str, check: str) -> None:
    """Helper mode: bench_mirror's first frame, with the full check on or off."""
    if check == "off":
        from console.read.history_part import HistoryPart

        HistoryPart.verify_mirror = lambda self, on_stale: False
    from bench.bench_mirror import first_frame as painted

    painted(run_dir)


def _spawn(run_dir: Path, cache: Path, check: str) -> float:
    import subprocess

    from bench.bench_console import ROOT

    env = {**os.environ, "PYTHONPATH": str(ROOT), CACHE_ENV: str(cache)}
    spawned = time.time()
    out = subprocess.run([sys.executable, "-m", "bench.bench_mirror_check", "--first-frame", str(run_dir), check],
                         cwd=ROOT, env=env, check=True, stdout=subprocess.PIPE, text=True).stdout.split()
    return float(out[-2]) - spawned


def _check_time(run_dir: Path) -> tuple[float, float]:
    """The full check of the run's mirror after a reader's first read (s), and that read (s)."""
    from console.read.reader import RunReader

    start = time.perf_counter()
    reader = RunReader(run_dir, free_space=lambda _: 1 << 40)
    reader.read()
    read = time.perf_counter() - start
    start = time.perf_counter()
    assert reader.verify_history_mirror(lambda: None)
    assert reader._history.wait_verified(600) is True
    return time.perf_counter() - start, read


def _first_open(run_dir: Path, cache: Path, crc: bool) -> float:
    """A first open through the console's mirror policy: the parse (the CRC computed beside
    it) and the mirror's save; ``crc=False``: the save told the CRC is known (none computed)."""
    from console.read.history_mirror import HistoryMirror

    os.environ[CACHE_ENV] = str(cache)
    start = time.perf_counter()
    keeper = HistoryMirror(run_dir / ".loss.json", min_bytes=0)
    if not crc:
        keeper._base = lambda history: (history._offset, 0)
    history, update, _ = keeper.open()
    assert keeper.keep_up(history, update) is None and keeper.just_saved
    return time.perf_counter() - start


def run() -> list[Result]:
    import tempfile

    from bench.bench_console import compile_sources
    from bench.bench_mirror import CONSOLE_LONG, _long_history
    from bench.common import Result

    compile_sources()
    run_dir = _long_history(CONSOLE_LONG)
    size = (run_dir / ".loss.json").stat().st_size
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp) / "cache"
        _spawn(run_dir, cache, "on")                      # the mirror made (untimed), the page cache warm
        on, off, ratios = [], [], []
        for _ in range(5):
            off.append(_spawn(run_dir, cache, "off"))
            on.append(_spawn(run_dir, cache, "on"))
            ratios.append(on[-1] / off[-1])
        ratio = statistics.median(ratios)
        results.append(Result("mirror_check", f"first frame, {CONSOLE_LONG:,} steps, valid mirror, full check on",
                              statistics.median(on), "s", statistics.median(off), "the check off", ratio,
                              "<= 1.05x", ratio <= 1.05))
        os.environ[CACHE_ENV] = str(cache)
        checks = [_check_time(run_dir) for _ in range(3)]
        check, read = statistics.median(c[0] for c in checks), statistics.median(c[1] for c in checks)
        results.append(Result("mirror_check", f"the full check after it ({size >> 20} MiB covered, "
                                              f"{size / check / 1e9:.2f} GB/s)", check, "s", read,
                              "the first read from the mirror", check / read))
        whole, carried = [], []
        for i in range(3):
            whole.append(_first_open(run_dir, Path(tmp) / f"fresh-{i}", crc=True))
            carried.append(_first_open(run_dir, Path(tmp) / f"bare-{i}", crc=False))
        ours, base = statistics.median(whole), statistics.median(carried)
        results.append(Result("mirror_check", f"first open: parse + save, with the CRC of all {size >> 20} MiB", ours,
                              "s", base, "no CRC computed", ours / base, "<= 1.10x", ours / base <= 1.10))
    return results


if __name__ == "__main__":
    if sys.argv[1:2] == ["--first-frame"]:
        first_frame(sys.argv[2], sys.argv[3])
    else:
        from bench.common import print_table

        print_table(run())
