"""Spike detection and alert delivery.

Targets (issue 13): spike detection over a 1M-step history costs at most 0.10x the full
parse of that history (same process, paired runs); an alert reaches ``--notify`` less
than 2 s after its line lands in ``.loss.json`` (the median of several spikes, the
dashboard running headless with its file watcher, the command a real subprocess).
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench.common import Result, paired_ratio
from console.model.spikes import find_spikes
from rundir import LossHistory, LossHistoryWriter
from rundir.layout import LOSS_JSON
from tests.rundirs import make_run

STEPS = 1_000_000
SPIKES = 7


def _parse(path: Path) -> LossHistory:
    history = LossHistory(path)
    history.refresh()
    return history


def _detection(tmp: Path) -> Result:
    run = make_run(tmp / "big", steps=STEPS, checkpoints=(), n_params=4, with_state=False, with_samples=False)
    path = run / LOSS_JSON
    history = _parse(path)
    step, loss = history.step, history.loss
    ours, base, ratio = paired_ratio(lambda: find_spikes(step, loss), lambda: _parse(path), repeat=5)
    return Result("alerts", "spike detection, 1M steps", ours, "s", base, "full parse of the same history", ratio,
                  "<= 0.10x", ratio <= 0.10)


_RECEIVER = """
import json, sys, time
got = time.time()
alert = json.loads(sys.stdin.read())
with open(sys.argv[1], "a") as f:
    f.write(json.dumps({"received": got, "key": alert["key"]}) + "\\n")
"""


async def _latencies(run: Path, received: Path) -> list[float]:
    from console.tui.app import ConsoleApp
    from console.tui.options import ConsoleOptions

    app = ConsoleApp(run, ConsoleOptions(bell=False, notify=[sys.executable, "-c", _RECEIVER, str(received)]))
    landed: dict[str, float] = {}
    async with app.run_test(size=(140, 45)) as pilot:
        deadline = time.monotonic() + 60
        while app.snapshot is None and time.monotonic() < deadline:
            await pilot.pause(0.05)
        step = 600
        with LossHistoryWriter(run / LOSS_JSON) as writer:
            for i in range(SPIKES):
                for _ in range(150):            # a quiet stretch, then one spike
                    step += 1
                    writer.step(step, 1.7, 3e-3, 0.5, "a", step * 10, time.time())
                await pilot.pause(1.5)
                step += 1
                writer.step(step, 40.0, 3e-3, 0.5, "a", step * 10, time.time())
                landed[f"spike:{step}"] = time.time()
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline:
                    lines = received.read_text().splitlines() if received.exists() else []
                    if any(json.loads(x)["key"] == f"spike:{step}" for x in lines):
                        break
                    await pilot.pause(0.05)
    got = {d["key"]: d["received"] for d in map(json.loads, received.read_text().splitlines())}
    return [got[key] - at for key, at in landed.items() if key in got]


def _delivery(tmp: Path) -> Result:
    run = make_run(tmp / "live", steps=600, checkpoints=(), n_params=4)
    latencies = asyncio.run(_latencies(run, tmp / "received.jsonl"))
    median = statistics.median(latencies) if len(latencies) == SPIKES else float("inf")
    return Result("alerts", f"spike line landed -> --notify received (median of {SPIKES})", median, "s",
                  target="< 2 s", met=median < 2.0)


def run() -> list[Result]:
    with tempfile.TemporaryDirectory() as tmp:
        return [_detection(Path(tmp)), _delivery(Path(tmp))]
