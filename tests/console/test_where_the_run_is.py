"""After a rollback (or a resume from an older checkpoint), where the run is is the newest
segment's head, not the largest step in the history: the status pane, the status line,
``--once``, ``--json``, the overview, the ETA and the rates all say so, and the earlier
segment's steps after the head are shown only as what they are (dimmed)."""

from __future__ import annotations

import json

import pytest

from rundir import load_run_config, write_run_config
from tests.console.test_cli import console
from tests.console.test_snapshots import WIDE, app_for, live_probe, settled
from tests.console.test_status_text import copied_lines
from tests.rundirs import EPOCH, loss_curve

HEAD, FROM = 1635, 1861


@pytest.fixture
def rolled_back(make_run_dir):
    """Trained to 1,861, rolled back to 1,600, resumed and now at 1,635."""
    run = make_run_dir("rolled-back", steps=HEAD, checkpoints=(1600,), restarts=((FROM, 1600, 30.0, True),),
                       events=({"event": "rollback", "step": FROM, "to_step": 1600, "from_step": FROM,
                                "skip_batches": 0, "time": EPOCH + FROM * 0.5 + 1},))
    config = load_run_config(run)
    config.run.max_steps = 3000
    write_run_config(run, config)
    return run


def test_json_and_once_speak_of_the_head(rolled_back):
    data = json.loads(console(rolled_back, "--json").stdout)["history"]
    assert data["last_step"] == HEAD and data["steps_ahead"] == FROM - HEAD
    assert data["last_loss"] == pytest.approx(float(loss_curve(FROM)[HEAD - 1]))
    assert data["tokens"] == HEAD * 512
    assert data["steps_per_s"] == pytest.approx(2.0) and data["eta_s"] == pytest.approx((3000 - HEAD) / 2.0)
    once = console(rolled_back, "--once").stdout
    assert f"step         {HEAD:,} · loss {data['last_loss']:.4f}" in once, once
    assert f"{FROM - HEAD} steps after step {HEAD:,} are an earlier segment's" in once
    assert f"{FROM:,}" not in once.split("history")[0]


def test_the_overview_row_speaks_of_the_head(rolled_back):
    [row] = json.loads(console(rolled_back.parent, "--json").stdout)["runs"]
    assert row["last_step"] == HEAD


def test_a_crash_resume_before_its_steps_are_run_again(make_run_dir):
    """Crashed at 900, resumed from the checkpoint at 800, now at 805: the run is at 805."""
    run = make_run_dir("resumed", steps=805, checkpoints=(800,), restarts=((900, 800, 10.0, True),))
    data = json.loads(console(run, "--json").stdout)["history"]
    assert (data["last_step"], data["steps_ahead"]) == (805, 95)
    [row] = json.loads(console(run.parent, "--json").stdout)["runs"]
    assert row["last_step"] == 805


@pytest.mark.asyncio
@pytest.mark.parametrize("size", [WIDE, (80, 24)], ids=["full", "compact"])
async def test_the_dashboard_speaks_of_the_head(rolled_back, size):
    app = app_for(rolled_back, live_probe)
    async with app.run_test(size=size) as pilot:
        await settled(pilot)
        h = app.snapshot.history
        assert (h.last_step, h.steps_ahead) == (HEAD, FROM - HEAD)
        lines = copied_lines(app.export_screenshot())
    status = [line for line in lines if "loss " in line and "step" in line]
    assert status and all(f"{HEAD:,}" in line and f"{FROM:,}" not in line for line in status), lines
