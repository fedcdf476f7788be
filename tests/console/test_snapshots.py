"""Screens of the main states, compared with the accepted SVG snapshots.

Every run directory comes from tests/rundirs.py; the clock is fixed (``now``), the
trainer probe is a fake where a live trainer is wanted, the watcher and the periodic
tick are off, and the run directory is always named "run": nothing on screen depends on
when, where or under which pid the test runs.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.widgets import Input

from console.model.snapshot import TrainerView
from console.read.reader import RunReader
from console.tui.app import ConsoleApp
from console.tui.options import ConsoleOptions
from tests.console.conftest import fixed_now
from tests.rundirs import EPOCH, make_run

WIDE = (140, 45)
NARROW = (80, 24)
BIG = (160, 48)


def live_probe(run_dir: Path) -> TrainerView:
    """A verified trainer with fixed figures (the real probe reads the process table)."""
    return TrainerView(state="running", label="running", reason="pid 4242 verified", pid=4242,
                       started=EPOCH, cpu_percent=98.0, rss=312 << 20, gpu_memory=None,
                       argv=("andrea-train", "runs/run"))


FREE_SPACE = 500 << 30          # a fixed filesystem: free space is not the machine's on screen


def app_for(run_dir: Path, probe=None, **options) -> ConsoleApp:
    reader = RunReader(run_dir, now=fixed_now, probe=probe, free_space=lambda _: FREE_SPACE)
    return ConsoleApp(run_dir, ConsoleOptions(now=fixed_now, probe=probe, watch=False, tick=None, reader=reader,
                                              **options))


def steady_cursors(app) -> None:
    """A guided screen opens with its first field focused, whose cursor blinks every half
    second: shown steadily, a screenshot does not depend on when it is taken."""
    for field in app.screen.query(Input):
        field.cursor_blink = False


async def settled(pilot) -> None:
    """Wait until the first read has been painted."""
    app = pilot.app
    await app.workers.wait_for_complete()
    await pilot.pause()
    await app.workers.wait_for_complete()
    await pilot.pause()


def healthy(tmp_path: Path) -> Path:
    return make_run(tmp_path / "run", steps=3000, checkpoints=tuple(range(500, 3001, 500)), spikes={1700: 9.5},
                    log_lines=tuple(f"step {s} loss 2.{s % 97:02d}" for s in range(2900, 3001, 10)),
                    events=({"event": "resume", "step": 2000, "from_step": 2000,
                             "checkpoint": "step_002000.bin"},))


def test_healthy_live_run(snap_compare, tmp_path):
    assert snap_compare(app_for(healthy(tmp_path), live_probe), terminal_size=WIDE, run_before=settled)


def test_healthy_live_run_80x24(snap_compare, tmp_path):
    assert snap_compare(app_for(healthy(tmp_path), live_probe), terminal_size=NARROW, run_before=settled)


def test_zombie_arm(snap_compare, tmp_path):
    run = make_run(tmp_path / "run", state_arms=("stdlib-code", "stdlib-docstrings", "pydoc-topics",
                                                 "repo-docstrings"))
    assert snap_compare(app_for(run, live_probe), terminal_size=WIDE, run_before=settled)


def test_invalid_checkpoint(snap_compare, tmp_path):
    run = make_run(tmp_path / "run", checkpoints=(100, 200, 300), truncated=(300,), foreign=(100,))
    assert snap_compare(app_for(run), terminal_size=WIDE, run_before=settled)


def test_stopped_trainer(snap_compare, tmp_path):
    run = make_run(tmp_path / "run", events=({"event": "stop", "step": 300, "reason": "signal"},))
    assert snap_compare(app_for(run), terminal_size=WIDE, run_before=settled)


def test_stale_pid_record_and_damaged_history(snap_compare, tmp_path):
    run = make_run(tmp_path / "run", trainer_record="stale", nonfinite=(150,), bad_lines=("garbage",),
                   torn_tail='{"step": 30', state_text="[]")
    assert snap_compare(app_for(run), terminal_size=WIDE, run_before=settled)


def test_empty_directory(snap_compare, tmp_path):
    run = make_run(tmp_path / "run", empty=True)
    assert snap_compare(app_for(run), terminal_size=WIDE, run_before=settled)


def test_help_screen(snap_compare, tmp_path):
    async def help_open(pilot):
        await settled(pilot)
        await pilot.press("question_mark")
        await pilot.pause()

    assert snap_compare(app_for(healthy(tmp_path), live_probe), terminal_size=WIDE, run_before=help_open)


def test_log_y_and_window(snap_compare, tmp_path):
    async def toggled(pilot):
        await settled(pilot)
        await pilot.press("l", "w")
        await pilot.pause()

    app = app_for(healthy(tmp_path), live_probe, window=500)
    assert snap_compare(app, terminal_size=WIDE, run_before=toggled)


# -- 80x24 (an SSH session's size: the compact layout) and 160x48 ----------------------

def test_healthy_live_run_160x48(snap_compare, tmp_path):
    assert snap_compare(app_for(healthy(tmp_path), live_probe), terminal_size=BIG, run_before=settled)


def pressing(*keys: str):
    """A ``run_before`` that waits for the first read, then presses ``keys``."""
    async def run_before(pilot):
        await settled(pilot)
        for key in keys:
            await pilot.press(key)
            await pilot.pause()
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()
    return run_before


def invalid_checkpoints(tmp_path: Path) -> Path:
    return make_run(tmp_path / "run", checkpoints=(100, 200, 300), truncated=(300,), foreign=(100,))


@pytest.mark.parametrize("size", [NARROW, BIG], ids=["80x24", "160x48"])
def test_help_screen_sizes(snap_compare, tmp_path, size):
    app = app_for(healthy(tmp_path), live_probe)
    assert snap_compare(app, terminal_size=size, run_before=pressing("question_mark"))


def test_help_screen_scrolled_to_the_end_80x24(snap_compare, tmp_path):
    app = app_for(healthy(tmp_path), live_probe)
    assert snap_compare(app, terminal_size=NARROW, run_before=pressing("question_mark", "end"))


@pytest.mark.parametrize("size", [NARROW, BIG], ids=["80x24", "160x48"])
def test_stop_confirmation(snap_compare, tmp_path, size):
    app = app_for(healthy(tmp_path), live_probe)
    assert snap_compare(app, terminal_size=size, run_before=pressing("s"))


@pytest.mark.parametrize("size", [NARROW, BIG], ids=["80x24", "160x48"])
def test_invalid_checkpoint_sizes(snap_compare, tmp_path, size):
    # At 80x24 key 2 shows the checkpoints under the plot; at 160x48 the pane is in view.
    app = app_for(invalid_checkpoints(tmp_path))
    assert snap_compare(app, terminal_size=size, run_before=pressing("2"))


def test_checkpoint_detail_80x24(snap_compare, tmp_path):
    app = app_for(invalid_checkpoints(tmp_path))
    assert snap_compare(app, terminal_size=NARROW, run_before=pressing("2", "down", "enter"))


@pytest.mark.parametrize("key", ["3", "4", "5", "6"], ids=["arms", "samples", "problems", "status"])
def test_compact_panes_80x24(snap_compare, tmp_path, key):
    run = make_run(tmp_path / "run", state_arms=("stdlib-code", "stdlib-docstrings", "pydoc-topics",
                                                 "repo-docstrings"), truncated=(300,))
    assert snap_compare(app_for(run, live_probe), terminal_size=NARROW, run_before=pressing(key))
