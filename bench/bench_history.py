"""The .loss.json reader against a bare orjson parse of the same bytes.

Targets (issue: foundation): a full parse of a 200,000-entry history costs at most 1.3x
a bare ``orjson.loads`` of the same bytes, for JSON Lines and for a JSON array; picking
up 100 appended lines costs under 1 ms.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import orjson

from bench.common import Result, paired_ratio
from tests.rundirs import make_run
from rundir import LossHistory, LossHistoryWriter

ENTRIES = 200_000


def _full_read(path: Path) -> None:
    history = LossHistory(path)
    history.refresh()
    assert len(history) == ENTRIES


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
    return results
