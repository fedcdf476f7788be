"""The history's columnar mirror (rundir/history/mirror.py), at the reader's level.

Issue 29's targets, for what the mirror itself does (the console's first frame through it is
measured once the console opens histories by it):
- opening a 200k-step history with a valid mirror (mapped, then refreshed to the end):
  <= 1.0x a bare ``orjson.loads`` of the same bytes;
- opening a long history (1M steps; ``BENCH_MIRROR_STEPS``) with a valid mirror: <= 1.5x
  opening a 5k-step one the same way;
- building the mirror from scratch (the parse and the write): <= 1.2x a plain parse;
- opening it 100 lines behind the history (map, check, read those lines): <= 1 ms (the mirror
  itself is written again only after 4 MiB more; the rewrite's cost is the build's).
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import orjson

from bench.common import Result, median_time, paired_ratio
from rundir.history import LossHistory
from rundir.history.mirror import CACHE_ENV, open_history, save_mirror
from tests.rundirs import make_run

ENTRIES = 200_000
LONG = int(os.environ.get("BENCH_MIRROR_STEPS", "1000000"))
SHORT = 5_000


def _line(step: int) -> bytes:
    return b'{"step":%d,"loss":2.5,"lr":0.003,"grad_norm":0.5,"arm":"a","tokens":%d,"time":%d.5}\n' % (
        step, step * 512, 1764403200 + step)


def _write(path: Path, steps: int) -> None:
    path.parent.mkdir(parents=True)
    with open(path, "wb") as fh:
        for start in range(0, steps, 50_000):
            fh.write(b"".join(_line(s) for s in range(start, min(start + 50_000, steps))))


def _open(path: Path, rows: int):
    def run() -> None:
        history, _, why = open_history(path, min_bytes=0)
        assert why is None and len(history) == rows, (why, len(history))
    return run


def run() -> list[Result]:
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        os.environ[CACHE_ENV] = str(Path(tmp) / "cache")
        path = make_run(Path(tmp) / "run", steps=ENTRIES, checkpoints=(), n_params=4) / ".loss.json"
        data = path.read_bytes()
        text = b"[" + data.rstrip(b"\n").replace(b"\n", b",") + b"]"

        def parse() -> None:
            history = LossHistory(path)
            history.refresh()

        def build() -> None:
            history = LossHistory(path)
            history.refresh()
            assert save_mirror(history) is None

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
        for p, n in ((long_path, LONG), (short_path, SHORT)):
            open_history(p, min_bytes=0)                  # the mirror, from scratch
        ours = median_time(_open(long_path, LONG), repeat=7)
        base = median_time(_open(short_path, SHORT), repeat=7)
        results.append(Result("mirror", f"open with a valid mirror, {LONG:,} steps ({long_path.stat().st_size >> 20} "
                                        "MiB)", ours, "s", base, f"the same, {SHORT:,} steps", ours / base,
                              "<= 1.50x", ours / base <= 1.5))
    return results
