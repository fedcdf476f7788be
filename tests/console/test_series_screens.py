"""The plots of any series on screen: the series picker, the grid of small plots, zoom, pan
and the cursor, and the comparison on another series than the loss. Snapshots at fixed
sizes from generated runs (tests/rundirs.py), and the keys pressed through the pilot."""

from __future__ import annotations

import pytest

from console.model.series import DEFAULT_GRID
from console.tui.keys import VIEW_KEYS
from console.tui.screens import SeriesPicker
from console.tui.screens.help import KEYS as HELP_KEYS
from console.tui.widgets import LossPlot
from console.tui.widgets.compare_plot import ComparePlot
from rundir import RunConfig, write_run_config
from rundir.config import ConsoleSection
from tests.console.test_overview_snapshots import app_for as overview_app_for
from tests.console.test_overview_snapshots import compared, runs_dir
from tests.console.test_snapshots import BIG, NARROW, app_for, healthy, live_probe, settled

CURSOR_CELL = 40            # where the tests click: the plot's 40th column (after its 8 of labels)


async def zoomed_with_a_cursor(pilot) -> None:
    await settled(pilot)
    await pilot.press("z", "z")
    await pilot.click("#plot", offset=(CURSOR_CELL, 4))
    await pilot.pause()


async def grid_shown(pilot) -> None:
    await settled(pilot)
    await pilot.press("g")
    await pilot.pause()


async def picker_open(pilot) -> None:
    await settled(pilot)
    await pilot.press("m")
    await pilot.pause()


# -- snapshots -------------------------------------------------------------------------

def test_the_grid_of_small_plots_160x48(snap_compare, tmp_path):
    assert snap_compare(app_for(healthy(tmp_path), live_probe), terminal_size=BIG, run_before=grid_shown)


def test_a_zoomed_plot_with_its_cursor_80x24(snap_compare, tmp_path):
    assert snap_compare(app_for(healthy(tmp_path), live_probe), terminal_size=NARROW,
                        run_before=zoomed_with_a_cursor)


def test_the_series_picker_80x24(snap_compare, tmp_path):
    assert snap_compare(app_for(healthy(tmp_path), live_probe), terminal_size=NARROW, run_before=picker_open)


def test_the_comparison_on_grad_norm_160x48(snap_compare, tmp_path):
    async def on_grad_norm(pilot):
        await compared(pilot)
        await pilot.press("m", "down", "enter")
        await pilot.pause()

    assert snap_compare(overview_app_for(runs_dir(tmp_path)), terminal_size=BIG, run_before=on_grad_norm)


# -- keys --------------------------------------------------------------------------------

@pytest.mark.asyncio
async def test_m_picks_the_series_and_the_title_says_which(tmp_path):
    app = app_for(healthy(tmp_path), live_probe)
    async with app.run_test(size=NARROW) as pilot:
        await settled(pilot)
        plot = app.dashboard.plot
        await pilot.press("m")
        await pilot.pause()
        picker = app.screen
        assert isinstance(picker, SeriesPicker)
        assert picker.names[:5] == ["loss", "grad_norm", "lr", "tokens_per_s", "steps_per_s"]
        await pilot.press("down", "down", "down", "enter")
        await pilot.pause()
        assert plot.series == "tokens_per_s" and plot.border_title == "throughput"
        await pilot.press("m", "escape")          # Escape leaves it as it was
        await pilot.pause()
        assert plot.series == "tokens_per_s" and app.screen is app.dashboard


@pytest.mark.asyncio
async def test_zoom_pan_and_back_to_the_whole_history(tmp_path):
    app = app_for(healthy(tmp_path), live_probe)
    async with app.run_test(size=NARROW) as pilot:
        await settled(pilot)
        plot = app.dashboard.plot
        await pilot.press("z")
        await pilot.pause()
        first, last = plot.zoom
        assert last - first == pytest.approx(1500, abs=2) and "steps 7" in plot.border_subtitle
        await pilot.press("comma")
        await pilot.pause()
        assert plot.zoom[0] < first                               # a quarter of the view to the left
        await pilot.press("full_stop", "full_stop")
        await pilot.pause()
        assert plot.zoom[0] > first
        await pilot.press("Z")
        await pilot.pause()
        assert plot.zoom is None                                  # zoomed out to the whole history
        await pilot.press("z", "z", "0")
        await pilot.pause()
        assert plot.zoom is None and plot.cursor is None


@pytest.mark.asyncio
async def test_the_cursor_reads_every_series_and_the_markers_at_its_step(tmp_path):
    app = app_for(healthy(tmp_path), live_probe)
    async with app.run_test(size=NARROW) as pilot:
        await settled(pilot)
        plot = app.dashboard.plot
        await pilot.press("left")                  # no pane focused: the main plot's cursor, at the newest step
        await pilot.pause()
        assert plot.cursor == 3000
        await pilot.click("#plot", offset=(CURSOR_CELL, 4))
        await pilot.pause()
        assert app.focused is plot and plot.cursor is not None
        at = plot.cursor
        await pilot.press("right", "right")
        await pilot.pause()
        assert plot.cursor > at                              # two columns on: about 2 x 3000/72 steps
        # Onto the checkpoint at 2,000 (a marker): the readout names it, with the time and tokens.
        plot.cursor = 2000
        await pilot.pause()
        line = "".join(segment.text for segment in plot.render_line(0))
        # The plotted series' value next to the step; what the pane cannot hold is in t's table.
        assert line.startswith("step 2,000 · loss 1.656 · R resume · ▴ checkpoint · ")
        assert line.rstrip().endswith(" · t: every series") and len(line.rstrip()) <= 78


@pytest.mark.asyncio
async def test_a_mouse_drag_zooms_to_the_steps_it_covers(tmp_path):
    app = app_for(healthy(tmp_path), live_probe)
    async with app.run_test(size=NARROW) as pilot:
        await settled(pilot)
        plot = app.dashboard.plot
        await pilot.mouse_down("#plot", offset=(8 + 10, 4))
        await pilot.mouse_up("#plot", offset=(8 + 30, 4))
        await pilot.pause()
        assert plot.zoom is not None
        first, last = plot.zoom
        assert 300 < first < 500 and 1100 < last < 1400, plot.zoom   # cells 10..30 of 72 over 3,000 steps


@pytest.mark.asyncio
async def test_the_grid_in_the_full_layout_only_and_m_on_a_focused_cell(tmp_path):
    app = app_for(healthy(tmp_path), live_probe)
    async with app.run_test(size=BIG) as pilot:
        await settled(pilot)
        await pilot.press("g")
        await pilot.pause()
        cells = list(app.dashboard.query(".small-plot").results(LossPlot))
        assert [c.series for c in cells] == list(DEFAULT_GRID) and all(c.display for c in cells)
        assert not app.dashboard.plot.display
        await pilot.click("#grid-3", offset=(CURSOR_CELL, 3))          # focuses it, and puts the cursor
        await pilot.press("m")
        await pilot.pause()
        await pilot.press("home", "down", "enter")                     # loss, then grad_norm
        await pilot.pause()
        assert cells[3].series == "grad_norm"
        # The cursor and the zoom are every plot's.
        assert len({c.cursor for c in cells}) == 1 and cells[0].cursor is not None
        await pilot.press("z")
        await pilot.pause()
        assert len({c.zoom for c in cells}) == 1 and cells[0].zoom is not None
        assert "no eval loss in this history" in "".join(
            "".join(s.text for s in cells[1].render_line(y)) for y in range(cells[1].size.height))
    app = app_for(healthy(tmp_path), live_probe)
    async with app.run_test(size=NARROW) as pilot:
        await settled(pilot)
        await pilot.press("g")
        await pilot.pause()
        assert not app.dashboard.grid and app.dashboard.plot.display


@pytest.mark.asyncio
async def test_run_toml_chooses_the_grid_and_says_which_names_the_history_lacks(tmp_path):
    run = healthy(tmp_path)
    config = RunConfig.from_preset("micro")
    config.run.name = "run"
    config.console = ConsoleSection(plots=["lr", "share/stdlib-code", "mfu"])
    write_run_config(run, config)
    app = app_for(run, live_probe)
    async with app.run_test(size=BIG) as pilot:
        await settled(pilot)
        await pilot.press("g")
        await pilot.pause()
        cells = list(app.dashboard.query(".small-plot").results(LossPlot))
        assert [c.series for c in cells[:3]] == ["lr", "share/stdlib-code", "mfu"] and not cells[3].display
        log = app.dashboard.query_one("#events")
        assert any("run.toml [console] plots: no series 'mfu' in this history" in line for line in log.texts)


def test_the_help_lists_the_view_keys():
    helped = dict(HELP_KEYS)
    for key in VIEW_KEYS:
        if key.help:
            assert helped[key.shown_as] == key.help


@pytest.mark.asyncio
async def test_m_on_the_comparison_compares_another_series(tmp_path):
    app = overview_app_for(runs_dir(tmp_path))
    async with app.run_test(size=BIG) as pilot:
        await compared(pilot)
        plot = app.screen.query_one(ComparePlot)
        await pilot.press("m")
        await pilot.pause()
        assert isinstance(app.screen, SeriesPicker) and "tokens_per_s" in app.screen.names
        await pilot.press("down", "enter")
        await pilot.pause()
        assert plot.metric == "grad_norm" and plot.border_title == "grad-norm, compared"


@pytest.mark.asyncio
async def test_the_eval_cell_draws_the_eval_lines_as_a_line(tmp_path):
    from tests.console.test_series import EVALS
    from tests.rundirs import make_run

    app = app_for(make_run(tmp_path / "run", steps=600, events=EVALS), live_probe)
    async with app.run_test(size=BIG) as pilot:
        await settled(pilot)
        await pilot.press("g")
        await pilot.pause()
        cell = app.dashboard.query_one("#grid-1", LossPlot)
        assert cell.series == "eval_loss"
        rows = ["".join(s.text for s in cell.render_line(y)) for y in range(cell.size.height)]
        drawn = {i for row in rows for i, ch in enumerate(row) if "\u2800" < ch <= "\u28ff"}
        assert len(drawn) > 30, rows           # six points, joined across the cell's columns
