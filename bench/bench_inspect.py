"""The checkpoint inspector (console.read.checkpoint_inspect) against a bare numpy pass over the same file.

Targets (issue #15): inspecting an andrea-12m checkpoint (every per-tensor statistic and
the totals) costs at most 2x a bare numpy pass over the same file (memory-mapped, the
sum of squares of w, m and v); inspecting a 1.46 GB andrea-120m-sized checkpoint (a
sparse file) peaks under 300 MB of RSS, the whole process counted, measured in a fresh
process.

The comparison is made fair this way: both sides read the same file, from the page
cache (each runs once untimed first); they run alternately, 9 pairs, and the median of
the per-pair ratios is reported, in wall time and in CPU time; and both run in a fresh
process with the same threads. The ratio with the target is single-threaded on both
sides (the inspector with ``threads=1``, numpy's BLAS limited to one thread by
``OPENBLAS_NUM_THREADS=1`` and its kin, set before numpy loads); a second line, for
information, lets both use the machine's CPUs (the inspector on as many threads as CPUs,
BLAS on its default threads).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

import console.read.checkpoint_inspect as inspector
from bench.common import PROC_STATUS_SOURCE, Result
from console.read.checkpoint_inspect import inspect_file
from rundir import ResumeState, RunConfig, checkpoint_path, write_checkpoint
from rundir.checkpoint import HEADER, HEADER_SIZE, expected_size

RSS_LIMIT_MB = 300
ROOT = Path(__file__).resolve().parents[1]

# Run in a fresh process: its peak RSS (VmHWM) is the inspection's, on top of the imports.
_MEASURE = PROC_STATUS_SOURCE + """
import json, sys
from console.read.checkpoint_inspect import inspect_file
before = status("VmRSS")
report = inspect_file(sys.argv[1])
print(json.dumps({"tensors": len(report.tensors), "before": before, "peak": status("VmHWM")}))
"""


def _write_12m(run: Path) -> Path:
    """An andrea-12m checkpoint with its model config, plausible values."""
    config = RunConfig.from_preset("andrea-12m")
    n = config.model.n_params()
    rng = np.random.default_rng(0)
    w = (rng.standard_normal(n, dtype=np.float32) * 0.02).astype(np.float32)
    m = (rng.standard_normal(n, dtype=np.float32) * 1e-3).astype(np.float32)
    v = (m * m * 2).astype(np.float32)
    write_checkpoint(run, 1000, w, m, v, resume=ResumeState(
        config={"model": dataclasses.asdict(config.model), "optimizer": dataclasses.asdict(config.optimizer)},
        adam_step=1000))
    return checkpoint_path(run, 1000)


def _bare_pass(path: Path, n: int) -> None:
    arrays = np.memmap(path, dtype="<f4", mode="r", offset=HEADER_SIZE, shape=(3, n))
    for k in range(3):
        float(np.dot(arrays[k], arrays[k]))
    del arrays


# Run in a fresh process, so that the thread settings take hold before numpy loads.
_TIME = """
import json, statistics, sys, time
from pathlib import Path
import console.read.checkpoint_inspect as inspector
from bench.bench_inspect import _bare_pass
from console.read.checkpoint_inspect import inspect_file
path, n, threads = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
if sys.argv[4] == "numpy":                  # as installed without a C compiler
    inspector._fused_chunk_sums = inspector._fused_pair_sums = None
_bare_pass(path, n)                         # both from the page cache, buffers warm
inspect_file(path, threads=threads)
pairs = []
for _ in range(9):
    t0, c0 = time.perf_counter(), time.process_time()
    _bare_pass(path, n)
    t1, c1 = time.perf_counter(), time.process_time()
    inspect_file(path, threads=threads)
    pairs.append((t1 - t0, time.perf_counter() - t1, c1 - c0, time.process_time() - c1))
median = lambda k: statistics.median(p[k] for p in pairs)
print(json.dumps({"base": median(0), "ours": median(1), "cpu_base": median(2), "cpu_ours": median(3),
                  "ratio": statistics.median(p[1] / p[0] for p in pairs),
                  "cpu_ratio": statistics.median(p[3] / p[2] for p in pairs)}))
"""
_ONE_THREAD = {name: "1" for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}


def _timed(path: Path, n: int, single: bool, summing: str = "fused") -> dict[str, float]:
    """Medians of 9 alternating pairs (bare pass, inspection), single-threaded or not,
    the inspector summing with its fused pass or (``"numpy"``) with numpy's."""
    env = {k: v for k, v in os.environ.items() if k not in _ONE_THREAD}
    env.update(_ONE_THREAD if single else {}, PYTHONPATH=str(ROOT))
    threads = 1 if single else os.cpu_count() or 1
    out = subprocess.run([sys.executable, "-c", _TIME, str(path), str(n), str(threads), summing],
                         capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(out.stderr)
    return json.loads(out.stdout.strip().splitlines()[-1])


def run() -> list[Result]:
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-inspect-") as tmp:
        run_dir = Path(tmp)
        path = _write_12m(run_dir)
        n = RunConfig.from_preset("andrea-12m").model.n_params()
        report = inspect_file(path)
        assert report.layout.kind == "model" and report.tensors[0].update_ratio is not None
        size = f"{path.stat().st_size / 1e6:.0f} MB"
        fused = "fused pass (C)" if inspector._fused_chunk_sums is not None else "numpy passes: NOT BUILT"
        one = _timed(path, n, single=True)
        load = os.getloadavg()[0]           # a loaded machine stretches wall times: say how loaded
        results.append(Result("inspect", f"inspect andrea-12m ({size}, {fused}), both single-threaded "
                                         f"(load {load:.1f})",
                              one["ours"], "s", one["base"], "numpy memmap sum of squares of w, m, v",
                              one["ratio"], "<= 2x", one["ratio"] <= 2.0))
        results.append(Result("inspect", "the same in CPU time", one["cpu_ours"], "s", one["cpu_base"],
                              "numpy pass", one["cpu_ratio"]))
        numpy_only = _timed(path, n, single=True, summing="numpy")
        results.append(Result("inspect", "the same without the C extension (numpy's passes)", numpy_only["ours"],
                              "s", numpy_only["base"], "numpy pass", numpy_only["ratio"]))
        both = _timed(path, n, single=False)
        results.append(Result("inspect", f"the same, both on every CPU (the inspector on {os.cpu_count()} threads)",
                              both["ours"], "s", both["base"], "numpy pass, BLAS threads", both["ratio"]))
        path.unlink()

        n = RunConfig.from_preset("andrea-120m").model.n_params()
        sparse = checkpoint_path(run_dir, 2000)
        with open(sparse, "wb") as fh:              # a header and holes: no disk, but every page is read
            fh.write(HEADER.pack(2000, n))
            fh.truncate(expected_size(n))
        out = subprocess.run([sys.executable, "-c", _MEASURE, str(sparse)], capture_output=True, text=True,
                             cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=600)
        if out.returncode != 0:
            raise RuntimeError(out.stderr)
        measured = json.loads(out.stdout.strip().splitlines()[-1])
        peak_mb = measured["peak"] / 2**20
        results.append(Result("inspect", f"peak RSS inspecting andrea-120m ({expected_size(n) / 1e9:.2f} GB, "
                                         f"sparse; imports {measured['before'] / 2**20:.0f} MB)",
                              peak_mb, "MB", target=f"< {RSS_LIMIT_MB} MB", met=peak_mb < RSS_LIMIT_MB))
    return results
