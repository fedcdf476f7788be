"""The plot, its ticks, its three x axes, log y, the comparison overlay and every formatter
take any float a file can hold (NaN, +-inf, +-1e308, subnormals, -0.0) without an exception,
and say honestly what they could not draw. ``FUZZ_EXAMPLES`` sets the cases per property."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from console.model.format import (
    X_AXES,
    format_age,
    format_ago,
    format_float,
    format_pct,
    format_rate,
    format_size,
    format_uptime,
)
from console.plot.canvas import (
    PlotOptions,
    build_canvas,
    format_step,
    format_value,
    format_x,
    nice_ticks,
    plot_x,
    render_runs,
    y_labels,
)
from console.plot.ema import ema_debiased
from console.plot.envelope import PLOT_LIMIT
from console.plot.overlay import build_overlay, render_overlay_runs
from console.read.reader import RunReader
from console.text.run_report import render_text, to_json
from tests.console.conftest import NOW

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "300"))
fuzz = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# The costlier properties (two histories, or files and the whole reader) take a third as many.
fuzz_fewer = settings(fuzz, max_examples=max(1, EXAMPLES // 3))

EDGES = [1e308, -1e308, 1.7976931348623157e308, 5e-324, -5e-324, 2.2250738585072014e-308, -0.0, 0.0, PLOT_LIMIT,
         -PLOT_LIMIT, 1.0000001e300, 1e20, -1e20, math.nan, math.inf, -math.inf, 2.0]
ANY_FLOAT = st.one_of(st.floats(allow_nan=True, allow_infinity=True, allow_subnormal=True), st.sampled_from(EDGES))
WIDTH, HEIGHT, LABEL = 40, 8, 8


@st.composite
def histories(draw):
    n = draw(st.integers(1, 40))
    steps = np.array(sorted(draw(st.sets(st.integers(0, 2**62), min_size=n, max_size=n))), np.int64)
    loss = np.array(draw(st.lists(ANY_FLOAT, min_size=n, max_size=n)), np.float64)
    times = np.array(draw(st.lists(ANY_FLOAT, min_size=n, max_size=n)), np.float64)
    tokens = np.array(draw(st.lists(st.integers(-1, 2**63 - 1), min_size=n, max_size=n)), np.int64)
    return steps, loss, times, tokens


def _width_of(runs) -> int:
    return sum(len(text) for text, _ in runs)


@fuzz
@given(histories(), st.sampled_from(X_AXES), st.booleans(), st.sampled_from([None, 5]), st.sampled_from([0.0, 0.98]))
def test_the_plot_draws_any_history(history, axis, log_y, window, smoothing):
    steps, loss, times, tokens = history
    smooth, _ = ema_debiased(loss, smoothing) if smoothing else (None, None)
    x, shown_axis = plot_x(axis, steps, tokens, times)
    options = PlotOptions(log_y=log_y, window=window, smoothing=smoothing)
    canvas = build_canvas(steps, loss, smooth, WIDTH, HEIGHT, options, x=x, x_axis=shown_axis)
    lines = render_runs(canvas, label_width=LABEL)
    assert len(lines) == HEIGHT + 2
    assert all(_width_of(runs) == LABEL + WIDTH for runs in lines), [_width_of(r) for r in lines]
    first = 0 if window is None else int(np.searchsorted(steps, steps[-1] - window + 1))
    beyond = np.isfinite(loss[first:]) & (np.abs(loss[first:]) > PLOT_LIMIT)
    if beyond.any():           # one honest line: how many values it left out
        said = canvas.empty_reason or canvas.note
        n = int(beyond.sum())
        assert f"{n:,} value{'' if n == 1 else 's'} beyond ±1e+300 not plotted" == said
    if smooth is not None:
        assert not (np.abs(smooth[np.isfinite(smooth)]) > PLOT_LIMIT).any()


@fuzz_fewer
@given(histories(), histories(), st.booleans())
def test_the_comparison_overlays_any_histories(a, b, log_y):
    overlay = build_overlay([(a[0], a[1]), (b[0], b[1])], WIDTH, HEIGHT, log_y=log_y)
    lines = render_overlay_runs(overlay, label_width=LABEL)
    assert len(lines) == HEIGHT + 2 and all(_width_of(runs) == LABEL + WIDTH for runs in lines)


@fuzz
@given(ANY_FLOAT, ANY_FLOAT, st.integers(1, 12), st.booleans())
@example(1.8e-146, 3.2e-142, 5, False)          # rounding to 12 decimals made every tick 0.0
def test_ticks_and_labels_take_any_range(lo, hi, rows, log_y):
    ticks = nice_ticks(lo, hi, rows)
    slack = (hi - lo) * 1e-6 if ticks else 0.0          # round values within a millionth of the span
    assert len(ticks) <= rows and all(math.isfinite(t) and lo - slack <= t <= hi + slack for t in ticks)
    labels = y_labels(lo, hi, rows, log_y)
    assert all(0 <= row < rows and len(text) < 16 for row, text in labels.items())


@fuzz
@given(ANY_FLOAT, ANY_FLOAT)
def test_every_formatter_takes_any_float(value, span):
    texts = [format_float(value), format_float(value, ".2f"), format_rate(value, "steps"), format_age(value),
             format_ago(value), format_uptime(value), format_pct(value), format_value(value),
             format_value(value, log_y=True), format_step(value), *(format_x(value, axis, span) for axis in X_AXES)]
    if math.isfinite(value) and value >= 0:
        texts.append(format_size(int(min(value, 2**70))))
    assert all(isinstance(t, str) and 0 < len(t) <= 40 and "\n" not in t for t in texts), texts
    assert "in the future ago" not in format_ago(value)
    assert not format_rate(value, "tok").startswith("-0")


@fuzz_fewer
@given(histories())
def test_once_and_json_take_any_history(tmp_path_factory, history):
    """The whole way from the file: hostile values in a real .loss.json through the reader to
    ``--once`` (each x axis, log y) and strict JSON."""
    steps, loss, times, tokens = history
    run = tmp_path_factory.mktemp("run")
    lines = [{"step": int(s), "loss": float(v), "time": float(t), "tokens": int(k)}
             for s, v, t, k in zip(steps, loss, times, tokens)]
    # NaN, Infinity as json writes them
    (run / ".loss.json").write_text("".join(json.dumps(line) + "\n" for line in lines))
    snap, _ = RunReader(run, now=lambda: NOW).read()
    for axis in X_AXES:
        for log_y in (False, True):
            text = render_text(snap, NOW, width=80, options=PlotOptions(x_axis=axis, log_y=log_y))
            assert text.startswith("andrea-console · run") and "history " in text
    json.loads(json.dumps(to_json(snap, NOW), allow_nan=False))


def test_the_issues_values_in_once_and_the_dashboard(make_run_dir):
    """The values that took the console down: +-1e308 in the loss, 1e20 as a time."""
    from tests.console.test_cli import console

    run = make_run_dir(bad_lines=('{"step":301,"loss":1e308}', '{"step":302,"loss":-1e308}',
                                  '{"step":303,"loss":2.0,"time":1e20}'))
    for extra in ((), ("--log-y", "--x-axis", "time")):
        r = console(run, "--once", *extra)
        assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
        assert "2 values beyond ±1e+300 not plotted" in r.stdout, r.stdout
    r = console(run, "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["history"]["last_step"] == 303


@pytest.mark.asyncio
async def test_the_dashboard_and_the_comparison_draw_them(make_run_dir):
    from console.tui.app import ConsoleApp
    from console.tui.screens.compare import CompareScreen
    from tests.console.test_snapshots import WIDE, app_for, live_probe, settled
    from tests.console.test_status_text import copied_lines

    run = make_run_dir("hostile", bad_lines=('{"step":301,"loss":1e308}', '{"step":302,"loss":-1e308}',
                                             '{"step":303,"loss":2.0,"time":1e20}'))
    app = app_for(run, live_probe)
    async with app.run_test(size=WIDE) as pilot:
        await settled(pilot)
        for key in "xxxl":                 # every x axis, then log y
            await pilot.press(key)
            await pilot.pause()
        assert app.is_running and "beyond ±1e+300 not plotted" in "\n".join(copied_lines(app.export_screenshot()))
    overview = ConsoleApp(run.parent)
    async with overview.run_test(size=WIDE) as pilot:
        from tests.console.conftest import until
        await until(pilot, lambda: overview.summaries, what="the overview's first summary")
        await pilot.press("v")
        await until(pilot, lambda: isinstance(overview.screen, CompareScreen), what="the comparison")
        await pilot.pause(0.5)
        assert overview.is_running
