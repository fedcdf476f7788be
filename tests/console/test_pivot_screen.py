"""Snapshots of the pivot screen: the policy being edited, invalid input, each step's status.

Deterministic by construction: generated run, fixed clock, no trainer (the steps' status
lines are posted as the runner would post them), run directory named "run".
"""

from __future__ import annotations

import pytest

from console.messages import PivotProgress
from console.pivot_runner import PivotOutcome
from console.screens.pivot_wizard import PivotScreen
from tests.console.conftest import until
from tests.console.test_snapshots import BIG, NARROW, WIDE, app_for, healthy, settled


async def open_pivot(pilot) -> None:
    await settled(pilot)
    await pilot.press("p")
    # the screen opens once the journal has been looked at
    await until(pilot, lambda: isinstance(pilot.app.screen, PivotScreen), 20, "the pivot screen")
    await pilot.pause()


async def type_into(pilot, selector: str, text: str) -> None:
    widget = pilot.app.screen.query_one(selector)
    widget.value = text
    await pilot.pause()


def test_pivot_screen_editing(snap_compare, tmp_path):
    async def edited(pilot):
        await open_pivot(pilot)
        assert isinstance(pilot.app.screen, PivotScreen)
        await type_into(pilot, "#cap-0", "0.5")
        await type_into(pilot, "#floor-2", "0.2")

    assert snap_compare(app_for(healthy(tmp_path)), terminal_size=WIDE, run_before=edited)


def test_pivot_screen_invalid_input(snap_compare, tmp_path):
    async def invalid(pilot):
        await open_pivot(pilot)
        await type_into(pilot, "#floor-0", "0.9")
        await type_into(pilot, "#cap-0", "0.5")
        screen = pilot.app.screen
        assert screen.request is None          # nothing can start while the policy is invalid
        await pilot.press("ctrl+s")
        assert not screen.running

    assert snap_compare(app_for(healthy(tmp_path)), terminal_size=WIDE, run_before=invalid)


@pytest.mark.parametrize("size", [NARROW, WIDE, BIG], ids=["80x24", "140x45", "160x48"])
def test_pivot_screen_steps(snap_compare, tmp_path, size):
    async def steps(pilot):
        await open_pivot(pilot)
        screen = pilot.app.screen
        for key, text in [("plan", "new policy: stdlib-code [0.1, 0.5]"),
                          ("1", "landed at step 3000"), ("2", "stopped; final checkpoint at step P = 3004"),
                          ("3", "archived to archive/pivot_003004_20251129T090000Z/"),
                          ("4", ".loss.json left in place, untouched"), ("5", "run.toml: stdlib-code [0.1, 0.5]"),
                          ("6", "launching the trainer from step_003004.bin with a fresh bandit ...")]:
            screen.post_message(PivotProgress(key, text))
        screen.post_message(PivotProgress("done", "", PivotOutcome(False, "step 6: the trainer exited with code 2 "
                                                                   "instead of resuming; see trainer.log")))
        await pilot.pause()

    # At every size, 80x24 too, the six steps and the outcome are in view under the form.
    assert snap_compare(app_for(healthy(tmp_path)), terminal_size=size, run_before=steps)
