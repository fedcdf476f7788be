"""Snapshots of the pivot screen: the policy being edited, invalid input, each step's status,
the confirmation over the form at 80x24; its fields and drop boxes read as text.

Deterministic by construction: generated run, fixed clock, no trainer (the steps' status
lines are posted as the runner would post them), run directory named "run".
"""

from __future__ import annotations

import pytest

from console.actions.pivot_runner import PivotOutcome
from console.tui.messages import PivotProgress
from console.tui.screens import ConfirmScreen
from console.tui.screens.pivot_wizard import PivotScreen
from tests.console.conftest import until
from tests.console.test_hostile_text import pane_lines
from tests.console.test_snapshots import BIG, NARROW, WIDE, app_for, healthy, settled, steady_cursors


async def open_pivot(pilot) -> None:
    await settled(pilot)
    await pilot.press("p")
    # the screen opens once the journal has been looked at
    await until(pilot, lambda: isinstance(pilot.app.screen, PivotScreen), 20, "the pivot screen")
    steady_cursors(pilot.app)
    await pilot.pause()


def screen_lines(app) -> list[str]:
    """The screen in front as plain text, one string per line, as a terminal shows it."""
    return ["".join(segment.text for segment in strip) for strip in app.screen._compositor.render_strips()]


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
                          ("1", "landed at step 3,000"), ("2", "stopped; final checkpoint at step P = 3,004"),
                          ("3", "archived to archive/pivot_003004_20251129T090000Z/"),
                          ("4", ".loss.json left in place, untouched"), ("5", "run.toml: stdlib-code [0.1, 0.5]"),
                          ("6", "launching the trainer from step_003004.bin with a fresh bandit ...")]:
            screen.post_message(PivotProgress(key, text, under_way=text.endswith(" ...")))   # as the runner says
        screen.post_message(PivotProgress("done", "", PivotOutcome(False, "step 6: the trainer exited with code 2 "
                                                                   "instead of resuming; see trainer.log")))
        await pilot.pause()

    # At every size, 80x24 too, the six steps and the outcome are in view under the form.
    assert snap_compare(app_for(healthy(tmp_path)), terminal_size=size, run_before=steps)


def test_pivot_screen_asking_before_the_stop_80x24(snap_compare, tmp_path):
    """Mid-way: the audit checkpoint landed, the question before the stop stands over the
    form, and step 1's line stays in view under it."""
    async def asking(pilot):
        await open_pivot(pilot)
        screen = pilot.app.screen
        screen.post_message(PivotProgress("plan", "new policy: stdlib-code [0.1, 0.5]"))
        screen.post_message(PivotProgress("1", "landed at step 3,000"))
        screen.post_message(PivotProgress("2", "SIGTERM sent; waiting for the final checkpoint and the exit ...",
                                          under_way=True))
        await pilot.pause()
        pilot.app.push_screen(ConfirmScreen("Stop trainer pid 4242? It writes its final checkpoint and exits.",
                                            screen.CONFIRM_DETAIL, at_top=True))
        await pilot.pause()
        box = pilot.app.screen.query_one("#confirm-box").region
        assert box.bottom <= screen.query_one("#pivot-steps").region.y

    assert snap_compare(app_for(healthy(tmp_path)), terminal_size=NARROW, run_before=asking)


@pytest.mark.asyncio
async def test_fields_and_drop_boxes_read_as_text_at_80x24(tmp_path):
    """On a low-contrast terminal, or copied as text: each one-line field shows where it
    starts and ends, and a ticked drop box differs from an unticked one by a glyph."""
    app = app_for(healthy(tmp_path))
    async with app.run_test(size=NARROW) as pilot:
        await open_pivot(pilot)
        screen = pilot.app.screen
        row = screen_lines(pilot.app)[screen.query_one("#cap-0").region.y]
        assert "stdlib-code" in row and "│0.8" in row and "│0.1" in row and row.count("│") == 4, row
        assert "".join(pane_lines(screen.query_one("#drop-0"))).strip() == "[ ] drop"
        # The first field has the keys: what is typed replaces its value.
        assert pilot.app.focused is screen.query_one("#cap-0")
        await pilot.press("0", ".", "6")
        assert screen.query_one("#cap-0").value == "0.6"
        screen.query_one("#drop-1").focus()
        await pilot.press("space")
        await pilot.pause()
        assert "".join(pane_lines(screen.query_one("#drop-1"))).strip() == "[x] drop"
        assert screen.request is not None and screen.request.drop == ["stdlib-docstrings"]


ARCHIVE = "archive/pivot_003004_20251129T090000Z"
COMPLETED = [("1", "landed at step 3,000"), ("2", "stopped; final checkpoint at step P = 3,004"),
             ("3", f"archived to {ARCHIVE}/"), ("4", ".loss.json left in place, untouched"),
             ("5", "run.toml: stdlib-code [0.1, 0.5]"),
             ("6", "running again from step 3,004, bandit fresh under the new policy")]


@pytest.mark.asyncio
@pytest.mark.parametrize("size", [NARROW, BIG], ids=["80x24", "160x48"])
async def test_a_completed_pivot_offers_no_start_and_keeps_its_archive_path_whole(tmp_path, size):
    """Once the pivot is over the key bar offers only the way back (ctrl+s would start
    nothing), and no line breaks the archive's name in two: a step's narrow column shows its
    end after "…", the outcome says it in full."""
    app = app_for(healthy(tmp_path))
    async with app.run_test(size=size) as pilot:
        await open_pivot(pilot)
        screen = pilot.app.screen
        assert "start pivot" in screen_lines(pilot.app)[-1]          # ready: ctrl+s is offered
        for key, text in COMPLETED:
            screen.post_message(PivotProgress(key, text))
        screen.post_message(PivotProgress("done", "", PivotOutcome(
            True, f"pivot complete: the trainer resumed from step 3,004 with a fresh bandit; archive {ARCHIVE}/")))
        await pilot.pause()
        lines = screen_lines(pilot.app)
        assert "start pivot" not in lines[-1] and "back" in lines[-1], lines[-1]
        named = [line for line in lines if "pivot_" in line or "090000Z" in line]
        assert named and all("20251129T090000Z/" in line for line in named), named
        assert any(ARCHIVE in line for line in named), named
