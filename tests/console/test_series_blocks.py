"""The series table's figures kept by blocks (console/model/series_blocks.py): the same as a
computation over every row, at a first open, at a second one that carries the blocks kept
beside the mirror on, and after a rollback that abandons rows of a kept block."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

from console.model.series import available
from console.model.series_blocks import BLOCK_ROWS
from console.model.series_summary import series_row
from console.read.cache_dir import mirror_path
from console.read.history_mirror import SUMMARY_SUFFIX
from console.read.reader import RunReader
from rundir.abandoned import abandoned_mask
from tests.rundirs import EPOCH

STEPS = 2 * BLOCK_ROWS + 20_000          # two whole blocks and a tail


class Clock:
    def __init__(self) -> None:
        self.t = EPOCH

    def __call__(self) -> float:
        self.t += 1.0
        return self.t


def _step(s: int, loss: float, clock: Clock, arm: str = "a") -> str:
    return json.dumps({"step": s, "loss": loss, "lr": 1e-3 * (1 + s % 7), "grad_norm": 1.0 + (s * 37 % 101) / 10,
                       "arm": arm, "tokens": s * 512, "time": clock()}) + "\n"


def _write(path, lines: list[str]) -> None:
    with open(path, "a") as fh:
        fh.write("".join(lines))


def _expected(h, name: str):
    """The loss's or grad-norm's figures as the table took them from every row at once."""
    steps, values = h.step, (h.loss if name == "loss" else h.series.step_columns[name])
    mask = abandoned_mask(steps, h.time_column, h.events, h.last_step)
    keep = np.isfinite(values) & (~mask if mask is not None else True)
    steps, values = steps[keep], values[keep]
    i_min, i_max = int(np.argmin(values)), int(np.argmax(values))
    return (len(values), int(steps[-1]), float(values[-1]), int(steps[i_min]), float(values[i_min]),
            int(steps[i_max]), float(values[i_max]), float(np.mean(values)))


def _figures(row):
    return (row.points, row.last_step, row.last, row.min_step, row.min, row.max_step, row.max, row.mean)


def _same_as_every_row(h) -> None:
    whole = dataclasses.replace(h, summaries=None)          # the same view, no blocks kept
    for name in available(h):
        kept, direct = series_row(h, name), series_row(whole, name)
        assert _figures(kept)[:7] == _figures(direct)[:7], name
        assert kept.mean == pytest.approx(direct.mean, rel=1e-12) or (math.isnan(kept.mean) and math.isnan(direct.mean))
    for name in ("loss", "grad_norm"):
        got = _figures(series_row(h, name))
        assert got[:7] == _expected(h, name)[:7] and got[7] == pytest.approx(_expected(h, name)[7], rel=1e-12)


def test_kept_blocks_give_the_figures_of_every_row_across_opens_and_rollbacks(tmp_path):
    """A long run with a spike, a rollback inside the second block and its steps run again: the
    table's figures are those of every row at the first open, at the second (the blocks read
    from beside the mirror), after a rollback written late that abandons the spike's rows
    (read on, and opened again), and after a rollback into the first block."""
    run = tmp_path / "run"
    run.mkdir()
    path, clock = run / ".loss.json", Clock()
    lines = [_step(s, 3.0 - s / STEPS + (50.0 if s == 1_000 else 0.0), clock) for s in range(1, STEPS + 1)]
    _write(path, lines)
    # A rollback from the head back into the second block; the resumed trainer runs 70,001..100,000 again.
    _write(path, [json.dumps({"event": "rollback", "step": 70_000, "from_step": STEPS, "to_step": 70_000,
                              "time": clock()}) + "\n"])
    _write(path, [_step(s, 9.0 + s / STEPS, clock) for s in range(70_001, 100_001)])
    h = RunReader(run, now=clock).read()[0].history
    assert h.last_step == 100_000 and h.steps_ahead == STEPS - 100_000
    _same_as_every_row(h)
    assert series_row(h, "loss").max_step == 1_000                  # the spike
    kept = mirror_path(path).with_name(mirror_path(path).name + SUMMARY_SUFFIX)
    assert kept.exists()

    reader = RunReader(run, now=clock)                      # a second open: the blocks carried on
    h = reader.read()[0].history
    assert len(h.summaries.blocks.get("loss", ())) == 1     # the first block, before the rollback's rows
    _same_as_every_row(h)

    # A rollback written late (from 1,200 to 900: the spike at 1,000 abandoned) while the run
    # goes on past every step: no step goes back, the first block's rows are abandoned all the same.
    _write(path, [json.dumps({"event": "rollback", "step": 900, "from_step": 1_200, "to_step": 900,
                              "time": clock()}) + "\n"])
    _write(path, [_step(s, 2.0, clock) for s in range(STEPS + 1, STEPS + 101)])
    for h in (reader.read()[0].history, RunReader(run, now=clock).read()[0].history):   # carried on; opened again
        assert h.last_step == STEPS + 100
        _same_as_every_row(h)
        assert series_row(h, "loss").max < 20.0                     # the spike abandoned

    # A rollback into the first block, then its steps again.
    _write(path, [json.dumps({"event": "rollback", "step": 500, "from_step": 100_000, "to_step": 500,
                              "time": clock()}) + "\n"])
    _write(path, [_step(s, 1.0, clock) for s in range(501, 2_001)])
    h = reader.read()[0].history
    assert h.last_step == 2_000
    _same_as_every_row(h)


@pytest.mark.parametrize("block", [["x"] * 8, [1, 2.0, 3.0], [0, 1.0, 1.0, 1, 1.0, 1, 1.0, 1], {"a": 1}, 7,
                                   [True, 1.0, 1.0, 1, 1.0, 1, 1.0, 1]])
def test_kept_blocks_of_the_wrong_shape_are_not_used(tmp_path, block):
    """A kept file in the cache whose blocks are not a block's figures is not used: the
    figures are those of every row, and nothing raises."""
    run = tmp_path / "run"
    run.mkdir()
    path, clock = run / ".loss.json", Clock()
    _write(path, [_step(s, 3.0 - s / STEPS, clock) for s in range(1, STEPS + 1)])
    _same_as_every_row(RunReader(run, now=clock).read()[0].history)
    kept = mirror_path(path).with_name(mirror_path(path).name + SUMMARY_SUFFIX)
    state = json.loads(kept.read_text())
    state["series"]["loss"] = [block] * 2
    kept.write_text(json.dumps(state))
    h = RunReader(run, now=clock).read()[0].history
    assert not h.summaries.blocks
    _same_as_every_row(h)
