"""The .loss.json reader against a bare orjson parse of the same bytes.

Targets (issue: foundation): a full parse of a 200,000-entry history costs at most 1.3x
a bare ``orjson.loads`` of the same bytes, for JSON Lines and for a JSON array; picking
up 100 appended lines costs under 1 ms. A JSON array with one ``NaN`` literal (what
Python's ``json.dump`` writes) costs at most 1.3x a bare parse of the same array with
the ``NaN`` made ``null``. A full parse of a large JSON Lines history (1 GiB; the size
in MiB from ``BENCH_HISTORY_MB``) peaks at most 2x its final columns' bytes in RSS,
the whole process counted, measured in a fresh process.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import orjson

from bench.common import PROC_STATUS_SOURCE, Result, paired_ratio
from rundir import LossHistory, LossHistoryWriter
from tests.rundirs import make_run

ENTRIES = 200_000
BIG_MB = int(os.environ.get("BENCH_HISTORY_MB", "1024"))

# Run in a fresh process: its peak RSS (VmHWM) is the parse's, on top of the imports.
_MEASURE = PROC_STATUS_SOURCE + """
import json, sys, time
from rundir import LossHistory
before = status("VmRSS")
start = time.perf_counter()
history = LossHistory(sys.argv[1])
history.refresh()
seconds = time.perf_counter() - start
columns = sum(a.nbytes for a in history.state_dict()[1].values())
print(json.dumps({"rows": len(history), "seconds": seconds, "before": before, "peak": status("VmHWM"),
                  "columns": columns, "bad_lines": history.bad_lines, "error": history.error}))
"""


def _full_read(path: Path) -> None:
    history = LossHistory(path)
    history.refresh()
    assert len(history) == ENTRIES


def _write_big_history(path: Path, target_bytes: int) -> int:
    """A JSON Lines history of about ``target_bytes``, lines like the trainer's; its step count."""
    rng = np.random.default_rng(0)
    losses = [b"%.16g" % x for x in rng.random(4096) * 4 + 2]
    norms = [b"%.16g" % x for x in rng.random(4096)]
    arms = [b"stdlib-docstrings", b"pydoc-topics", b"stdlib-code"]
    line = b'{"step":%d,"loss":%s,"lr":0.003,"grad_norm":%s,"arm":"%s","tokens":%d,"time":%d.5}\n'
    step, written = 0, 0
    with open(path, "wb") as fh:
        fh.write(b'{"event":"start","step":0,"time":1764403200.0}\n')
        while written < target_bytes:
            block = b"".join([line % (s, losses[s & 4095], norms[(s * 7) & 4095], arms[s % 3], s * 512, 1764403200 + s)
                              for s in range(step + 1, step + 50_001)])
            step += 50_000
            if step % 1_000_000 == 0:
                block += b'{"event":"checkpoint","step":%d,"path":"step_%06d.bin"}\n' % (step, step)
            fh.write(block)
            written += len(block)
    return step


def _big_history(tmp: Path) -> list[Result]:
    path = tmp / "big" / ".loss.json"
    path.parent.mkdir()
    steps = _write_big_history(path, BIG_MB << 20)
    size = path.stat().st_size
    out = subprocess.run([sys.executable, "-c", _MEASURE, str(path)], stdout=subprocess.PIPE, text=True,
                         check=True, cwd=Path(__file__).resolve().parents[1])
    path.unlink()
    m = json.loads(out.stdout.strip().splitlines()[-1])
    assert m["rows"] == steps and m["bad_lines"] == 0 and m["error"] is None, m
    mib = 1 << 20
    what = f"{size / mib:,.0f} MiB jsonl ({steps:,} steps)"
    return [Result("history", f"full parse, {what}", m["seconds"], "s"),
            Result("history", f"peak RSS of that parse, whole process ({m['before'] / mib:.0f} MiB before)",
                   m["peak"] / mib, "MiB", m["columns"] / mib, "final columns", target="<= 2.00x",
                   met=m["peak"] <= 2 * m["columns"])]


def _nan_array(tmp: Path) -> Result:
    """Issue 14: one NaN literal in a JSON array must not send the whole array down a slow path."""
    run_dir = make_run(tmp / "nan", steps=ENTRIES, checkpoints=(), n_params=4, history_format="array")
    path = run_dir / ".loss.json"
    data = path.read_bytes()
    at = data.index(b'"loss":', len(data) // 2) + len(b'"loss":')
    end = data.index(b",", at)
    path.write_bytes(data[:at] + b"NaN" + data[end:])
    text = data[:at] + b"null" + data[end:]

    def full_read() -> None:
        history = LossHistory(path)
        history.refresh()
        assert len(history) == ENTRIES and history.bad_lines == 0 and history.nonfinite == 1

    ours, base, ratio = paired_ratio(full_read, lambda: orjson.loads(text), repeat=7)
    return Result("history", f"full parse, 200k entries, array with a NaN ({len(data) >> 20} MiB)", ours, "s", base,
                  "orjson.loads(file, NaN as null)", ratio, "<= 1.30x", ratio <= 1.30)


def run() -> list[Result]:
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for fmt in ("jsonl", "array"):
            run_dir = make_run(Path(tmp) / fmt, steps=ENTRIES, checkpoints=(), n_params=4, history_format=fmt)
            path = run_dir / ".loss.json"
            data = path.read_bytes()
            if fmt == "jsonl":
                # orjson cannot parse JSON Lines in one call; its fastest bare use is one call
                # on the lines joined into an array (faster than one call per line).
                base_what = "orjson.loads(lines as one array)"
                text = b"[" + data.rstrip(b"\n").replace(b"\n", b",") + b"]"
            else:
                base_what = "orjson.loads(file)"
                text = data
            ours, base, ratio = paired_ratio(lambda: _full_read(path), lambda: orjson.loads(text), repeat=7)
            results.append(Result("history", f"full parse, 200k entries, {fmt} ({len(data) >> 20} MiB)",
                                  ours, "s", base, base_what, ratio, "<= 1.30x", ratio <= 1.30))

        # The trainer's own lines: every series it writes (p on each line, the GPU figures every
        # 10 steps, an eval event every 100), each a column.
        run_dir = make_run(Path(tmp) / "series", steps=ENTRIES, checkpoints=(), n_params=4, series=True)
        data = (run_dir / ".loss.json").read_bytes()
        text = b"[" + data.rstrip(b"\n").replace(b"\n", b",") + b"]"
        ours, base, ratio = paired_ratio(lambda: _full_read(run_dir / ".loss.json"), lambda: orjson.loads(text),
                                         repeat=7)
        results.append(Result("history", f"full parse, 200k entries, jsonl with the series ({len(data) >> 20} MiB)",
                              ours, "s", base, "orjson.loads(lines as one array)", ratio, "<= 1.30x", ratio <= 1.30))

        path = Path(tmp) / "jsonl" / ".loss.json"
        history = LossHistory(path)
        history.refresh()
        times = []
        with LossHistoryWriter(path) as writer:
            step = history.last_step or 0
            for _ in range(30):
                for _ in range(100):
                    step += 1
                    writer.step(step, 2.0, 3e-3, 0.5, "stdlib-code", step * 512, time.time())
                start = time.perf_counter()
                update = history.refresh()
                times.append(time.perf_counter() - start)
                assert update.new_steps == 100
        pickup = statistics.median(times)
        results.append(Result("history", "pick up 100 appended lines (median of 30)", pickup, "s",
                              target="< 1 ms", met=pickup < 1e-3))
        results.append(_nan_array(Path(tmp)))
        if BIG_MB > 0:
            results.extend(_big_history(Path(tmp)))
    return results
