"""The rollback screen: its proposal (snapshot), bad input, a cancel that changes nothing,
and a rollback of a live trainer past a spike through the screen."""

from __future__ import annotations

import pytest

from console.app import ConsoleApp
from console.messages import RollbackProgress
from console.rollback_runner import RollbackOutcome
from console.screens import ConfirmScreen, RollbackScreen
from rundir import verify_trainer
from rundir.layout import LOSS_JSON
from rundir.rollback_files import read_rollback_journal
from tests.console.conftest import until
from tests.console.test_rollback_live import SPIKE_END, check_rolled_back, spiky_run  # noqa: F401 (fixture)
from tests.console.test_snapshots import WIDE, app_for, healthy, settled
from tests.trainer.trainer_runs import snapshot


async def open_rollback(pilot, settle: bool = True) -> RollbackScreen:
    if settle:                   # a generated run: no watcher, every read finishes
        await settled(pilot)
    await pilot.press("r")
    # the screen opens once the journal has been looked at
    await until(pilot, lambda: isinstance(pilot.app.screen, RollbackScreen), 20, "the rollback screen")
    screen = pilot.app.screen
    assert isinstance(screen, RollbackScreen)
    await wait_for_plan(pilot, screen)
    return screen


async def wait_for_plan(pilot, screen: RollbackScreen, before: str = "working out") -> str:
    """The proposal line once it says something other than ``before``."""
    def plan() -> str:
        return str(screen.query_one("#rollback-plan").render())

    await until(pilot, lambda: before not in plan(), 60, "a proposal")
    return plan()


def test_rollback_screen_proposal(snap_compare, tmp_path):
    async def proposed(pilot):
        screen = await open_rollback(pilot)
        assert screen.request is not None
        screen.post_message(RollbackProgress("1", "no trainer running: nothing to stop"))
        screen.post_message(RollbackProgress("2", "checkpoints after step 1500 (steps 2000, 2500, 3000) moved to "
                                                  "archive/rollback_001500_20251129T090000Z/"))
        screen.post_message(RollbackProgress("3", "launching the trainer from step_001500.bin skipping 200 "
                                                  "batches per arm ..."))
        await pilot.pause()

    assert snap_compare(app_for(healthy(tmp_path)), terminal_size=WIDE, run_before=proposed)


@pytest.mark.asyncio
async def test_bad_fields_and_refusals_start_nothing(tmp_path):
    run = healthy(tmp_path)
    before = snapshot(run)
    app = app_for(run)
    async with app.run_test(size=WIDE) as pilot:
        screen = await open_rollback(pilot)
        assert "roll back to step_001500.bin" in await wait_for_plan(pilot, screen)
        screen.query_one("#rollback-skip").value = "many"
        await pilot.pause()
        assert screen.request is None and "'many' is not a whole number" in str(screen.query_one("#rollback-plan").render())
        screen.query_one("#rollback-skip").value = ""
        screen.query_one("#rollback-to").value = "1700"
        text = await wait_for_plan(pilot, screen, "is not a whole number")
        assert screen.request is None and "no complete checkpoint at step 1700" in text
        await pilot.press("ctrl+s")
        assert not screen.running
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen is app.dashboard
    assert snapshot(run) == before


async def _start_and_answer(pilot, screen: RollbackScreen, key: str) -> RollbackOutcome:
    await pilot.press("ctrl+s")
    await until(pilot, lambda: isinstance(pilot.app.screen, ConfirmScreen), 60, "the confirmation")
    await pilot.press(key)
    await until(pilot, lambda: screen.outcome is not None, 240, "the rollback's outcome")
    return screen.outcome


@pytest.mark.asyncio
async def test_rollback_screen_cancel_then_run_on_a_live_trainer(spiky_run):  # noqa: F811
    run = spiky_run
    app = ConsoleApp(run, tick=0.5)
    async with app.run_test(size=WIDE) as pilot:
        await until(pilot, lambda: app.snapshot is not None and app.snapshot.trainer.state == "running", 30,
                    "the trainer verified running")
        screen = await open_rollback(pilot, settle=False)
        assert "roll back to step_000040.bin" in await wait_for_plan(pilot, screen)
        checkpoints = sorted(p.name for p in run.iterdir() if p.name.startswith("step_"))
        outcome = await _start_and_answer(pilot, screen, "n")
        assert not outcome.ok and "cancelled: nothing changed" in outcome.message
        assert verify_trainer(run).ok and read_rollback_journal(run) == (None, None)
        assert not (run / "archive").exists()
        assert set(checkpoints) <= {p.name for p in run.iterdir() if p.name.startswith("step_")}
        await pilot.press("escape")
        await pilot.pause()

        before = (run / LOSS_JSON).read_bytes()
        screen = await open_rollback(pilot, settle=False)
        outcome = await _start_and_answer(pilot, screen, "y")
        assert outcome.ok, outcome.message
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen is app.dashboard
    event = check_rolled_back(run, outcome.archive, before)
    assert event["skip_batches"] == SPIKE_END - 40
