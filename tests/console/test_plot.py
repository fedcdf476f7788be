"""The loss plot's decimation: no spike is ever hidden, at any width."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from console.model.markers import Marker
from console.plot.canvas import PlotOptions, build_canvas, plot_text, render
from console.plot.ema import ema_debiased
from console.plot.envelope import column_of, column_starts, envelope

N = 200_000


def _history(n: int = N, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    steps = np.arange(1, n + 1)
    loss = 5.0 * np.exp(-steps / (n / 5)) + 1.6 + np.random.default_rng(seed).normal(0, 0.05, n)
    return steps, loss


@pytest.mark.parametrize("width", [20, 57, 80, 133])
@pytest.mark.parametrize("spike_at", [1, 77_777, 123_457, N])
def test_single_step_spike_in_200k_points_shows_in_the_rendered_plot(width, spike_at):
    steps, loss = _history()
    loss[spike_at - 1] = 40.0
    height = 10
    canvas = build_canvas(steps, loss, None, width, height, PlotOptions(smoothing=0.0))
    # The y range reaches the spike, and the top dot row is lit exactly where the spike is.
    assert canvas.y1 == pytest.approx(40.0)
    lit = np.flatnonzero(canvas.raw[0])
    expected_px = min(int((spike_at - 1) / (N - 1) * 2 * width), 2 * width - 1)
    assert lit.tolist() == [expected_px]
    # And in the text: the first plot row holds a braille cell with a top dot at that cell.
    text = render(canvas, label_width=8).plain.splitlines()
    top_row = text[0][8:]
    cell = top_row[expected_px // 2]
    assert 0x2800 < ord(cell) <= 0x28FF
    assert (ord(cell) - 0x2800) & (0x01 if expected_px % 2 == 0 else 0x08)
    assert sum(ch != " " for ch in top_row) == 1


def test_a_downward_spike_shows_too_with_log_y():
    steps, loss = _history()
    loss[150_000] = 0.01
    canvas = build_canvas(steps, loss, None, 60, 8, PlotOptions(log_y=True, smoothing=0.0))
    assert canvas.y0 == pytest.approx(np.log10(0.01))
    assert canvas.raw[-1].sum() == 1


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 5000), columns=st.integers(1, 300), seed=st.integers(0, 2**16))
def test_envelope_equals_the_min_and_max_of_each_column(n, columns, seed):
    rng = np.random.default_rng(seed)
    steps = np.sort(rng.choice(10 * n + 10, size=n, replace=False)) + 1
    values = rng.normal(size=n)
    x0, x1 = float(steps[0]), float(max(steps[-1], steps[0] + 1))
    env = envelope(steps, values, x0, x1, columns)
    col = np.clip(((steps - x0) / (x1 - x0) * columns).astype(int), 0, columns - 1)
    for c in range(columns):
        mine = values[col == c]
        if len(mine):
            assert env.lo[c] == mine.min() and env.hi[c] == mine.max()
        else:
            assert np.isnan(env.lo[c]) and np.isnan(env.hi[c])
    # Every point lies inside the envelope of some column: nothing is dropped.
    assert np.nanmax(env.hi) == values.max() and np.nanmin(env.lo) == values.min()


@settings(max_examples=200, deadline=None)
@given(x=st.lists(st.floats(-1e15, 1e15, allow_nan=False), min_size=1, max_size=400, unique=True),
       cut=st.tuples(st.floats(0, 1), st.floats(0, 1)), columns=st.integers(1, 700), seed=st.integers(0, 2**16))
def test_column_starts_agree_with_the_column_of_each_point(x, cut, columns, seed):
    """The columns' starts are searched for (their left edges), not computed per point: on
    any x axis (floats: tokens, times) and any zoomed range, each point still lands in the
    column that column_of gives it, edges that round apart included."""
    xs = np.sort(np.asarray(x))
    lo, hi = sorted(cut)
    x0 = float(xs[0] + lo * (xs[-1] - xs[0]))
    x1 = max(float(xs[0] + hi * (xs[-1] - xs[0])), x0 + 1.0)
    inside = xs[(xs >= x0) & (xs <= x1)]
    starts = column_starts(inside, x0, x1, columns)
    assert np.array_equal(starts, np.searchsorted(column_of(inside, x0, x1, columns), np.arange(columns)))
    values = np.random.default_rng(seed).normal(size=len(xs))
    env = envelope(xs, values, x0, x1, columns)
    col = column_of(xs, x0, x1, columns)
    for c in np.unique(col[(xs >= x0) & (xs <= x1)]):
        mine = values[(col == c) & (xs >= x0) & (xs <= x1)]
        assert env.lo[c] == mine.min() and env.hi[c] == mine.max()


@settings(max_examples=200, deadline=None)
@given(first=st.integers(-10**9, 10**9), n=st.integers(1, 3000), cut=st.tuples(st.floats(0, 1), st.floats(0, 1)),
       columns=st.integers(1, 700))
def test_column_starts_of_gapless_steps_are_computed_alike(first, n, cut, columns):
    """Steps with no gap: their columns' starts are computed from the first step (no read of
    the column), and agree with column_of on every zoomed range."""
    steps = np.arange(first, first + n)
    lo, hi = sorted(cut)
    x0 = float(first + int(lo * (n - 1)))
    x1 = max(float(first + int(hi * (n - 1))), x0 + 1.0)
    inside = steps[(steps >= x0) & (steps <= x1)]
    starts = column_starts(inside, x0, x1, columns)
    assert np.array_equal(starts, np.searchsorted(column_of(inside, x0, x1, columns), np.arange(columns)))


def test_nonfinite_values_are_left_out_not_plotted():
    steps = np.arange(1, 101)
    loss = np.ones(100)
    loss[[10, 20]] = [np.nan, np.inf]
    env = envelope(steps, loss, 1, 100, 10)
    assert np.all(env.hi == 1.0)


def test_debiased_ema_matches_the_loop_and_extends_incrementally():
    x = np.random.default_rng(1).normal(size=5000)
    x[100] = np.nan
    beta = 0.99
    num = den = 0.0
    expected = []
    for v in x:
        ok = np.isfinite(v)
        num = beta * num + (1 - beta) * (v if ok else 0.0)
        den = beta * den + (1 - beta) * ok
        expected.append(num / den)
    whole, _ = ema_debiased(x, beta)
    head, carry = ema_debiased(x[:1234], beta)
    tail, _ = ema_debiased(x[1234:], beta, carry)
    np.testing.assert_allclose(whole, expected, rtol=1e-9)
    np.testing.assert_allclose(np.concatenate([head, tail]), whole, rtol=1e-12)
    assert whole[0] == pytest.approx(x[0], rel=1e-12)   # debiased: the first value is not pulled towards 0


def test_window_shows_only_the_last_steps_and_markers_land_on_their_column():
    steps, loss = _history(10_000)
    canvas = build_canvas(steps, loss, None, 50, 6, PlotOptions(window=1000),
                          [Marker(9_500, "checkpoint"), Marker(100, "resume"), Marker(10_000, "pivot")])
    assert canvas.x0 == 9001 and canvas.x1 == 10_000
    assert dict(canvas.markers) == {24: "checkpoint", 49: "pivot"}


def test_empty_and_flat_histories_render():
    empty = plot_text(np.empty(0, np.int64), np.empty(0), 40, 5, PlotOptions())
    assert "no steps" in empty.plain
    flat = plot_text(np.arange(1, 4), np.full(3, 2.0), 40, 5, PlotOptions())
    assert "2" in flat.plain
    nan = plot_text(np.arange(1, 4), np.full(3, np.nan), 40, 5, PlotOptions())
    assert "no finite loss" in nan.plain


def _y_axis_labels(text: str) -> list[float]:
    return [float(line.split("┤")[0]) for line in text.splitlines() if "┤" in line and line.split("┤")[0].strip()]


def _is_round_step(step: float) -> bool:
    mantissa = step / 10 ** np.floor(np.log10(step))
    return any(np.isclose(mantissa, m) for m in (1, 2, 5, 10))


@pytest.mark.parametrize("log_y", [False, True])
@pytest.mark.parametrize("height", [3, 8, 20])
@pytest.mark.parametrize("lo, hi", [(2.355, 5.463), (6.487, 7.093), (1.6, 9.5), (0.0004, 0.03), (2.1, 2.3)])
def test_the_y_axis_is_labelled_at_round_values_inside_the_range(lo, hi, height, log_y):
    steps = np.arange(1, 1001)
    loss = np.linspace(hi, lo, 1000)
    labels = _y_axis_labels(plot_text(steps, loss, 60, height, PlotOptions(smoothing=0.0, log_y=log_y)).plain)
    assert len(labels) >= (2 if height >= 8 else 1), labels
    assert labels == sorted(labels, reverse=True)                # top to bottom
    for v in labels:
        assert lo * 0.999 <= v <= hi * 1.001 and len(f"{v:.6g}".replace(".", "").strip("0")) <= 3, labels
    if not log_y and len(labels) > 1:
        between = np.diff(labels[::-1])
        assert np.allclose(between, between[0]) and _is_round_step(between[0]), labels     # 1, 2 or 5 x 10^n apart
        assert np.allclose(np.round(np.array(labels) / between[0]), np.array(labels) / between[0])


def test_the_y_labels_sit_on_the_rows_of_their_values():
    from console.plot.canvas import y_labels

    # 0..10 over 11 rows (44 dot rows): 10 at the top, 0 at the bottom, 5 in the middle.
    assert y_labels(0.0, 10.0, 11) == {0: "10", 5: "5", 10: "0"}


def test_the_ema_in_chunks_equals_the_ema_in_one(monkeypatch):
    import console.plot.ema as ema

    rng = np.random.default_rng(3)
    x = rng.normal(2.0, 0.1, 10_000)
    x[::97] = np.nan
    x[4_321] = 1e250                            # a chunk scaled, its neighbours not
    whole, carry = ema.ema_debiased(x, 0.98)
    monkeypatch.setattr(ema, "EMA_CHUNK", 1_000)
    chunked, chunk_carry = ema.ema_debiased(x, 0.98)
    assert np.allclose(whole, chunked, rtol=1e-12, equal_nan=True)
    assert np.allclose(carry, chunk_carry, rtol=1e-12)


def test_a_line_within_float32s_range_is_kept_in_float32_and_draws_the_same():
    from console.plot.ema import line_dtype

    steps = np.arange(1, 50_001)
    x = 2.0 + np.sin(steps / 500.0) + np.random.default_rng(4).normal(0, 0.05, len(steps))
    x[[10, 20_000]] = [np.nan, np.inf]
    assert line_dtype(x) is np.float64                      # an infinity: not within the range
    finite = np.where(np.isfinite(x), x, np.nan)
    assert line_dtype(finite) is np.float32 and line_dtype(np.array([1e31])) is np.float64
    wide, _ = ema_debiased(finite, 0.98)
    narrow, carry = ema_debiased(finite, 0.98, dtype=np.float32)
    assert narrow.dtype == np.float32 and np.allclose(narrow, wide, rtol=1e-6, equal_nan=True)
    assert carry == ema_debiased(finite, 0.98)[1]           # the carry stays float64
    a = build_canvas(steps, finite, wide, 80, 12, PlotOptions())
    b = build_canvas(steps, finite, narrow, 80, 12, PlotOptions())
    assert np.array_equal(a.smooth, b.smooth) and np.array_equal(a.raw, b.raw)


def test_a_span_below_the_values_precision_is_drawn_as_a_constant_with_labels_told_apart():
    """A constant and its float32 EMA (3e-3 and 3.0000000026e-3): a padded range, as for an
    exact constant, in both scales; a real change of a thousandth is still drawn as one."""
    import numpy as np

    from console.plot.canvas import PlotOptions, build_canvas, nearly_constant, y_labels

    steps = np.arange(1, 501)
    lr = np.full(500, 3e-3)
    for log_y in (False, True):
        canvas = build_canvas(steps, lr, lr.astype(np.float32), 60, 8, PlotOptions(log_y=log_y))
        exact = build_canvas(steps, lr, lr.copy(), 60, 8, PlotOptions(log_y=log_y))
        assert (canvas.y0, canvas.y1) == pytest.approx((exact.y0, exact.y1), rel=1e-6)
        labels = list(y_labels(canvas.y0, canvas.y1, 8, log_y).values())
        assert len(labels) >= 2 and len(set(labels)) == len(labels) and "0.003" in labels, labels
        assert not nearly_constant(3e-3, 3.003e-3, False) and not nearly_constant(*np.log10([3e-3, 3.003e-3]), True)
    # In log y, round values closer than their own digits tell apart: labels that do, within the room.
    labels = list(y_labels(float(np.log10(3e-3)), float(np.log10(3.0001e-3)), 8, True).values())
    shown = [t for t in labels if t]
    assert shown and len(set(shown)) == len(shown) and all(len(t) <= 6 for t in labels), labels


def test_a_smoothed_line_grows_in_place_and_is_shared_while_some_plot_holds_it():
    import gc

    from console.plot.ema import SmoothedLines

    x = 2.0 + np.random.default_rng(5).normal(0, 0.1, 10_000)
    lines = SmoothedLines()
    line = lines.line("loss", 0.98)
    assert lines.line("loss", 0.98) is line and lines.line("loss", 0.9) is not line
    whole = ema_debiased(x, 0.98, dtype=np.float32)[0]
    first = line.of(x[:1000], 0)
    grown = [line.of(x[:n], 0) for n in (1000, 1001, 1900, 10_000)]
    assert first.dtype == np.float32 and np.array_equal(grown[-1], whole)
    assert np.shares_memory(grown[1], grown[2])             # extended where it was, into room made at 1,001
    assert np.array_equal(first, whole[:1000])              # and a line handed out stays as it was
    assert np.array_equal(line.of(x[:500], 0), ema_debiased(x[:500], 0.98)[0].astype(np.float32))  # read anew
    changed = x.copy()
    changed[:10] += 1.0
    assert np.array_equal(line.of(changed, 1), ema_debiased(changed, 0.98, dtype=np.float32)[0])  # a rewind
    huge = np.append(x, 1e31)
    line.of(x, 1)
    assert line.of(huge, 1).dtype == np.float64                # past float32's range: kept in float64
    del line, first, grown
    gc.collect()
    assert lines.line("loss", 0.98).of(x[:10], 0).shape == (10,)   # no plot held it: a new one
