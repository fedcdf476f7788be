"""A real trainer writes its run directory on one side of a FUSE mount (the compute node) and
the dashboard watches the other side (the login node): no change event ever reaches it."""

from __future__ import annotations

import pytest

from console.tui.app import ConsoleApp
from console.tui.widgets import StatusPane
from rundir.history import read_history_tail
from tests.console.conftest import until
from tests.console.trainer_proc import Trainer
from tests.mounts import bindfs

SIZE = (120, 40)


def file_step(run) -> int:
    steps = read_history_tail(run / ".loss.json").step
    return int(steps[-1]) if len(steps) else -1


def shown_step(app: ConsoleApp) -> int:
    snap = app.snapshot
    return -1 if snap is None or snap.history.last_step is None else snap.history.last_step


@pytest.mark.asyncio
async def test_the_dashboard_follows_a_run_written_behind_a_fuse_mount(tmp_path):
    node = tmp_path / "node" / "run"
    node.parent.mkdir(parents=True)
    with Trainer(node), bindfs(node.parent, tmp_path / "login") as login:
        app = ConsoleApp(login / "run", tick=0.5)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: shown_step(app) >= 0, what="a first step shown")
            await until(pilot, lambda: "polling · fuse" in app.dashboard.query_one(StatusPane)._shown,
                        what="the status saying how the run is watched")
            for _ in range(3):                  # it keeps up, not just once
                target = file_step(node) + 1
                await until(pilot, lambda: shown_step(app) >= target, timeout=60,
                            what=f"step {target} shown (the file's, written behind the mount)")
