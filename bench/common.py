"""Shared pieces of the benchmarks: timing by best-of/median and the result table."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable


@dataclass
class Result:
    """One line of the table. ``ratio`` = value / baseline unless given; ``target`` is a
    human-readable bound on the ratio (or value) and ``met`` whether it held."""

    bench: str
    what: str
    value: float
    unit: str
    baseline: float | None = None
    baseline_what: str = ""
    ratio: float | None = None
    target: str = ""
    met: bool | None = None

    def __post_init__(self) -> None:
        if self.ratio is None and self.baseline:
            self.ratio = self.value / self.baseline


def median_time(fn: Callable[[], object], repeat: int = 5, setup: Callable[[], object] | None = None) -> float:
    """Median wall time of ``fn`` over ``repeat`` runs (``setup`` runs untimed before each)."""
    times = []
    for _ in range(repeat):
        if setup is not None:
            setup()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def paired_ratio(fn: Callable[[], object], base: Callable[[], object], repeat: int = 7) -> tuple[float, float, float]:
    """Run ``fn`` and ``base`` alternately; return (median fn, median base, median of the
    per-pair ratios), which cancels most of a noisy machine's drift. A call's time is its
    wall time, or the seconds it returns when it measures a moment inside itself."""
    ours, theirs, ratios = [], [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        base()
        t1 = time.perf_counter()
        measured = fn()
        t2 = time.perf_counter()
        ours.append(measured if isinstance(measured, float) else t2 - t1)
        theirs.append(t1 - t0)
        ratios.append(ours[-1] / theirs[-1])
    return statistics.median(ours), statistics.median(theirs), statistics.median(ratios)


def _fmt(value: float | None, unit: str = "") -> str:
    if value is None:
        return "-"
    if unit == "s":
        return f"{value * 1e3:.2f} ms" if value < 1 else f"{value:.2f} s"
    if abs(value) >= 1000:
        return f"{value:,.0f} {unit}".strip()
    return f"{value:.3g} {unit}".strip()


def print_table(results: list[Result]) -> None:
    """The whole run as one aligned table (ratios first: they are what the targets bound)."""
    rows = [("bench", "measurement", "value", "baseline", "ratio", "target", "")]
    for r in results:
        mark = "" if r.met is None else ("ok" if r.met else "MISSED")
        base = f"{_fmt(r.baseline, r.unit)} {r.baseline_what}".strip() if r.baseline is not None else "-"
        rows.append((r.bench, r.what, _fmt(r.value, r.unit), base,
                     f"{r.ratio:.2f}x" if r.ratio is not None else "-", r.target, mark))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for i, row in enumerate(rows):
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
        if i == 0:
            print("  ".join("-" * w for w in widths))


# Source of ``status(key)``, a byte count from /proc/self/status (VmRSS, VmHWM), for the
# scripts that measure a peak RSS in a fresh process.
PROC_STATUS_SOURCE = """
def status(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
"""
