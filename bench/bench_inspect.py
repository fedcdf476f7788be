"""The checkpoint inspector (rundir.inspect) against a bare numpy pass over the same file.

Targets (issue #15): inspecting an andrea-12m checkpoint (every per-tensor statistic and
the totals) costs at most 2x a bare numpy pass over the same file (memory-mapped, the
sum of squares of w, m and v), both from the page cache; inspecting a 1.46 GB
andrea-120m-sized checkpoint (a sparse file) peaks under 300 MB of RSS, the whole
process counted, measured in a fresh process.
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.common import Result, paired_ratio
from rundir import RunConfig, checkpoint_path, write_checkpoint
from rundir.checkpoint import HEADER, HEADER_SIZE, expected_size
from rundir.inspect import inspect_file

RSS_LIMIT_MB = 300
ROOT = Path(__file__).resolve().parents[1]

# Run in a fresh process: its peak RSS (VmHWM) is the inspection's, on top of the imports.
_MEASURE = """
import json, sys
def status(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
from rundir.inspect import inspect_file
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
    write_checkpoint(run, 1000, w, m, v, resume={
        "config": {"model": dataclasses.asdict(config.model), "optimizer": dataclasses.asdict(config.optimizer)},
        "adam_step": 1000})
    return checkpoint_path(run, 1000)


def _bare_pass(path: Path, n: int) -> None:
    arrays = np.memmap(path, dtype="<f4", mode="r", offset=HEADER_SIZE, shape=(3, n))
    for k in range(3):
        float(np.dot(arrays[k], arrays[k]))
    del arrays


def run() -> list[Result]:
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-inspect-") as tmp:
        run_dir = Path(tmp)
        path = _write_12m(run_dir)
        n = RunConfig.from_preset("andrea-12m").model.n_params()
        _bare_pass(path, n)                       # both from the page cache
        report = inspect_file(path)
        assert report.layout.kind == "model" and report.tensors[0].update_ratio is not None
        ours, base, ratio = paired_ratio(lambda: inspect_file(path), lambda: _bare_pass(path, n), repeat=9)
        # The inspection sums on a few threads: how many CPUs there are, and how busy, matters.
        load = os.getloadavg()[0]
        results.append(Result("inspect", f"inspect andrea-12m ({path.stat().st_size / 1e6:.0f} MB; "
                                         f"{os.cpu_count()} CPUs, load {load:.1f})", ours, "s", base,
                              "numpy memmap sum of squares of w, m, v", ratio, "<= 2x", ratio <= 2.0))
        # The same pair in CPU seconds (every thread of the process): what the inspection
        # costs whatever else the machine runs.
        cpu_ours, cpu_base = [], []
        for _ in range(9):
            t0 = time.process_time()
            _bare_pass(path, n)
            t1 = time.process_time()
            inspect_file(path)
            cpu_base.append(t1 - t0)
            cpu_ours.append(time.process_time() - t1)
        cpu_ratio = statistics.median(a / b for a, b in zip(cpu_ours, cpu_base))
        results.append(Result("inspect", "the same in CPU time (all threads)", statistics.median(cpu_ours), "s",
                              statistics.median(cpu_base), "numpy pass", cpu_ratio))
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
