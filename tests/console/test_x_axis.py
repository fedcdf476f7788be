"""The loss plot's x axis: step, tokens or wall clock, with every marker at its step."""

from __future__ import annotations

import numpy as np
import orjson
import pytest

from console.model.markers import Marker
from console.plot.canvas import PlotOptions, build_canvas, render_runs, x_values
from console.plot.envelope import column_of
from console.tui.widgets.loss_plot import LossPlot
from tests.console.conftest import until
from tests.console.test_snapshots import app_for, settled
from tests.rundirs import RunSpec, make_run


def test_x_values_and_their_fallbacks():
    steps = np.arange(1, 6)
    tokens = np.array([10, 20, 15, 40, 50])             # a count that went back is held, never folds the plot
    assert x_values("tokens", steps, tokens, None)[0].tolist() == [10, 20, 20, 40, 50]
    assert x_values("tokens", steps, np.array([-1, 20, 30, 40, 50]), None)[1] == "step"
    times = np.array([100.0, np.nan, 102.0, 101.0, 200.0])
    x, kind = x_values("time", steps, None, times)
    assert (x.tolist(), kind) == ([100, 100, 102, 102, 200], "time")
    assert x_values("time", steps, None, np.array([np.nan, 1.0, 2.0, 3.0, 4.0]))[1] == "step"


@pytest.mark.parametrize("axis", ["tokens", "time"])
def test_markers_stay_at_their_step_on_every_axis(axis):
    steps = np.arange(1, 201)
    loss = np.full(200, 2.0)
    # A stop of 50 s after step 100 (the resume), and twice the tokens per step after it.
    times = np.where(steps <= 100, 1000.0 + steps, 1050.0 + steps)
    tokens = np.where(steps <= 100, steps * 10, 1000 + (steps - 100) * 20)
    x, kind = x_values(axis, steps, tokens, times)
    assert kind == axis
    markers = [Marker(100, "resume"), Marker(150, "spike"), Marker(180, "rollback")]
    canvas = build_canvas(steps, loss, None, 60, 6, PlotOptions(smoothing=0.0), markers, x=x, x_axis=kind)
    expected = column_of(np.array([x[99], x[149], x[179]]), x[0], x[-1], 60).tolist()
    assert [col for col, _ in canvas.markers] == expected
    assert [k for _, k in canvas.markers] == ["resume", "spike", "rollback"]
    labels = "".join(chunk for chunk, _ in render_runs(canvas)[-1])
    if axis == "time":
        assert ":" in labels                              # clock times, not steps
    else:
        assert "3,000" in labels                          # the last token count


@pytest.mark.asyncio
async def test_the_x_key_cycles_the_axis(tmp_path):
    app = app_for(make_run(tmp_path / "run", RunSpec(steps=300)))
    async with app.run_test(size=(140, 45)) as pilot:
        await settled(pilot)
        plot = app.query_one(LossPlot)
        seen = []
        for _ in range(3):
            await pilot.press("x")
            await pilot.pause()
            seen.append((plot.x_axis, plot.border_subtitle))
        assert [axis for axis, _ in seen] == ["tokens", "time", "step"]
        assert "x: tokens" in seen[0][1] and "x: wall clock" in seen[1][1] and "x:" not in seen[2][1]


def test_once_takes_the_axis_and_the_log_scale_from_flags(tmp_path, capsys):
    """``--once --x-axis tokens --log-y`` draws what the dashboard's x and l keys draw."""
    from console.cli import main

    run = make_run(tmp_path / "run", RunSpec(steps=600))
    assert main([str(run), "--once", "--x-axis", "tokens", "--log-y"]) == 0
    out = capsys.readouterr().out
    assert "loss by tokens (raw + EMA 0.98, log scale;" in out
    axis = out.split("loss by tokens")[1].split("series (")[0].strip().splitlines()[-1]
    assert "k" in axis and "600" not in axis                # token counts, not the steps
    assert main([str(run), "--once", "--x-axis", "time"]) == 0
    assert "loss by wall clock (" in capsys.readouterr().out


def timeless_run(tmp_path):
    """A history whose step lines carry neither a time nor a token count (another engine's)."""
    run = make_run(tmp_path / "run", RunSpec(steps=300))
    lines = [orjson.loads(line) for line in (run / ".loss.json").read_bytes().splitlines() if line.strip()]
    (run / ".loss.json").write_bytes(b"".join(
        orjson.dumps({k: v for k, v in r.items() if k not in ("time", "tokens")}) + b"\n" for r in lines))
    return run


def test_once_says_when_the_history_cannot_give_the_axis_asked_for(tmp_path, capsys):
    from console.cli import main

    run = timeless_run(tmp_path)
    for axis, needs in (("time", "a time"), ("tokens", "a token count")):
        assert main([str(run), "--once", "--x-axis", axis]) == 0
        out = capsys.readouterr().out
        assert f"x axis: step, not {axis}: not every step of the history has {needs}" in out
        assert "loss (raw + EMA" in out                       # drawn by step
    assert main([str(run), "--once"]) == 0
    assert "x axis:" not in capsys.readouterr().out


@pytest.mark.asyncio
async def test_the_plot_says_when_it_draws_by_step_instead(tmp_path):
    app = app_for(timeless_run(tmp_path))
    async with app.run_test(size=(140, 45)) as pilot:
        await settled(pilot)
        plot = app.query_one(LossPlot)
        await pilot.press("x")                                # tokens: there are none
        await until(pilot, lambda: "not every step" in str(plot.border_subtitle), 10, "the subtitle")
        assert "x: step (not every step has a token count)" in str(plot.border_subtitle)
        await pilot.press("x")
        await until(pilot, lambda: "a time)" in str(plot.border_subtitle), 10, "the subtitle")
        await pilot.press("x")                                # back to step: nothing to say
        await pilot.pause()
        assert "x:" not in str(plot.border_subtitle)
