"""The checkpoint inspector (``i``): which checkpoint it opens, sorting, moving between
checkpoints, refusals, and its snapshots (fixed sizes; names only, no paths or clocks)."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.widgets import DataTable, ProgressBar, Static

from console.text.inspect_format import sorted_rows
from console.tui.screens.dashboard import DashboardScreen
from console.tui.screens.inspector import InspectorScreen
from tests.console.conftest import table_measured, until
from tests.console.test_hostile_text import pane_lines
from tests.console.test_snapshots import app_for, live_probe, settled
from tests.rundirs import make_run

WIDE = (160, 48)
NARROW = (80, 24)


def model_run(tmp_path: Path, **overrides) -> Path:
    return make_run(tmp_path / "run", **{"checkpoints": (100, 200, 300), "model_sized": True, **overrides})


async def open_inspector(pilot) -> InspectorScreen:
    await settled(pilot)
    await pilot.press("i")
    await settled(pilot)
    screen = pilot.app.screen
    assert isinstance(screen, InspectorScreen)
    await measured(pilot, screen)
    return screen


async def measured(pilot, screen: InspectorScreen) -> None:
    """Wait until the report (or a refusal) is shown and the table is laid out for it."""
    await until(pilot, lambda: screen.error or (screen.report and table_measured(screen.query_one(DataTable))),
                what="the inspector's table")


def column(table: DataTable, key: str) -> list[str]:
    return [str(table.get_cell(row, key)) for row in table.rows]


@pytest.mark.asyncio
async def test_i_opens_the_newest_complete_checkpoint(tmp_path):
    app = app_for(model_run(tmp_path, truncated=(300,)), live_probe)
    async with app.run_test(size=WIDE) as pilot:
        screen = await open_inspector(pilot)
        assert screen.report is not None and screen.report.checkpoint.step == 200
        table = screen.query_one(DataTable)
        assert table.row_count == 28 and column(table, "tensor")[:2] == ["wte.weight", "wpe.weight"]
        bar = screen.query_one(ProgressBar)
        assert bar.progress == 100 and not bar.display          # it read to the end, then went away
        await pilot.press("escape")
        await pilot.pause()
        assert isinstance(app.screen, DashboardScreen)


@pytest.mark.asyncio
async def test_sorting_by_key_and_by_header_click(tmp_path):
    app = app_for(model_run(tmp_path), live_probe)
    async with app.run_test(size=WIDE) as pilot:
        screen = await open_inspector(pilot)
        table = screen.query_one(DataTable)
        ratios = [t.update_ratio for t in screen.report.tensors]
        # a click on the update_ratio header: largest first, a second click: smallest first
        x = 0
        for key, col in table.columns.items():
            if key.value == "update_ratio":
                break
            x += col.get_render_width(table)
        await pilot.click(DataTable, offset=(x + 2, 0))
        await pilot.pause()
        assert screen.sort_column == "update_ratio" and screen.sort_reverse
        assert [float(v) for v in column(table, "update_ratio")] == \
            [float(f"{r:.4g}") for r in sorted(ratios, reverse=True)]
        await pilot.click(DataTable, offset=(x + 2, 0))
        await pilot.pause()
        assert [float(v) for v in column(table, "update_ratio")] == [float(f"{r:.4g}") for r in sorted(ratios)]
        # s: the next column (count, largest first); r: the other way; "#" is parameter order
        await pilot.press("s")
        assert screen.sort_column == "nonfinite"
        while screen.sort_column != "#":
            await pilot.press("s")
        assert column(table, "#") == [str(i) for i in range(28)]
        await pilot.press("r")
        assert column(table, "#") == [str(i) for i in reversed(range(28))]
        await pilot.press("s")
        assert screen.sort_column == "tensor" and column(table, "tensor") == sorted(column(table, "tensor"))


@pytest.mark.asyncio
async def test_older_newer_and_against(tmp_path):
    app = app_for(model_run(tmp_path), live_probe)
    async with app.run_test(size=WIDE) as pilot:
        screen = await open_inspector(pilot)
        assert screen.report.checkpoint.step == 300
        await pilot.press("right_square_bracket")                # nothing newer: a bell, no change
        await settled(pilot)
        assert screen.report.checkpoint.step == 300
        await pilot.press("a")
        await settled(pilot)
        assert screen.report.against is not None and screen.report.against.step == 200
        assert "w_rel_change" in screen.column_names()
        await pilot.press("left_square_bracket")
        await settled(pilot)
        assert screen.report.checkpoint.step == 200 and screen.report.against.step == 100
        await pilot.press("left_square_bracket")
        await settled(pilot)
        assert screen.report.checkpoint.step == 100 and screen.report.against is None    # nothing before it
        # Keys faster than the reads: what shows is the last asked for, never a read left behind.
        await pilot.press("right_square_bracket", "right_square_bracket", "left_square_bracket")
        await settled(pilot)
        assert screen.report.checkpoint.step == 200 and screen.report.against.step == 100
        assert str(screen.query_one("#inspect-head", Static).render()).startswith("step_000200.bin: step 200")


@pytest.mark.asyncio
async def test_a_clicked_invalid_checkpoint_says_why(tmp_path):
    app = app_for(model_run(tmp_path, truncated=(300,)), live_probe)
    async with app.run_test(size=WIDE) as pilot:
        await settled(pilot)
        await pilot.click("#checkpoints", offset=(4, 2))           # the first row: step 300
        await pilot.pause()
        screen = await open_inspector(pilot)
        assert screen.report is None
        head = str(screen.query_one("#inspect-head", Static).render())
        assert head == "cannot inspect: step_000300.bin: truncated: 612388 bytes, expected 8 + 12 x 51040 = 612488"


@pytest.mark.asyncio
async def test_older_and_newer_move_on_past_an_invalid_checkpoint(tmp_path):
    app = app_for(model_run(tmp_path, truncated=(200,)), live_probe)
    async with app.run_test(size=WIDE) as pilot:
        await settled(pilot)
        await pilot.click("#checkpoints", offset=(4, 3))           # the second row: step 200, invalid
        await pilot.pause()
        screen = await open_inspector(pilot)
        assert screen.report is None and "step_000200.bin: truncated" in screen.error
        await pilot.press("right_square_bracket")
        await settled(pilot)
        await measured(pilot, screen)
        assert screen.report is not None and screen.report.checkpoint.step == 300
        await pilot.press("left_square_bracket")                  # back to the invalid one, then past it
        await settled(pilot)
        await measured(pilot, screen)
        assert screen.report is None and "step_000200.bin" in screen.error
        await pilot.press("left_square_bracket")
        await settled(pilot)
        await measured(pilot, screen)
        assert screen.report is not None and screen.report.checkpoint.step == 100


def drawn_hint(screen: InspectorScreen) -> str:
    return " ".join(pane_lines(screen.query_one("#inspect-columns", Static))).strip()


def first_row_cells(screen: InspectorScreen) -> dict[str, str]:
    """The first row's value in each column, as the report gives them."""
    index, t = sorted_rows(screen.report.tensors, screen.sort_column, screen.sort_reverse)[0]
    return {"#": str(index), **{name: cell(t) for name, cell, _ in screen.columns()}}


def drawn_columns(screen: InspectorScreen, table: DataTable) -> tuple[list[str], str]:
    """The column names the header shows (each must be a whole name) and the first row's line."""
    lines = pane_lines(table)
    names = screen.column_names()
    header = [word for word in lines[0].split() if word not in ("▲", "▼")]
    assert all(word in names for word in header), (header, names)       # no name cut at the edge
    return header, lines[1]


@pytest.mark.asyncio
@pytest.mark.parametrize("size", [NARROW, WIDE], ids=["80x24", "160x48"])
async def test_the_columns_scroll_whole_one_a_key_press_and_the_names_stay(tmp_path, size):
    """→ hides one more column at the left and shows the next whole; no value is cut at the
    edge; "#" and the tensor's name stay; the hint under the table says which are out of view."""
    app = app_for(model_run(tmp_path), live_probe)
    async with app.run_test(size=size) as pilot:
        screen = await open_inspector(pilot)
        await pilot.pause()
        table = screen.query_one(DataTable)
        if size == NARROW:      # the columns read first come right after the name
            assert screen.column_names()[:5] == ["#", "tensor", "update_ratio", "dead_v", "nonfinite"]
        values = first_row_cells(screen)
        first, _ = drawn_columns(screen, table)
        hint = drawn_hint(screen)
        all_shown = first == screen.column_names()
        seen = [first]
        for _ in range(len(screen.column_names())):
            await pilot.press("right")
            await pilot.pause()
            header, row = drawn_columns(screen, table)
            assert header[:2] == ["#", "tensor"]                        # the names stay in view
            assert all(values[name] in row for name in header), (header, row)   # each value whole
            seen.append(header)
        assert seen[-1][-1] == screen.column_names()[-1]                  # the last column is reached
        assert (hint == "") == all_shown, hint
        if not all_shown:
            assert hint.startswith(f"→ {', '.join(screen.column_names()[len(first):])}"), hint
            assert seen[1][2:] != seen[0][2:] and seen[1][2] == seen[0][3]   # one column further per key
            hint = drawn_hint(screen)
            assert hint.startswith(f"← {screen.column_names()[2]}"), hint


@pytest.mark.asyncio
async def test_nothing_to_inspect_is_said(tmp_path):
    app = app_for(make_run(tmp_path / "run", checkpoints=()), live_probe)
    async with app.run_test(size=WIDE) as pilot:
        await settled(pilot)
        await pilot.press("i")
        await pilot.pause()
        assert isinstance(app.screen, DashboardScreen)
        assert "i: no checkpoint to inspect" in "\n".join(app.query_one("#events").texts)


def inspected(keys: tuple[str, ...] = ()):
    async def run_before(pilot) -> None:
        screen = await open_inspector(pilot)
        for key in keys:
            await pilot.press(key)
            await settled(pilot)
            await measured(pilot, screen)
    return run_before


def test_inspector_snapshot(snap_compare, tmp_path):
    assert snap_compare(app_for(model_run(tmp_path), live_probe), terminal_size=WIDE,
                        run_before=inspected(("a", "s", "s", "s", "s", "s", "s", "s", "s", "s")))


def test_inspector_snapshot_80x24(snap_compare, tmp_path):
    assert snap_compare(app_for(model_run(tmp_path), live_probe), terminal_size=NARROW, run_before=inspected())
