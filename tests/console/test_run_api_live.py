"""The dashboard operating a plain PyTorch loop through the run API (examples/train_loop.py):
its loss shown, c answered by a checkpoint in the loop's own format (listed as external,
never one to inspect or resume), s a clean stop with exit status 0."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time

import pytest

from console.model.format import format_float
from console.tui.app import ConsoleApp
from console.tui.options import ConsoleOptions
from console.tui.screens import ConfirmScreen
from console.tui.widgets import CheckpointsPane, EventLog, StatusPane
from rundir import verify_trainer
from rundir.layout import LOSS_JSON
from tests.console.conftest import until as wait_until
from tests.console.trainer_proc import ROOT

SIZE = (140, 45)


def log_text(app: ConsoleApp) -> str:
    return "\n".join(app.dashboard.query_one(EventLog).texts)


async def until(pilot, condition, what: str) -> None:
    await wait_until(pilot, condition, 90.0, what, detail=lambda: log_text(pilot.app))


@pytest.mark.asyncio
async def test_the_dashboard_checkpoints_and_stops_a_plain_loop(tmp_path):
    run = tmp_path / "loop"
    out = open(tmp_path / "loop.out", "wb")
    proc = subprocess.Popen([sys.executable, str(ROOT / "examples" / "train_loop.py"), str(run), "--steps", "10000000"],
                            stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        deadline = time.monotonic() + 90
        while not (verify_trainer(run).ok and (run / LOSS_JSON).exists()):
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "loop.out").read_text()
            time.sleep(0.1)
        app = ConsoleApp(run, ConsoleOptions(tick=0.5))
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.snapshot is not None and app.snapshot.trainer.state == "running"
                        and app.snapshot.history.n_steps > 0, "the loop verified and its steps read")
            status = app.dashboard.query_one(StatusPane)
            await until(pilot, lambda: math.isfinite(app.snapshot.history.last_loss or math.nan) and
                        f"loss {format_float(app.snapshot.history.last_loss)}" in str(status.content),
                        "the status pane showing the loop's loss")
            await pilot.press("c")
            await until(pilot, lambda: "requested checkpoint landed" in log_text(app), "the checkpoint landed")
            landed = app.snapshot.external_checkpoints
            assert len(landed) == 1 and (run / landed[0].path).is_file() and landed[0].size > 0
            assert "external" in log_text(app) and app.snapshot.checkpoints == ()
            pane = app.dashboard.query_one(CheckpointsPane)
            await until(pilot, lambda: "external" in str(pane.content), "the pane lists it")
            assert landed[0].path in str(pane.content) and pane.selected_info() is None
            await pilot.press("s")
            await pilot.pause()
            assert isinstance(app.screen, ConfirmScreen)
            await pilot.press("y")
            await until(pilot, lambda: "exited" in log_text(app) and app.snapshot.trainer.state == "stopped",
                        "the exit said")
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        out.close()
