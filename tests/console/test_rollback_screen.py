"""The rollback screen: its proposal (snapshot), bad input, a cancel that changes nothing,
and a rollback of a live trainer past a spike through the screen."""

from __future__ import annotations

import pytest

from console.actions.rollback_runner import RollbackOutcome
from console.tui.app import ConsoleApp
from console.tui.messages import RollbackProgress
from console.tui.options import ConsoleOptions
from console.tui.screens import ConfirmScreen, RollbackScreen
from console.tui.widgets import EventLog
from rundir import verify_trainer
from rundir.layout import LOSS_JSON
from rundir.rollback_files import read_rollback_journal
from tests.console.conftest import until
from tests.console.test_hostile_text import pane_lines
from tests.console.test_rollback_live import SPIKE_END, check_rolled_back, spiky_run  # noqa: F401 (fixture)
from tests.console.test_snapshots import NARROW, WIDE, app_for, healthy, settled, steady_cursors
from tests.rundirs import make_run
from tests.trainer.trainer_runs import snapshot


async def open_rollback(pilot, settle: bool = True) -> RollbackScreen:
    if settle:                   # a generated run: no watcher, every read finishes
        await settled(pilot)
    await pilot.press("r")
    # the screen opens once the journal has been looked at
    await until(pilot, lambda: isinstance(pilot.app.screen, RollbackScreen), 20, "the rollback screen")
    screen = pilot.app.screen
    assert isinstance(screen, RollbackScreen)
    steady_cursors(pilot.app)
    await wait_for_plan(pilot, screen)
    return screen


async def wait_for_plan(pilot, screen: RollbackScreen, before: str = "working out") -> str:
    """The proposal line once it says something other than ``before``."""
    def plan() -> str:
        return str(screen.query_one("#rollback-plan").render())

    await until(pilot, lambda: before not in plan(), 60, "a proposal")
    return plan()


STEPS = [("1", "stopped at step 3,000; its final checkpoint at step 3,000 is kept"),
         ("2", "checkpoints after step 1,500 (steps 2,000, 2,500, 3,000) moved to "
               "archive/rollback_001500_20251129T090000Z/"),
         ("3", "launching the trainer from step_001500.bin skipping 200 batches per arm ...")]


def posting(steps: int, outcome: RollbackOutcome | None = None):
    """A ``run_before`` that opens the screen and posts the first ``steps`` steps' lines
    (and the outcome) as the runner would."""
    async def run_before(pilot):
        screen = await open_rollback(pilot)
        assert screen.request is not None
        for key, text in STEPS[:steps]:
            screen.post_message(RollbackProgress(key, text, under_way=text.endswith(" ...")))   # as the runner says
        if outcome is not None:
            screen.post_message(RollbackProgress("done", "", outcome=outcome))
        await pilot.pause()
    return run_before


def test_rollback_screen_proposal(snap_compare, tmp_path):
    assert snap_compare(app_for(healthy(tmp_path)), terminal_size=WIDE, run_before=posting(3))


def test_rollback_screen_midway_80x24(snap_compare, tmp_path):
    assert snap_compare(app_for(healthy(tmp_path)), terminal_size=NARROW, run_before=posting(2))


def test_rollback_screen_outcome_80x24(snap_compare, tmp_path):
    done = RollbackOutcome(True, "rollback complete: the trainer resumed from step 1,500 skipping 200 batches per "
                                 "arm; checkpoints after it in archive/rollback_001500_20251129T090000Z/", 1500)
    assert snap_compare(app_for(healthy(tmp_path)), terminal_size=NARROW, run_before=posting(3, done))


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
        assert screen.request is None and '"skip batches": \'many\' is not a whole number' in \
            str(screen.query_one("#rollback-plan").render())
        screen.query_one("#rollback-skip").value = ""
        screen.query_one("#rollback-to").value = "1700"
        text = await wait_for_plan(pilot, screen, "is not a whole number")
        # The screen's own fields, not the command line's options.
        assert screen.request is None and '"to step" 1700: there is no complete checkpoint at step 1,700' in text
        assert "--to" not in text
        await pilot.press("ctrl+s")
        assert not screen.running
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen is app.dashboard
    assert snapshot(run) == before


async def _start_and_answer(pilot, screen: RollbackScreen, key: str) -> RollbackOutcome:
    await pilot.press("ctrl+s")
    await until(pilot, lambda: isinstance(pilot.app.screen, ConfirmScreen), 60, "the confirmation")
    await pilot.pause()
    # The question stands over the form, not over the steps.
    assert pilot.app.screen.query_one("#confirm-box").region.bottom <= screen.query_one("#rollback-steps").region.y
    await pilot.press(key)
    await until(pilot, lambda: screen.outcome is not None, 240, "the rollback's outcome")
    # The steps and the outcome are in view above the key bar, at 80x24 too, once the layout has
    # taken the last step's text and the outcome's (a loaded machine lays them out frames later).
    height = pilot.app.size.height

    def in_view() -> bool:
        return (screen.query_one("#rollback-steps").region.y >= 0 and
                0 < screen.query_one("#rollback-outcome").region.bottom <= height - 1)

    await until(pilot, in_view, 60, "the steps and the outcome in view",
                detail=lambda: f"outcome at {screen.query_one('#rollback-outcome').region}: {screen.outcome}; steps: "
                + " | ".join("".join(pane_lines(screen.query_one(f"#rollback-step-{key}"))) for key in "123"))
    return screen.outcome


@pytest.mark.asyncio
async def test_rollback_screen_cancel_then_run_on_a_live_trainer(spiky_run):  # noqa: F811
    run = spiky_run
    app = ConsoleApp(run, ConsoleOptions(tick=0.5))
    async with app.run_test(size=NARROW) as pilot:           # an SSH session's size: the compact screen
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
        steps = ["".join(pane_lines(screen.query_one(f"#rollback-step-{key}"))) for key in "123"]
        assert "stopped at step" in steps[0] and "nothing to stop" not in steps[0]
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen is app.dashboard
        said = [text for text in app.dashboard.query_one(EventLog).texts if "rollback complete" in text]
        assert said and not any("rollback: rollback" in text for text in said), said
    event = check_rolled_back(run, outcome.archive, before)
    assert event["skip_batches"] == SPIKE_END - 40


@pytest.mark.asyncio
async def test_a_refusal_speaks_of_the_screen_s_fields(tmp_path):
    app = app_for(make_run(tmp_path / "run"))                  # no spike: nothing proposed
    async with app.run_test(size=NARROW) as pilot:
        screen = await open_rollback(pilot)
        text = await wait_for_plan(pilot, screen)
        assert "no rollback: no loss spike in the history" in text and 'type a checkpoint\'s step in "to step"' in text
        assert "--to" not in text and screen.request is None


@pytest.mark.asyncio
async def test_another_engine_s_run_says_what_was_found(tmp_path):
    run = make_run(tmp_path / "run", steps=3000, checkpoints=(1000, 2000, 3000), foreign=(1000, 2000, 3000),
                   with_run_toml=False, with_state=False, spikes={2500: 30.0})
    app = app_for(run)
    async with app.run_test(size=NARROW) as pilot:
        screen = await open_rollback(pilot)
        text = " ".join((await wait_for_plan(pilot, screen)).split())
        assert "found the loss spike at step 2,500" in text and "no run.toml" in text and "no such file" not in text
