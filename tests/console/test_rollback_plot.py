"""The loss plot after a rollback: the abandoned steps dimmed, the new segment from X, a B marker."""

from __future__ import annotations

import numpy as np

from console.model.markers import derive_markers
from console.plot.canvas import PlotOptions, build_canvas, render_runs
from rundir import HistoryEvent
from rundir.abandoned import abandoned_mask
from tests.console.test_cli import console
from tests.rundirs import EPOCH


def rollback(to_step: int, from_step: int, at: float) -> HistoryEvent:
    return HistoryEvent("rollback", to_step, at, 0, {"to_step": to_step, "from_step": from_step})


def test_abandoned_steps_are_those_after_x_written_before_the_rollback():
    steps = np.arange(1, 101)
    times = steps.astype(np.float64)                  # steps 1..100 at t = 1..100
    times[40:60] = 200 + np.arange(20)               # steps 41..60 written again after the rollback at t = 150
    mask = abandoned_mask(steps, times, [rollback(40, 100, 150.0)], head_step=100)
    assert np.flatnonzero(mask).tolist() == list(range(60, 100))     # steps 61..100: not replaced yet
    assert abandoned_mask(steps, times, [rollback(40, 100, 10.0)], 100) is None    # nothing older than it after X
    assert abandoned_mask(steps, times, [], 100) is None
    assert abandoned_mask(steps, None, [rollback(40, 100, 150.0)], 100) is None


def test_steps_after_the_head_are_left_behind_with_or_without_a_rollback_event():
    """A resume from an older checkpoint re-runs steps: until it reaches the old ones, the
    earlier segment's steps after its head are not where the run is."""
    steps = np.arange(1, 101)
    assert np.flatnonzero(abandoned_mask(steps, None, [], head_step=60)).tolist() == list(range(60, 100))
    assert abandoned_mask(steps, steps.astype(float), [], head_step=None) is None


def test_abandoned_steps_are_drawn_dimmed_and_left_out_of_the_lines():
    steps = np.arange(1, 201)
    loss = np.where(steps > 150, 9.0, 2.0)                 # the abandoned tail is high
    mask = steps > 150
    canvas = build_canvas(steps, loss, None, 40, 10, PlotOptions(smoothing=0.0),
                          list(derive_markers([], [rollback(100, 200, 1.0)])), abandoned=mask)
    assert canvas.dim is not None and canvas.dim.any()
    right = canvas.raw.shape[1] * 3 // 4 + 1               # past step 150: only dimmed dots
    assert not canvas.raw[:, right:].any() and canvas.dim[:, right:].any()
    assert canvas.y1 >= 9.0                                # the dimmed points are still in range
    assert [kind for _, kind in canvas.markers] == ["rollback"]          # B at step 100
    styles = {style for line in render_runs(canvas) for _, style in line}
    assert "grey30" in styles
    plain = build_canvas(steps, loss, None, 40, 10, PlotOptions(smoothing=0.0))
    assert plain.dim is None and plain.raw[:, right:].any()


def test_once_names_the_rollback(make_run_dir):
    run = make_run_dir(steps=600, checkpoints=(100, 200, 300, 400, 500),
                       events=({"event": "rollback", "step": 600, "to_step": 300, "from_step": 600,
                                "skip_batches": 50, "time": EPOCH + 301},))
    r = console(run, "--once")
    assert r.returncode == 0, r.stderr
    assert "B rollback (its abandoned steps dimmed)" in r.stdout
    plain = console(make_run_dir("plain"), "--once")
    assert "B rollback" not in plain.stdout
