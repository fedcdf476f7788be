"""``andrea-console runs/``: the overview against real trainers, finished runs, another
engine's run and junk subdirectories."""

from __future__ import annotations

import html
import json
import subprocess
import sys

import psutil
import pytest

from console.text.overview_report import COLUMNS
from console.tui.app import ConsoleApp
from console.tui.options import ConsoleOptions
from console.tui.screens import ConfirmScreen, DashboardScreen
from console.tui.screens.compare import CompareScreen
from console.tui.widgets.compare_plot import ComparePlot
from console.tui.widgets.runs_table import NAME_CAP
from rundir import list_checkpoints
from tests.console.conftest import table_measured, until
from tests.console.trainer_proc import ROOT, Trainer
from tests.rundirs import make_run

SIZE = (140, 40)


def make_runs_dir(root):
    """Two finished runs, another engine's run (a JSON array, no run.toml) and junk."""
    make_run(root / "finished", steps=600, checkpoints=(300, 600),
             events=({"event": "stop", "step": 600, "reason": "signal"},))
    make_run(root / "diverged", steps=400, checkpoints=(200,), nonfinite=(398, 399, 400),
             events=({"event": "stop", "step": 400, "reason": "nonfinite", "in_a_row": 3},))
    make_run(root / "other-engine", steps=500, checkpoints=(), history_format="array", with_run_toml=False,
             with_state=False, with_samples=False)
    (root / "junk").mkdir()
    (root / "junk" / "notes.txt").write_text("not a run")
    (root / "empty").mkdir()
    (root / "stray-file.txt").write_text("a file, not a run directory")
    return root


def console(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "console", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)


def select(app: ConsoleApp, name: str) -> None:
    table = app.overview.table
    index = next(i for i, s in enumerate(table.summaries) if s.name == name)
    table.move_cursor(row=index, animate=False)


def by_name(app: ConsoleApp) -> dict:
    return {s.name: s for s in app.summaries}


def test_once_and_json_with_live_trainers(tmp_path):
    root = make_runs_dir(tmp_path / "runs")
    with Trainer(root / "live-a"), Trainer(root / "live-b"):
        out = console(str(root), "--json")
        assert out.returncode == 0, out.stderr
        data = json.loads(out.stdout)
        runs = {r["run"]: r for r in data["runs"]}
        assert set(runs) == {"live-a", "live-b", "finished", "diverged", "other-engine"}
        assert runs["live-a"]["trainer"]["state"] == runs["live-b"]["trainer"]["state"] == "running"
        assert runs["live-a"]["trainer"]["pid"] and runs["live-a"]["last_step"] is not None
        assert runs["finished"]["trainer"]["label"] == "finished" and runs["finished"]["last_step"] == 600
        assert runs["finished"]["newest_checkpoint"]["step"] == 600 and runs["finished"]["problems"] == []
        assert any("diverged" in p for p in runs["diverged"]["problems"])
        assert runs["other-engine"]["history_format"] == "array" and runs["other-engine"]["last_step"] == 500
        assert {s["name"] for s in data["skipped"]} == {"junk", "empty"}
        # The live runs wrote last: they come first.
        assert [r["run"] for r in data["runs"]][:2] != ["finished", "diverged"]

        out = console(str(root), "--once", "--width", "120")
        assert out.returncode == 0, out.stderr
        assert "live-a" in out.stdout and "running" in out.stdout and "finished" in out.stdout
        assert "junk/: not a run" in out.stdout and "diverged: trainer stopped: the run diverged" in out.stdout

        out = console(str(root), "--stop")
        assert out.returncode == 2 and "acts on one run" in out.stderr
        assert psutil.pid_exists(runs["live-a"]["trainer"]["pid"])


@pytest.mark.asyncio
async def test_overview_live(tmp_path):
    """New runs appear while the overview is open; Enter opens a run's dashboard and Escape
    returns; space marks runs and v compares them; c on the overview checkpoints the
    selected trainer, s stops it after the confirmation."""
    root = make_runs_dir(tmp_path / "runs")
    with Trainer(root / "live") as trainer:
        app = ConsoleApp(root, ConsoleOptions(refresh=0.5))
        async with app.run_test(size=SIZE, notifications=False) as pilot:
            await until(pilot, lambda: "live" in by_name(app), what="the first scan")
            await until(pilot, lambda: by_name(app)["live"].trainer_state == "running", what="live verified")
            assert set(by_name(app)) == {"live", "finished", "diverged", "other-engine"}

            make_run(root / "newcomer", steps=50, checkpoints=())
            await until(pilot, lambda: "newcomer" in by_name(app), what="the new run to appear")

            select(app, "finished")
            await pilot.press("enter")
            await until(pilot, lambda: app.snapshot is not None and app.snapshot.name == "finished",
                        what="the finished run's dashboard")
            assert isinstance(app.screen, DashboardScreen)
            await pilot.press("escape")
            await until(pilot, lambda: app.screen is app.overview, what="back to the overview")

            select(app, "finished")
            await pilot.press("space")
            select(app, "other-engine")
            await pilot.press("space", "v")
            await until(pilot, lambda: isinstance(app.screen, CompareScreen)
                        and app.screen.query_one(ComparePlot).series is not None, what="the comparison")
            names = [name for name, *_ in app.screen.query_one(ComparePlot).series]
            assert names == ["finished", "other-engine"]
            await pilot.press("escape")
            await until(pilot, lambda: app.screen is app.overview, what="back from the comparison")

            select(app, "live")
            await pilot.press("c")                  # SIGUSR1 through the same verification as the dashboard
            await until(pilot, lambda: list_checkpoints(root / "live"), what="the requested checkpoint")
            await until(pilot, lambda: "checkpoint landed" in str(app.overview.query_one("#overview-notice").render()),
                        what="the overview to say the checkpoint landed")

            select(app, "live")
            await pilot.press("s")
            await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the confirmation")
            await pilot.press("n")                  # any other key cancels: nothing is sent
            await pilot.pause(0.5)
            assert trainer.proc.poll() is None
            select(app, "live")
            await pilot.press("s")
            await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the confirmation")
            await pilot.press("y")
            await until(pilot, lambda: trainer.proc.poll() is not None, timeout=120, what="the trainer to stop")
            assert trainer.proc.returncode == 0
            await until(pilot, lambda: by_name(app)["live"].trainer_state == "stopped", what="the stop to show")
            await pilot.press("q")


def test_hostile_names_and_an_empty_root(tmp_path):
    """A run's name and a junk subdirectory's name reach the terminal printable; a
    directory without runs is not an overview (the single-run view says what it is)."""
    root = tmp_path / "runs"
    make_run(root / "evil\x1b[31mred\u202e", steps=50, checkpoints=())
    (root / "junk\x07bell").mkdir()
    out = console(str(root), "--once")
    assert out.returncode == 0, out.stderr
    assert "\x1b" not in out.stdout and "\x07" not in out.stdout and "\u202e" not in out.stdout
    assert "evil\\x1b[31m" in out.stdout and "junk\\x07bell/: not a run" in out.stdout
    data = json.loads(console(str(root), "--json").stdout)
    assert data["runs"][0]["run"] == "evil\x1b[31mred\u202e"         # JSON carries the name as it is

    (tmp_path / "nothing").mkdir()
    out = console(str(tmp_path / "nothing"), "--json")
    assert "runs" not in json.loads(out.stdout)                      # the single-run report


@pytest.mark.asyncio
async def test_run_column_fits_the_longest_name_up_to_a_cap(tmp_path):
    """The run column is as wide as the longest name (it is fixed, not measured when the
    table is idle), and a name longer than the cap ends in an ellipsis."""
    root = tmp_path / "runs"
    make_run(root / "short", steps=50, checkpoints=())
    app = ConsoleApp(root, ConsoleOptions(watch=False, tick=None))
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.summaries, what="the first scan")
        assert app.overview.table.columns["run"].width == len("short")
        long_name = "a-very-long-run-name-" * 3
        make_run(root / long_name, steps=50, checkpoints=())
        app.overview.rescan()
        await until(pilot, lambda: len(app.summaries) == 2, what="the second scan")
        table = app.overview.table
        assert table.columns["run"].width == NAME_CAP
        await until(pilot, lambda: table_measured(table), what="the table laid out")
        shown = html.unescape(app.export_screenshot())
        assert long_name[:NAME_CAP - 1] + "…" in shown and long_name[:NAME_CAP] not in shown


@pytest.mark.asyncio
async def test_opening_runs_again_and_again_adds_no_timers_and_leaves_no_reads(tmp_path):
    """Each Enter follows the run (its reads and its watcher) and each Escape stops that: the
    app's tick and start-up timer are the app's, set once, however many runs were opened."""
    root = make_runs_dir(tmp_path / "runs")
    app = ConsoleApp(root, ConsoleOptions(refresh=None, tick=60.0))
    ticks = []
    real_set_interval = app.set_interval
    app.set_interval = lambda interval, callback, **kw: ticks.append(callback) or real_set_interval(interval, callback,
                                                                                                   **kw)
    async with app.run_test(size=SIZE, notifications=False) as pilot:
        await until(pilot, lambda: "finished" in by_name(app), what="the first scan")
        closed = []
        for _ in range(3):
            select(app, "finished")
            await pilot.press("enter")
            await until(pilot, lambda: app.snapshot is not None, what="the run's dashboard")
            closed.append(app.reads)
            await pilot.press("escape")
            await until(pilot, lambda: app.screen is app.overview, what="back to the overview")
        assert len([t for t in ticks if getattr(t, "__name__", "") == "tick"]) == 1
        for reads in closed:                    # a closed run's reads take no more requests
            reads.request({"history"})
            assert not reads._pending
        await pilot.press("q")


def test_a_run_api_runs_own_checkpoint_is_its_newest_in_the_overview(tmp_path):
    """A training loop of the run API saves checkpoints in its own format: the overview's row
    (and its --json) shows the newest one, status external, where the run has none of ours."""
    import time

    import rundir
    from console.read.run_summary import summarize_run
    from console.text.overview_report import row_cells, summary_json

    run_dir = tmp_path / "runs" / "lightning"
    with rundir.open_run(run_dir, config={"lr": 0.1}) as run:
        for step in range(1, 6):
            run.log(step, loss=2.0 / step)
        saved = run_dir / "checkpoints" / "step-5.ckpt"
        saved.parent.mkdir()
        saved.write_bytes(b"weights")
        run.checkpoint_saved(5, saved)
    now = time.time()
    summary = summarize_run(run_dir, now)
    newest = summary_json(summary, now)["newest_checkpoint"]
    assert (newest["name"], newest["step"], newest["status"]) == ("step-5.ckpt", 5, "external")
    assert summary.checkpoints == 0                     # none of ours: never resumed or rolled back to
    cells = dict(zip([header for header, _, _ in COLUMNS], row_cells(summary, now)))
    assert cells["ckpt"] == "5" and cells["ckpt age"] != "-"


@pytest.mark.asyncio
@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=["80x24", "160x48"])
async def test_columns_are_shown_whole_and_arrows_scroll_them_a_column_at_a_time(tmp_path, size):
    """At 80 columns the table does not fit: every column in view is whole (13,600 is never
    "13"), the run's name stays, → and ← bring the others in a column at a time, and a line
    under the table names those out of view."""
    from console.text.overview_report import row_cells
    from tests.console.test_hostile_text import pane_lines
    from tests.console.test_pivot_screen import screen_lines
    root = tmp_path / "runs"
    make_run(root / "long-run", steps=13_600, checkpoints=(13_000, 13_600))
    app = ConsoleApp(root, ConsoleOptions(watch=False, tick=None, now=lambda: 1e9))
    headers = [header for header, _, _ in COLUMNS]
    async with app.run_test(size=size) as pilot:
        await until(pilot, lambda: app.summaries and table_measured(app.overview.table), what="the runs table")
        table = app.overview.table
        cells = dict(zip(headers, row_cells(app.summaries[0], 1e9)))
        assert cells["step"] == "13,600"

        async def drawn() -> list[str]:
            # Measured, and given its region: under load the first is seen a frame before the second.
            await until(pilot, lambda: table_measured(table) and len(pane_lines(table)) > 1, what="the table laid out")
            lines = pane_lines(table)
            shown = [str(c.key.value) for c in table.ordered_columns if c.key.value != "mark"]
            # the header is the shown names in order, nothing else, nothing cut
            assert " ".join(lines[0].split()) == " ".join(shown), lines[0]
            assert all(cells[h] in lines[1] for h in shown), (shown, lines[1])
            return shown

        views = [await drawn()]
        for _ in headers:
            await pilot.press("right")
            await pilot.pause()
            views.append(await drawn())
        assert all(view[0] == "run" for view in views) and views[-1][-1] == "disk"     # every column reached
        lines = screen_lines(app)
        if size == (80, 24):
            assert views[0] != headers and views[1] == ["run", *views[0][2:], views[1][-1]], views[:2]
            assert any(line.startswith("← trainer") for line in lines), lines
            for _ in headers:
                await pilot.press("left")
            await pilot.pause()
            assert await drawn() == views[0]
        else:
            assert views[0] == headers and not any(line.startswith(("← ", "→ ")) for line in lines)
