"""The history's columnar mirror (console/read/mirror_file.py): the reader's level, and the
console's first frame through it.

The console (each a fresh process from its spawn to the first full frame painted, headless,
the sources byte-compiled as an installed console's are; ``--first-frame`` is the helper mode):
- the first frame of a 5M-step run (``BENCH_CONSOLE_STEPS``; generated once into
  ``$BENCH_HISTORY_DIR``, default /tmp/andrea-bench-histories, and reused) with a valid mirror:
  <= 1.5x that of a 5k-step run; its peak RSS <= 150 MB; the same for ``--once`` (the series
  table's blocks kept beside the mirror), and beside it ``--once`` without them (removed before
  each: every value of every series read again, as each open did before they were kept);
- the first frame of a 200k-step run (100 checkpoints) with its mirror: <= 1.0x a bare
  ``python`` that imports orjson and parses the history; without one (a fresh cache: a
  foreign run's first open, which also writes the mirror): <= 2x. Beside them, the floor of
  any dashboard: a ``python`` that only imports textual.app and numpy, against the same baseline.

The reader:
- opening a 200k-step history with a valid mirror (mapped, then refreshed to the end):
  <= 1.0x a bare ``orjson.loads`` of the same bytes;
- opening a long history (1M steps; ``BENCH_MIRROR_STEPS``) with a valid mirror: <= 1.5x
  opening a 5k-step one the same way;
- building the mirror from scratch (the parse, the CRC of the whole history beside it, as a
  first open computes it, and the write): <= 1.2x a plain parse; for 1M steps, <= 0.9x a bare
  ``orjson.loads`` of the same lines (and,
  beside it, the parse with the C scanner of step lines against msgspec's typed decode alone);
- opening it 100 lines behind the history (map, check, read those lines): <= 1 ms (the mirror
  itself is written again only after 4 MiB more; the rewrite's cost is the build's).
"""

from __future__ import annotations

# Only what the --first-frame helper needs: it must start as light as andrea-console does.
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bench.common import Result

ENTRIES = 200_000
LONG = int(os.environ.get("BENCH_MIRROR_STEPS", "1000000"))
SHORT = 5_000
CONSOLE_LONG = int(os.environ.get("BENCH_CONSOLE_STEPS", "5000000"))
HISTORY_DIR = Path(os.environ.get("BENCH_HISTORY_DIR", "/tmp/andrea-bench-histories"))
CACHE_ENV = "ANDREA_CACHE_DIR"


def _line(step: int) -> bytes:
    return b'{"step":%d,"loss":2.5,"lr":0.003,"grad_norm":0.5,"arm":"a","tokens":%d,"time":%d.5}\n' % (
        step, step * 512, 1764403200 + step)


def _write(path: Path, steps: int) -> None:
    path.parent.mkdir(parents=True)
    with open(path, "wb") as fh:
        for start in range(0, steps, 50_000):
            fh.write(b"".join(_line(s) for s in range(start, min(start + 50_000, steps))))


def _open(path: Path, rows: int):
    from console.read.mirror_file import open_history

    def run() -> None:
        history, _, why = open_history(path, min_bytes=0)
        assert why is None and len(history) == rows, (why, len(history))
    return run


def first_frame(run_dir: str) -> None:
    """Helper mode: open the dashboard headless as ``andrea-console RUN_DIR`` does; print when
    (``time.time()``) its first full frame was painted, and the process's peak RSS in bytes."""
    from bench.first_frame import exit_after_first_frame
    from console.commands.dashboard_cli import open_dashboard

    painted: list[float] = []
    open_dashboard(Path(run_dir), customize=exit_after_first_frame(painted), watch=False, tick=None,
                   run_options={"headless": True, "size": (140, 45)})
    with open("/proc/self/status") as fh:
        peak = next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmHWM:"))
    print(repr(painted[0]), peak, flush=True)


def _long_history(steps: int) -> Path:
    """A run directory holding a ``steps``-line history, generated once and kept (minutes)."""
    run = HISTORY_DIR / f"steps-{steps}"
    done = HISTORY_DIR / f"steps-{steps}.done"
    if not done.exists():
        import shutil

        shutil.rmtree(run, ignore_errors=True)
        _write(run / ".loss.json", steps)
        done.write_text(str((run / ".loss.json").stat().st_size))
    return run


def _mirror_of(run_dir: Path, cache: Path) -> Path:
    """Where the console keeps the mirror of ``run_dir``'s history in ``cache``."""
    from console.read.cache_dir import mirror_path

    saved = os.environ.get(CACHE_ENV)
    os.environ[CACHE_ENV] = str(cache)
    try:
        return mirror_path(run_dir / ".loss.json")
    finally:
        if saved is None:
            del os.environ[CACHE_ENV]
        else:
            os.environ[CACHE_ENV] = saved


def _console(tmp: Path) -> list[Result]:
    import subprocess

    from bench.bench_console import ROOT, compile_sources, make_big_run
    from bench.common import Result, paired_ratio

    def spawn(run_dir: Path, cache: Path) -> tuple[float, int]:
        env = {**os.environ, "PYTHONPATH": str(ROOT), CACHE_ENV: str(cache)}
        spawned = time.time()
        out = subprocess.run([sys.executable, "-m", "bench.bench_mirror", "--first-frame", str(run_dir)], cwd=ROOT,
                             env=env, check=True, stdout=subprocess.PIPE, text=True).stdout.split()
        return float(out[-2]) - spawned, int(out[-1])

    compile_sources()
    cache = tmp / "console-cache"
    long_run, short_run = _long_history(CONSOLE_LONG), tmp / "console-short"
    _write(short_run / ".loss.json", SHORT)
    spawn(long_run, cache)                                   # the mirror made (untimed), the page cache warm
    spawn(short_run, cache)
    peaks: list[int] = []

    def long_frame() -> float:
        seconds, peak = spawn(long_run, cache)
        peaks.append(peak)
        return seconds

    once_peaks: dict[bool, list[int]] = {True: [], False: []}

    def once(run_dir: Path, cache: Path, kept: bool = True) -> None:
        """``andrea-console RUN --once``; its peak RSS noted. ``kept=False``: without the series
        table's blocks kept beside the mirror (removed first: every value read again, as each
        open did before they were kept)."""
        if not kept:
            Path(str(_mirror_of(run_dir, cache)) + ".series.json").unlink(missing_ok=True)
        env = {**os.environ, "PYTHONPATH": str(ROOT), CACHE_ENV: str(cache)}
        child = subprocess.Popen([sys.executable, "-m", "console", str(run_dir), "--once"], cwd=ROOT, env=env,
                                 stdout=subprocess.DEVNULL)
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
        assert child.returncode == 0, child.returncode
        if run_dir == long_run:
            once_peaks[kept].append(usage.ru_maxrss * 1024)

    ours, base, ratio = paired_ratio(long_frame, lambda: spawn(short_run, cache)[0], repeat=5)
    results = [Result("mirror", f"console first frame, {CONSOLE_LONG:,} steps, valid mirror", ours, "s", base,
                      f"{SHORT:,} steps", ratio, "<= 1.50x", ratio <= 1.5),
               Result("mirror", f"console first frame's peak RSS, {CONSOLE_LONG:,} steps", max(peaks) / 1e6, "MB",
                      target="<= 150 MB", met=max(peaks) <= 150e6)]
    once(long_run, cache)                                    # the series table's blocks kept (untimed)
    once_peaks[True].clear()
    ours, base, ratio = paired_ratio(lambda: once(long_run, cache), lambda: once(short_run, cache), repeat=5)
    results.append(Result("mirror", f"--once (process), {CONSOLE_LONG:,} steps, valid mirror", ours, "s", base,
                          f"{SHORT:,} steps", ratio, "<= 1.50x", ratio <= 1.5))
    results.append(Result("mirror", f"--once's peak RSS, {CONSOLE_LONG:,} steps, valid mirror",
                          max(once_peaks[True]) / 1e6, "MB", target="<= 150 MB", met=max(once_peaks[True]) <= 150e6))
    ours, base, ratio = paired_ratio(lambda: once(long_run, cache, kept=False), lambda: once(short_run, cache),
                                     repeat=3)
    results.append(Result("mirror", f"(before) --once, {CONSOLE_LONG:,} steps, valid mirror, no series blocks kept",
                          ours, "s", base, f"{SHORT:,} steps", ratio))
    results.append(Result("mirror", f"(before) --once's peak RSS, {CONSOLE_LONG:,} steps, no series blocks kept",
                          max(once_peaks[False]) / 1e6, "MB"))
    once(long_run, cache)                                    # kept again for what follows
    big = make_big_run(tmp)
    history = str(big / ".loss.json")

    def baseline() -> None:
        subprocess.run([sys.executable, "-c", "import orjson, sys\nwith open(sys.argv[1], 'rb') as f:\n"
                                              "    rows = [orjson.loads(line) for line in f]", history], check=True)

    spawn(big, cache)                                        # its mirror
    ours, base, ratio = paired_ratio(lambda: spawn(big, cache)[0], baseline, repeat=5)
    results.append(Result("mirror", f"console first frame, {ENTRIES:,} steps, valid mirror", ours, "s", base,
                          "python + orjson parse", ratio, "<= 1.00x", ratio <= 1.0))

    def floor() -> None:        # what any Textual dashboard over numpy columns imports before its first frame
        subprocess.run([sys.executable, "-c", "import gc; gc.disable(); import textual.app, numpy"], check=True,
                       env={**os.environ, "OPENBLAS_NUM_THREADS": "1"})

    ours, base, ratio = paired_ratio(floor, baseline, repeat=5)
    results.append(Result("mirror", "(floor) python importing textual.app and numpy, no frame", ours, "s", base,
                          "python + orjson parse", ratio))
    fresh = iter(range(1000))
    ours, base, ratio = paired_ratio(lambda: spawn(big, tmp / f"fresh-cache-{next(fresh)}")[0], baseline, repeat=5)
    results.append(Result("mirror", f"console first frame, {ENTRIES:,} steps, no mirror (first open)", ours, "s",
                          base, "python + orjson parse", ratio, "<= 2.00x", ratio <= 2.0))
    ours, base, ratio = paired_ratio(lambda: once(big, cache), baseline, repeat=5)
    results.append(Result("mirror", f"--once (process), {ENTRIES:,} steps, valid mirror", ours, "s", base,
                          "python + orjson parse", ratio, "<= 1.00x", ratio <= 1.0))
    ours, base, ratio = paired_ratio(lambda: once(big, tmp / f"fresh-cache-{next(fresh)}"), baseline, repeat=5)
    results.append(Result("mirror", f"--once (process), {ENTRIES:,} steps, no mirror (first open)", ours, "s",
                          base, "python + orjson parse", ratio, "<= 2.00x", ratio <= 2.0))
    return results


def run() -> list[Result]:
    import tempfile

    import orjson

    from bench.common import Result, median_time, paired_ratio
    from console.read.mirror_file import CrcAhead, open_history, save_mirror
    from rundir.history import LossHistory
    from tests.rundirs import make_run

    results = []
    with tempfile.TemporaryDirectory() as tmp:
        results += _console(Path(tmp))
        os.environ[CACHE_ENV] = str(Path(tmp) / "cache")
        path = make_run(Path(tmp) / "run", steps=ENTRIES, checkpoints=(), n_params=4) / ".loss.json"
        data = path.read_bytes()
        text = b"[" + data.rstrip(b"\n").replace(b"\n", b",") + b"]"

        def parse() -> None:
            history = LossHistory(path)
            history.refresh()

        def build(path: Path = path) -> None:   # as a first open builds it: the whole CRC computed beside the parse
            ahead = CrcAhead(path)
            history = LossHistory(path)
            history.refresh()
            assert save_mirror(history, ahead.base(history._offset, history._identity)) is None

        def parse_typed() -> None:         # without the C scanner (an install with no compiler)
            from unittest import mock

            from rundir.history import ingest

            with mock.patch.object(ingest, "scanned_columns", lambda *args: None):
                parse()

        ours, base, ratio = paired_ratio(parse, parse_typed, repeat=7)
        results.append(Result("mirror", "parse 200k steps, with the C scanner of step lines", ours, "s", base,
                              "the typed decode alone", ratio))
        ours, base, ratio = paired_ratio(build, parse, repeat=7)
        results.append(Result("mirror", "build from scratch (parse + write), 200k steps", ours, "s", base,
                              "plain parse", ratio, "<= 1.20x", ratio <= 1.20))
        ours, base, ratio = paired_ratio(_open(path, ENTRIES), lambda: orjson.loads(text), repeat=7)
        results.append(Result("mirror", "open with a valid mirror, 200k steps", ours, "s", base,
                              "orjson.loads(lines as one array)", ratio, "<= 1.00x", ratio <= 1.0))

        times = []
        for _ in range(30):
            history, _, _ = open_history(path, min_bytes=0)
            assert save_mirror(history) is None           # the mirror up to the end, untimed,
            os.sync()                                     # and on disk (not still being written back)
            last = history.last_step
            with open(path, "ab") as fh:
                fh.write(b"".join(_line(s) for s in range(last + 1, last + 101)))
            del history                                   # its mapping of the mirror replaced: unmapped untimed
            start = time.perf_counter()
            history, _, why = open_history(path, min_bytes=0)
            times.append(time.perf_counter() - start)
            assert why is None and history.last_step == last + 100
        times.sort()
        results.append(Result("mirror", "open with a mirror 100 lines behind (median of 30)", times[len(times) // 2],
                              "s", target="< 1 ms", met=times[len(times) // 2] < 1e-3))

        long_path, short_path = Path(tmp) / "long" / ".loss.json", Path(tmp) / "short" / ".loss.json"
        _write(long_path, LONG)
        _write(short_path, SHORT)
        long_text = b"[" + long_path.read_bytes().rstrip(b"\n").replace(b"\n", b",") + b"]"
        ours, base, ratio = paired_ratio(lambda: build(long_path), lambda: orjson.loads(long_text), repeat=3)
        long_text = b""                                  # its 97 MiB not held for the rest
        results.append(Result("mirror", f"first open (no mirror: parse, CRC, mirror written), {LONG:,} steps", ours,
                              "s", base, "orjson.loads(lines as one array)", ratio, "<= 0.90x", ratio <= 0.9))
        for p, n in ((long_path, LONG), (short_path, SHORT)):
            open_history(p, min_bytes=0)                  # the mirror, from scratch
        ours = median_time(_open(long_path, LONG), repeat=7)
        base = median_time(_open(short_path, SHORT), repeat=7)
        results.append(Result("mirror", f"open with a valid mirror, {LONG:,} steps ({long_path.stat().st_size >> 20} "
                                        "MiB)", ours, "s", base, f"the same, {SHORT:,} steps", ours / base,
                              "<= 1.50x", ours / base <= 1.5))
    return results


if __name__ == "__main__":
    if sys.argv[1:2] == ["--first-frame"]:
        from bench.first_frame import tuned_as_the_command_line

        tuned_as_the_command_line()
        first_frame(sys.argv[2])
    else:
        from bench.common import print_table

        print_table(run())
