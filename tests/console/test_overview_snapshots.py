"""The overview and the comparison, compared with accepted SVG snapshots at 80x24 and 160x48.

Runs come from tests/rundirs.py; the clock is fixed, the trainer verification is a fake
for the live run (no pid of this machine on screen), runs are ordered by the steps and
checkpoints the generated files date (not by when the test wrote them), and nothing is
watched: nothing on screen depends on when or where the tests run.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from console.tui.app import ConsoleApp
from console.tui.options import ConsoleOptions
from console.tui.screens.compare import CompareScreen
from console.tui.widgets.compare_plot import ComparePlot
from rundir import TrainerRecord, Verification, verify_trainer
from tests.console.conftest import fixed_now, table_measured, until
from tests.rundirs import EPOCH, make_run

SIZES = {"80x24": (80, 24), "160x48": (160, 48)}


def verify(run: Path) -> Verification:
    """The run named "live" has a verified trainer; the others are what their files say."""
    if run.name == "live":
        return Verification("running", "pid 4242 verified",
                            TrainerRecord(4242, EPOCH, "node", ["andrea-train", "runs/live"], EPOCH))
    return verify_trainer(run)


def runs_dir(tmp_path: Path) -> Path:
    root = tmp_path / "runs"
    make_run(root / "live", steps=6000, checkpoints=(2000, 4000, 6000), spikes={3100: 9.0}, seed=1)
    make_run(root / "finished", steps=3000, checkpoints=(1000, 2000, 3000), seed=2,
             events=({"event": "stop", "step": 3000, "reason": "signal"},))
    make_run(root / "zombie-and-stale", steps=2000, checkpoints=(1000, 2000), truncated=(2000,), seed=3,
             trainer_record="stale", state_arms=("stdlib-code", "gone-arm"))
    make_run(root / "other-engine", steps=4000, checkpoints=(), history_format="array", with_run_toml=False,
             with_state=False, with_samples=False, seed=4)
    (root / "junk").mkdir()
    return root


def app_for(root: Path) -> ConsoleApp:
    return ConsoleApp(root, ConsoleOptions(now=fixed_now, verify=verify, watch=False, tick=None,
                                           free_space=lambda _: 500 << 30))


async def scanned(pilot) -> None:
    app = pilot.app
    await until(pilot, lambda: app.summaries and table_measured(app.overview.table), what="the runs table")


async def compared(pilot, names: tuple[str, ...] = ("live", "finished", "other-engine")) -> None:
    """The runs ``names`` marked and compared (``v``), the comparison drawn."""
    await scanned(pilot)
    app = pilot.app
    for name in names:
        index = next(i for i, s in enumerate(app.summaries) if s.name == name)
        app.overview.table.move_cursor(row=index, animate=False)
        await pilot.press("space")
    await pilot.press("v")
    await app.workers.wait_for_complete()
    await pilot.pause()
    assert isinstance(app.screen, CompareScreen) and app.screen.query_one(ComparePlot).series is not None
    await pilot.pause()


@pytest.mark.parametrize("size", SIZES)
def test_overview(snap_compare, tmp_path, size):
    assert snap_compare(app_for(runs_dir(tmp_path)), terminal_size=SIZES[size], run_before=scanned)


@pytest.mark.parametrize("size", SIZES)
def test_comparison(snap_compare, tmp_path, size):
    assert snap_compare(app_for(runs_dir(tmp_path)), terminal_size=SIZES[size], run_before=compared)


def test_comparison_by_tokens_log_y(snap_compare, tmp_path):
    async def toggled(pilot):
        await compared(pilot)
        await pilot.press("x", "l")
        await pilot.pause()

    assert snap_compare(app_for(runs_dir(tmp_path)), terminal_size=SIZES["160x48"], run_before=toggled)
