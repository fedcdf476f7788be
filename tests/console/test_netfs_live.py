"""The production setting, on this machine: the trainer writes its run directory through one
client of an NFS-like filesystem (tests/netfs.py: flock refused), the dashboard watches it
through another client of the same files (attributes cached, another client's appends read as
NUL bytes for a while, no change events). Checkpoint-now, a clean stop and a resume all work
through it, and the history the dashboard shows is the file's, line for line."""

from __future__ import annotations

import numpy as np
import pytest

from console.tui.app import ConsoleApp
from console.tui.options import ConsoleOptions
from console.tui.screens import ConfirmScreen
from console.tui.widgets import EventLog
from rundir import LossHistory
from tests.console.conftest import until
from tests.console.trainer_proc import Trainer

SIZE = (120, 40)


def log_text(app: ConsoleApp) -> str:
    return "\n".join(app.dashboard.query_one(EventLog).texts)


def shown_step(app: ConsoleApp) -> int:
    snap = app.snapshot
    return -1 if snap is None or snap.history.last_step is None else snap.history.last_step


async def stop_with_s(pilot, app: ConsoleApp, trainer: Trainer) -> None:
    await pilot.press("s")
    await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the stop confirmation")
    await pilot.press("y")
    assert trainer.proc.wait(120) == 0, trainer.output()
    await until(pilot, lambda: app.snapshot.trainer.state == "stopped", what="status: stopped",
                detail=lambda: log_text(app))


@pytest.mark.asyncio
async def test_train_checkpoint_stop_and_resume_watched_through_another_client(mount_netfs):
    backing, compute_node = mount_netfs(refuse_flock=True, attr_timeout=0.2)
    _, login_node = mount_netfs(backing, refuse_flock=True, attr_timeout=1.0, nul_window=1.0)
    app = ConsoleApp(login_node / "run", ConsoleOptions(tick=0.5))
    async with app.run_test(size=SIZE) as pilot:
        with Trainer(compute_node / "run") as trainer:
            await until(pilot, lambda: app.snapshot is not None and app.snapshot.trainer.state == "running",
                        what="the trainer verified through the other client", detail=lambda: log_text(app))
            await until(pilot, lambda: app.dashboard.watched_by == "polling · fuse", what="watched by polling")
            await until(pilot, lambda: shown_step(app) >= 200, what="200 steps shown")
            await pilot.press("c")
            await until(pilot, lambda: "requested checkpoint landed" in log_text(app), what="checkpoint landed",
                        detail=lambda: log_text(app))
            await stop_with_s(pilot, app, trainer)
        stopped_at = shown_step(app)
        with Trainer(compute_node / "run") as trainer:          # resumes from the final checkpoint
            await until(pilot, lambda: app.snapshot.trainer.state == "running", what="the resumed trainer")
            await until(pilot, lambda: shown_step(app) >= stopped_at + 200, what="200 more steps shown")
            await stop_with_s(pilot, app, trainer)
        written = LossHistory(backing / "run" / ".loss.json")
        written.refresh()
        await until(pilot, lambda: shown_step(app) == written.last_step, what="the last step shown")
        assert any(e.event == "resume" for e in written.events)
        steps, losses = app.snapshot.history.column("loss")
        assert np.array_equal(steps, written.step)
        assert np.array_equal(losses, written.loss, equal_nan=True)
        assert app.snapshot.history.bad_lines == 0 and app.snapshot.history.torn_tail == 0
