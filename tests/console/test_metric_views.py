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
