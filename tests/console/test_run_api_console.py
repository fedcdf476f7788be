"""What the console says of a run of the run API (rundir.open_run), across its whole life: the
checkpoints its trainer reported (whatever their names), its arms, and the keys that act on
what such a run does not have."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from console.model.findings import summary_problems
from console.read.reader import RunReader
from console.read.run_summary import summarize_run
from console.tui.app import ConsoleApp
from console.tui.options import ConsoleOptions
from console.tui.widgets import ArmsPane, CheckpointsPane, EventLog, LossPlot
from rundir import open_run
from rundir.layout import HISTORY
from tests.console.test_cli import console
from tests.console.test_hostile_text import pane_lines
from tests.console.test_snapshots import settled

SIZE = (140, 45)


def log_text(app: ConsoleApp) -> str:
    return "\n".join(app.dashboard.query_one(EventLog).texts)


def reported_at_a_checkpoint_name(run_dir: Path) -> None:
    """A loop that saves its own format to ``step_000010.bin`` and reports it; a reader that
    looked between the write and the report saw a file of that name, not yet reported."""
    with open_run(run_dir, config={"lr": 1e-3}) as run:
        for step in range(1, 11):
            run.log(step, loss=1.0 / step)
        (run_dir / "step_000010.bin").write_bytes(b"x" * 100)
        reader = RunReader(run_dir)
        before, _ = reader.read()
        assert [c.status for c in before.checkpoints] == ["invalid"]        # not reported yet
        run.checkpoint_saved(10, run_dir / "step_000010.bin")
        after, _ = reader.read({HISTORY})           # the report read: the file is the trainer's
        assert after.checkpoints == () and [e.path for e in after.external_checkpoints] == ["step_000010.bin"]


@pytest.mark.asyncio
async def test_a_reported_file_at_a_checkpoint_name_is_one_external_checkpoint(tmp_path):
    run_dir = tmp_path / "x"
    reported_at_a_checkpoint_name(run_dir)
    once = console(run_dir, "--once")
    assert once.returncode == 0, once.stderr
    assert "checkpoints (1)" in once.stdout and "invalid" not in once.stdout
    assert once.stdout.count("step_000010.bin    step        10") == 1
    data = json.loads(console(run_dir, "--json").stdout)
    assert data["checkpoints"] == [] and [e["path"] for e in data["external_checkpoints"]] == ["step_000010.bin"]
    check = console(run_dir, "--check")
    assert check.returncode == 0, check.stdout + check.stderr
    summary = summarize_run(run_dir)
    assert summary.checkpoints == 0 and summary.newest_checkpoint is None and not summary_problems(summary)
    assert summary.newest_external is not None and summary.newest_external.path == "step_000010.bin"
    app = ConsoleApp(run_dir, ConsoleOptions(watch=False, tick=None))
    async with app.run_test(size=SIZE) as pilot:
        await settled(pilot)
        text = app.dashboard.query_one(CheckpointsPane).content.plain
        rows = [line for line in text.splitlines()[1:] if line.strip()]
        assert len(rows) == 1 and "external: step_000010.bin" in rows[0] and "invalid" not in text, text


@pytest.mark.asyncio
async def test_arms_pivot_and_inspect_say_what_a_run_of_the_run_api_is(tmp_path):
    """Its run.toml is there: the arms pane says its trainer mixes no sources (not that there is
    no run.toml); p opens no pivot screen that could only say [arms] is empty; i on its own-format
    checkpoint says why the inspector cannot read it, in the events pane and as a toast."""
    run_dir = tmp_path / "x"
    reported_at_a_checkpoint_name(run_dir)
    once = console(run_dir, "--once").stdout
    assert "  none: this run's trainer mixes no sources (a run of the run API: its run.toml has [config], " \
           "no [arms])" in once
    app = ConsoleApp(run_dir, ConsoleOptions(watch=False, tick=None))
    async with app.run_test(size=SIZE) as pilot:
        await settled(pilot)
        arms = app.dashboard.query_one(ArmsPane).content.plain
        assert "no arms: this run's trainer mixes no sources" in arms and "no run.toml" not in arms, arms
        await pilot.press("p")
        await settled(pilot)
        assert app.screen is app.dashboard
        said = [n.message for n in app._notifications]
        assert said == ["p: no pivot: this run's trainer mixes no sources (a run of the run API: its run.toml has "
                        "[config], no [arms]): there is no mix of sources to change"]
        assert said[0] in log_text(app)
        await pilot.press("i")
        await settled(pilot)
        assert app.screen is app.dashboard
        said = [n.message for n in app._notifications][1:]
        assert said == ["i: step_000010.bin (step 10) is in its trainer's own format, not this trainer's "
                        "step_NNNNNN.bin, the one format the inspector reads"] and said[0] in log_text(app)


@pytest.mark.asyncio
async def test_the_plot_marks_the_checkpoints_its_trainer_reported(tmp_path):
    """The legend names ▴ checkpoint: each checkpoint the run API reported is drawn at its
    step on the dashboard's plot and in --once's."""
    run_dir = tmp_path / "x"
    with open_run(run_dir, config={"lr": 1e-3}) as run:
        for step in range(1, 101):
            run.log(step, loss=3.0 - step / 50)
            if step % 40 == 0:
                (run_dir / f"ckpt-{step}.pt").write_bytes(b"w")
                run.checkpoint_saved(step, run_dir / f"ckpt-{step}.pt")
    once = console(run_dir, "--once").stdout
    axis = next(line for line in once.splitlines() if line.lstrip().startswith("└"))
    assert axis.count("▴") == 2, once
    app = ConsoleApp(run_dir, ConsoleOptions(watch=False, tick=None))
    async with app.run_test(size=SIZE) as pilot:
        await settled(pilot)
        assert sorted(m.step for m in app.snapshot.markers if m.kind == "checkpoint") == [40, 80]
        lines = pane_lines(app.dashboard.query_one(LossPlot))
        assert sum(line.count("▴") for line in lines) == 2 + 1, lines       # two drawn, and the legend's
