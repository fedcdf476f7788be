"""A real trainer writes its run directory on one side of a FUSE mount (the compute node) and
the console works on the other side (the login node): no change event ever reaches it, and the
mount is another device. The dashboard follows, ``--check`` and the overview read the run, and
``c`` and ``s`` checkpoint and stop the trainer, all through the mount."""

from __future__ import annotations

import subprocess
import sys

import pytest

from console.read.run_summary import summarize_runs
from console.tui.app import ConsoleApp
from console.tui.options import ConsoleOptions
from console.tui.screens import ConfirmScreen
from console.tui.widgets import EventLog, StatusPane
from rundir.history import read_history_tail
from tests.console.conftest import until
from tests.console.trainer_proc import ROOT, Trainer
from tests.mounts import bindfs

SIZE = (120, 40)


def file_step(run) -> int:
    steps = read_history_tail(run / ".loss.json").step
    return int(steps[-1]) if len(steps) else -1


def shown_step(app: ConsoleApp) -> int:
    snap = app.snapshot
    return -1 if snap is None or snap.history.last_step is None else snap.history.last_step


def log_text(app: ConsoleApp) -> str:
    return "\n".join(app.dashboard.query_one(EventLog).texts)


@pytest.mark.asyncio
async def test_the_console_follows_checks_checkpoints_and_stops_a_run_behind_a_fuse_mount(tmp_path):
    node = tmp_path / "node" / "run"
    node.parent.mkdir(parents=True)
    with Trainer(node) as trainer, bindfs(node.parent, tmp_path / "login") as login:
        check = subprocess.run([sys.executable, "-m", "console", str(login / "run"), "--check"], cwd=ROOT,
                               capture_output=True, text=True, timeout=120)
        assert check.returncode == 0, check.stdout + check.stderr
        summaries, _ = summarize_runs(login)
        assert [(s.name, s.trainer_state) for s in summaries] == [("run", "running")]

        app = ConsoleApp(login / "run", ConsoleOptions(tick=0.5))
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: shown_step(app) >= 0, what="a first step shown")
            await until(pilot, lambda: "polling · fuse" in app.dashboard.query_one(StatusPane)._shown,
                        what="the status saying how the run is watched")
            for _ in range(3):                  # it keeps up, not just once
                target = file_step(node) + 1
                await until(pilot, lambda: shown_step(app) >= target, timeout=60,
                            what=f"step {target} shown (the file's, written behind the mount)")
            await until(pilot, lambda: app.snapshot.trainer.state == "running", what="the trainer verified")
            await pilot.press("c")
            await until(pilot, lambda: "requested checkpoint landed" in log_text(app), what="the checkpoint landed",
                        detail=lambda: log_text(app))
            await pilot.press("s")
            await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the stop confirmation")
            await pilot.press("y")
            assert trainer.proc.wait(120) == 0, trainer.output()
            await until(pilot, lambda: app.snapshot.trainer.state == "stopped", what="status: stopped")
