"""What a newcomer sees of the metrics at 80x24 and 160x48: the units of every figure, the
readout at the cursor, the grid's x axes, the table of every series. Pilot tests on generated
runs (tests/rundirs.py), at fixed sizes, reading what the widgets drew."""

from __future__ import annotations

import pytest

from console.tui.widgets import LossPlot
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
    from textual.widgets import DataTable

    from console.model.series import available
    from console.plot.view import readout
    from console.tui.screens.series_table import SeriesTable

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
        names = [str(table.get_row_at(i)[0]) for i in range(table.row_count)]
        assert names == available(app.dashboard.snapshot.history)
        # every column's cells, those out of view too
        row = {key: [str(cell) for cell in cells] for key, cells in table.data_rows}
        assert row["gpu_mem_used"][2].endswith(" GiB") and row["lr"][2] == "3.00e-03"
        assert row["eval_loss"][8] == row["eval_loss"][3] and row["eval_loss"][9] == row["eval_loss"][4]
        assert "cursor at step 1,500" in str(table.border_title)
        await pilot.press("left")
        await pilot.pause()
        assert "cursor at step 1,500" not in str(table.border_title)
        await pilot.press("shift+right")                # the columns past the width, in view
        await pilot.pause()
        assert table.hidden_left == ["at cursor"] or not table.hidden_left and not table.hidden_right
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


@pytest.mark.asyncio
async def test_the_checkpoints_pane_s_age_reads_as_the_status_pane_s(tmp_path):
    from console.read.reader import RunReader
    from console.tui.app import ConsoleApp
    from console.tui.options import ConsoleOptions
    from console.tui.widgets import CheckpointsPane, StatusPane
    from tests.rundirs import EPOCH

    run = make_run(tmp_path / "run", RunSpec(steps=100, checkpoints=(100,)))
    clock = [EPOCH + 50 + 13]                       # the checkpoint at step 100 was written at EPOCH + 50
    reader = RunReader(run, now=lambda: clock[0], free_space=lambda _: 500 << 30)
    app = ConsoleApp(run, ConsoleOptions(now=lambda: clock[0], watch=False, tick=None, reader=reader))
    async with app.run_test(size=BIG) as pilot:
        await settled(pilot)
        for seconds in (16, 19):
            clock[0] = EPOCH + 50 + seconds
            app.dashboard.watch_snapshot(app.dashboard.snapshot)
            await pilot.pause()
            status = app.dashboard.query_one(StatusPane).content.plain
            table = app.dashboard.query_one(CheckpointsPane).content.plain
            assert f"step 100 · {seconds}s ago" in status
            assert table.splitlines()[1].split()[:2] == ["100", f"{seconds}s"], table


def grad_spiked_series_run(tmp_path):
    """The series run with one grad-norm spike at step 1,250 (a ∇ marker)."""
    import json

    run = series_run(tmp_path)
    lines = (run / ".loss.json").read_text().splitlines()
    edited = [json.dumps({**rec, "grad_norm": 50.0}) if (rec := json.loads(line)).get("step") == 1250
              and "loss" in rec else line for line in lines]
    (run / ".loss.json").write_text("\n".join(edited) + "\n")
    return run


@pytest.mark.asyncio
@pytest.mark.parametrize("size", [NARROW, BIG])
async def test_the_legend_names_what_the_plot_draws(tmp_path, size):
    app = app_for(grad_spiked_series_run(tmp_path))
    async with app.run_test(size=size) as pilot:
        await settled(pilot)
        plot = app.dashboard.plot
        legend = lines_of(plot)[0]
        assert "∇ grad-norm spike" in legend and "grad_spike" not in legend
        assert legend.split()[:2] == ["raw", "smoothed"] and "EMA 0.98" in str(plot.border_subtitle)
        plot.series = "eval_loss"                       # every 100 steps: its points joined, not smoothed
        await pilot.pause()
        legend = lines_of(plot)[0]
        await pilot.pause()
        assert legend.split()[:2] == ["points", "joined"] and "smoothed" not in legend
        assert "points joined, not smoothed" in str(plot.border_subtitle)
        assert "EMA" not in str(plot.border_subtitle)


@pytest.mark.asyncio
@pytest.mark.parametrize("size", [NARROW, BIG])
async def test_a_read_only_key_bar_offers_no_key_that_it_refuses(tmp_path, size):
    from console.tui.widgets import KeyBar

    app = app_for(series_run(tmp_path), read_only=True)
    async with app.run_test(size=size) as pilot:
        await settled(pilot)
        bar = str(app.dashboard.query_one(KeyBar).render())
        assert bar.startswith("read-only") and "? help" in bar
        for word in ("checkpoint", "stop", "pivot", "rollback"):
            assert word not in bar, bar


@pytest.mark.asyncio
async def test_the_key_bar_names_the_plot_keys_where_they_fit(tmp_path):
    from console.tui.widgets import KeyBar

    app = app_for(series_run(tmp_path))
    async with app.run_test(size=BIG) as pilot:
        await settled(pilot)
        bar = str(app.dashboard.query_one(KeyBar).render())
        assert "m t z , . 0 ←→ plot" in bar and "1-6 panes" in bar and "⏎ detail" in bar


@pytest.mark.asyncio
async def test_the_series_picker_s_rows_are_one_line_each_at_160_columns(tmp_path):
    from textual.widgets import OptionList

    app = app_for(series_run(tmp_path))
    async with app.run_test(size=BIG) as pilot:
        await settled(pilot)
        await pilot.press("m")
        await pilot.pause()
        options = app.screen.query_one(OptionList)
        assert options.option_count == 19
        assert options.virtual_size.height == options.option_count         # no row wraps
        assert options.size.width >= len("eval_loss/stdlib-docstrings  eval loss · stdlib-docstrings")


def test_checkpoints_moved_to_an_archive_are_said_moved_and_a_stop_says_how_to_resume(tmp_path):
    from console.model.snapshot import TrainerView
    from console.read.reader import RunReader
    from tests.console.test_snapshots import live_probe

    run = make_run(tmp_path / "run", RunSpec(steps=300, checkpoints=(100, 200, 300)))
    views = [live_probe(run)]
    reader = RunReader(run, probe=lambda _: views[0])
    reader.read()
    archive = run / "archive" / "rollback_000200_20251129T090000Z"
    archive.mkdir(parents=True)
    for suffix in (".bin", ".json"):
        (run / f"step_000300{suffix}").rename(archive / f"step_000300{suffix}")
    (run / "step_000100.json").unlink()
    (run / "step_000100.bin").unlink()
    views[0] = TrainerView(state="stopped", label="stopped", reason="no trainer record")
    _, notices = reader.read()
    texts = [n.text for n in notices]
    assert "1 checkpoint file moved to archive/rollback_000200_20251129T090000Z/, not deleted: step_000300.bin" \
        in texts, texts
    assert "checkpoint removed: step_000100.bin" in texts and "checkpoint removed: step_000300.bin" not in texts
    assert f"to resume: andrea-console {run} --start (it goes on from step_000200.bin)" in texts, texts


# -- the comparison, as the dashboard ---------------------------------------------------------

def compare_runs(tmp_path):
    """A 3,000-step run and a 600-step one, both with an eval every 100 steps."""
    root = tmp_path / "runs"
    make_run(root / "long", RunSpec(steps=3000, checkpoints=(1000, 2000, 3000), series=True, seed=1))
    make_run(root / "short", RunSpec(steps=600, checkpoints=(300, 600), series=True, seed=2))
    return root


async def comparing(pilot):
    from console.tui.widgets.compare_plot import ComparePlot

    app = pilot.app
    await app.workers.wait_for_complete()
    await pilot.pause()
    for name in ("long", "short"):
        app.overview.table.move_cursor(row=next(i for i, s in enumerate(app.summaries) if s.name == name),
                                       animate=False)
        await pilot.press("space")
    await pilot.press("v")
    await app.workers.wait_for_complete()
    await pilot.pause()
    plot = app.screen.query_one(ComparePlot)
    assert plot.series is not None
    return plot


def drawn_columns(plot) -> list[int]:
    """The cell columns of the plot area that hold a dot of any run."""
    rows = [line for line in plot.render().plain.splitlines()[1:] if "┤" in line]
    cols = set()
    for line in rows:
        area = line.split("┤", 1)[1]
        cols |= {i for i, ch in enumerate(area) if "\u2800" < ch <= "\u28ff"}
    return sorted(cols)


@pytest.mark.asyncio
@pytest.mark.parametrize("size", [NARROW, BIG])
async def test_the_comparison_zooms_pans_and_reads_every_run_at_its_cursor(tmp_path, size):
    from console.tui.app import ConsoleApp
    from console.tui.options import ConsoleOptions
    from tests.console.conftest import fixed_now

    app = ConsoleApp(compare_runs(tmp_path),
                     ConsoleOptions(now=fixed_now, watch=False, tick=None, free_space=lambda _: 500 << 30))
    async with app.run_test(size=size) as pilot:
        plot = await comparing(pilot)
        assert "EMA 0.98" in str(plot.border_subtitle)             # the dashboard's smoothing
        await pilot.press("m", "down", "enter")                     # eval_loss: every 100 steps
        await pilot.pause()
        assert plot.metric == "eval_loss"
        cols = drawn_columns(plot)
        assert cols == list(range(cols[0], cols[-1] + 1)), cols     # joined into a line, not dots
        # z zooms to half the evals' 100..3,000 and , pans it left: the short run is no more a fifth.
        await pilot.press("Z", "z", "comma", "comma")
        await pilot.pause()
        assert plot.zoom == (101, 1551) and "101..1,551" in str(plot.border_subtitle)
        await pilot.press("left")
        await pilot.pause()
        legend = plot.render().plain.splitlines()[0]
        assert legend.strip().startswith("step 1,551") and "■ long" in legend and "■ short -" in legend
        plot.cursor = 400.0                                         # as a click there would
        await pilot.pause()
        legend = plot.render().plain.splitlines()[0].split()
        # Inside both runs: a value for each.
        assert legend[legend.index("long") + 1] != "-" and legend[legend.index("short") + 1] != "-", legend
        await pilot.press("e")
        await pilot.pause()
        assert "EMA 0.995" in str(plot.border_subtitle)
        await pilot.press("x", "x")
        await pilot.pause()
        assert "x: time since start" in str(plot.border_subtitle) and plot.zoom is None
        await pilot.press("0")
        assert plot.cursor is None


@pytest.mark.asyncio
@pytest.mark.parametrize("size", [NARROW, BIG])
async def test_the_series_table_keeps_its_columns_across_new_steps_and_cuts_no_value(tmp_path, size):
    """On a live run the table is filled again as steps come: Shift+→ stays where it was
    put, the series' names stay in view, every column in view is whole, and the last
    columns (max, mean, best) are reached."""
    import orjson

    from console.tui.messages import SnapshotReady
    from console.tui.screens.series_table import HEADERS
    from rundir.layout import HISTORY, LOSS_JSON
    from tests.console.test_hostile_text import pane_lines

    run = series_run(tmp_path)
    app = app_for(run)
    async with app.run_test(size=size) as pilot:
        await settled(pilot)
        await pilot.press("t")
        await pilot.pause()
        table = app.screen.query_one("#series-table")

        def header() -> list[str]:
            """The column names drawn, each whole (a cut one is not a header)."""
            line = pane_lines(table)[1].strip("┃│█▌▐ ")
            words, names = line.split(), []
            while words:
                two = " ".join(words[:2])
                names.append(two if two in HEADERS else words[0])
                del words[:2 if two in HEADERS else 1]
                assert names[-1] in HEADERS, line
            return names

        first = header()
        for _ in range(2):
            await pilot.press("shift+right")
        await pilot.pause()
        scrolled = header()
        with open(run / LOSS_JSON, "ab") as fh:          # the trainer logs more steps
            for step in range(1501, 1511):
                fh.write(orjson.dumps({"step": step, "loss": 2.0, "lr": 3e-3, "time": 1e9 + step}) + b"\n")
        snap, notices = app.reader.read({HISTORY})
        app.on_snapshot_ready(SnapshotReady(snap, notices))
        await pilot.pause()
        app.screen.fill()                               # the screen's refresh, as its timer calls it
        await pilot.pause()
        assert snap.history.last_step == 1510 and app.screen._shown[0] == snap.versions.get("history")
        assert header() == scrolled and scrolled[0] == "series"
        if size == NARROW:
            assert scrolled != first and scrolled[1:] != first[1:]
        seen = set(first) | set(scrolled)
        for _ in HEADERS:
            await pilot.press("shift+right")
            await pilot.pause()
            seen |= set(header())
        last = header()
        assert last[0] == "series" and last[-1] == "best at" and seen == set(HEADERS)


@pytest.mark.asyncio
@pytest.mark.parametrize("size", [NARROW, BIG])
async def test_a_constant_learning_rate_is_one_flat_line_on_its_own_label_in_both_scales(tmp_path, size):
    """lr is 3e-3 at every step and its EMA, kept in float32, 3.0000000026e-3: that rounding
    is no rise. The line is drawn on one row, the one labelled 0.003, and no two labels are
    the same, in linear and in log y."""
    app = app_for(series_run(tmp_path))
    async with app.run_test(size=size) as pilot:
        await settled(pilot)
        plot = app.dashboard.plot
        plot.series = "lr"
        await pilot.pause()
        for scale in ("linear", "log"):
            labels = y_labels_of(plot)
            assert len(labels) >= 2 and len(set(labels)) == len(labels), (scale, labels)
            assert all(float(label) > 0 for label in labels), (scale, labels)
            rows = [line.split("┤") for line in lines_of(plot) if "┤" in line]
            drawn = [label.strip() for label, dots in rows if dots.strip()]
            assert drawn == ["0.003"], (scale, drawn)
            await pilot.press("l")
            await pilot.pause()
