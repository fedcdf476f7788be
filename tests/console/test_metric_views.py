"""What a newcomer sees of the metrics at 80x24 and 160x48: the units of every figure, the
readout at the cursor, the grid's x axes, the table of every series. Pilot tests on generated
runs (tests/rundirs.py), at fixed sizes, reading what the widgets drew."""

from __future__ import annotations

import pytest

from console.widgets import LossPlot
from tests.console.test_snapshots import BIG, NARROW, app_for, settled
from tests.rundirs import RunSpec, make_run


def series_run(tmp_path, steps: int = 1500):
    """A run with every series the trainer writes: p, the GPU figures, an eval every 100 steps."""
    return make_run(tmp_path / "run", RunSpec(steps=steps, checkpoints=(500, 1000, 1500), series=True))


def lines_of(plot: LossPlot) -> list[str]:
    """The plot's lines as drawn (legend or readout, rows, marker row, x labels)."""
    plot._build()
    return ["".join(seg.text for seg in strip) for strip in plot._strips]


def y_labels_of(plot: LossPlot) -> list[str]:
    return [line.split("┤")[0].strip() for line in lines_of(plot) if "┤" in line and line.split("┤")[0].strip()]


@pytest.mark.asyncio
@pytest.mark.parametrize("size", [NARROW, BIG])
async def test_every_figure_reads_in_its_unit(tmp_path, size):
    app = app_for(series_run(tmp_path))
    async with app.run_test(size=size) as pilot:
        await settled(pilot)
        plot = app.dashboard.plot
        plot.series = "gpu_mem_used"            # about 28 GiB, a few hundred bytes apart
        await pilot.pause()
        labels = y_labels_of(plot)
        assert labels and len(set(labels)) == len(labels), labels      # never one label twice
        assert not any("e+" in label for label in labels), labels
        assert "in GiB" in str(plot.border_subtitle)
        plot.series = "tokens_per_s"
        await pilot.pause()
        assert "in tok/s" in str(plot.border_subtitle)
        # The status pane: the history's GPU figures where nvidia-smi says nothing.
        status = app.dashboard.query_one("StatusPane")
        assert "27.94 GiB" in status._shown and "300.5 W" in status._shown and "°C" in status._shown
        assert "n/a" not in status._shown.split("gpu mem")[1].split("\n")[0]


@pytest.mark.asyncio
@pytest.mark.parametrize("size", [NARROW, BIG])
async def test_the_cursor_readout_fits_the_width_and_t_shows_every_series(tmp_path, size):
    from console.model.series import available
    from console.plot_view import readout
    from console.screens.series_table import SeriesTable
    from textual.widgets import DataTable

    app = app_for(series_run(tmp_path))
    async with app.run_test(size=size) as pilot:
        await settled(pilot)
        plot = app.dashboard.plot
        plot.series = "eval_loss"
        await pilot.pause()
        await pilot.press("left")
        await pilot.pause()
        line = lines_of(plot)[0].rstrip()
        parts = line.strip().split(" · ")
        # Every part whole: the step first, the plotted series next, and where the line
        # cannot hold every series, where they are.
        assert parts[0].startswith("step ") and parts[1].startswith("eval loss ")
        assert parts[-1] == "t: every series" and len(line) <= size[0] - 2
        full = readout(app.dashboard.snapshot.history, plot.cursor, plot._markers, first="eval_loss",
                       near=10 ** 9).split(" · ")
        assert set(parts[:-1]) <= set(full) and len(parts) - 1 < len(full)
        await pilot.press("t")
        await pilot.pause()
        assert isinstance(app.screen, SeriesTable)
        table = app.screen.query_one(DataTable)
        names = [table.get_row_at(i)[0] for i in range(table.row_count)]
        assert names == available(app.dashboard.snapshot.history)
        row = {table.get_row_at(i)[0]: table.get_row_at(i) for i in range(table.row_count)}
        assert row["gpu_mem_used"][2].endswith(" GiB") and row["lr"][2] == "3.00e-03"
        assert row["eval_loss"][8] == row["eval_loss"][3] and row["eval_loss"][9] == row["eval_loss"][4]
        assert "cursor at step 1,500" in str(table.border_title)
        await pilot.press("left")
        await pilot.pause()
        assert "cursor at step 1,500" not in str(table.border_title)
        await pilot.press("escape")
        assert not isinstance(app.screen, SeriesTable)


def test_once_has_the_table_of_every_series_in_its_units(tmp_path, capsys):
    from console.cli import main

    assert main([str(series_run(tmp_path)), "--once"]) == 0
    out = capsys.readouterr().out.splitlines()
    at = out.index("series (19; over every step)")
    assert out[at + 1].split() == ["series", "last", "min", "min", "at", "max", "max", "at", "mean", "best", "best",
                                   "at"]
    rows = {line.split()[0]: line for line in out[at + 2:at + 21]}
    assert rows["gpu_mem_used"].split()[1:3] == ["27.94", "GiB"] and "3.00e-03" in rows["lr"]
    assert rows["loss"].split()[-1] == rows["loss"].split()[3]     # the loss's best is its min, at its step


@pytest.mark.asyncio
@pytest.mark.parametrize("axis", ["step", "tokens"])
async def test_the_grid_s_x_axes_line_up_whatever_steps_each_series_has(tmp_path, axis):
    app = app_for(series_run(tmp_path))
    async with app.run_test(size=BIG) as pilot:
        await settled(pilot)
        await pilot.press("g")
        await pilot.pause()
        cells = [app.dashboard.query_one(f"#grid-{i}", LossPlot) for i in range(4)]
        assert [c.series for c in cells][:2] == ["loss", "eval_loss"]      # the eval loss: every 100 steps
        for cell in cells:
            cell.x_axis = axis
        await pilot.pause()
        frames = [(c._frame[0], c._frame[1]) for c in cells]
        assert len(set(frames)) == 1, frames
        assert frames[0][0] == (1 if axis == "step" else 512)
        x_labels = {lines_of(c)[-1].strip() for c in cells}
        assert len(x_labels) == 1, x_labels
        await pilot.press("z")                                     # zoomed: still the same steps
        await pilot.pause()
        assert len({(c._frame[0], c._frame[1]) for c in cells}) == 1
