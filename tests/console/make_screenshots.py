"""Regenerate the SVG screenshots of the console's main states into ``screenshots/``.

    python -m tests.console.make_screenshots      (or: make screenshots)

The run directories are the snapshot tests' (tests/rundirs.py, a fixed clock, a fake
live trainer), so the pictures change only when the console does. One more, a PNG: the
dashboard served in a browser (``--serve``) on a live micro trainer, taken by chromium
where it is installed (else skipped, saying why).
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

from tests.console import conftest  # noqa: F401  (UTC, so that times are the same everywhere)
from tests.console.test_overview_snapshots import app_for as overview_for
from tests.console.test_overview_snapshots import runs_dir
from tests.console.test_snapshots import BIG, NARROW, WIDE, app_for, healthy, live_probe, settled, steady_cursors
from tests.rundirs import make_run

OUT = Path(__file__).resolve().parents[2] / "screenshots"


def invalid_run(path: Path) -> Path:
    return make_run(path, truncated=(300,), foreign=(100,))


def states(tmp: Path):
    yield "dashboard", app_for(healthy(tmp / "a"), live_probe), WIDE, ()
    yield "dashboard-160x48", app_for(healthy(tmp / "a2"), live_probe), BIG, ()
    yield "dashboard-80x24", app_for(healthy(tmp / "b"), live_probe), NARROW, ()
    yield "zombie-arm", app_for(make_run(tmp / "c" / "run", state_arms=(
        "stdlib-code", "stdlib-docstrings", "pydoc-topics", "repo-docstrings")), live_probe), WIDE, ()
    yield "invalid-checkpoint", app_for(invalid_run(tmp / "d" / "run")), WIDE, ()
    # 80x24: key 2 shows the checkpoints under the plot; Enter on the selected one, its detail.
    yield "invalid-checkpoint-80x24", app_for(invalid_run(tmp / "d2" / "run")), NARROW, ("2",)
    yield "checkpoint-detail-80x24", app_for(invalid_run(tmp / "d3" / "run")), NARROW, ("2", "down", "enter")
    yield "zombie-arm-80x24", app_for(make_run(tmp / "c2" / "run", state_arms=(
        "stdlib-code", "stdlib-docstrings", "pydoc-topics", "repo-docstrings")), live_probe), NARROW, ("3",)
    yield "damaged-run", app_for(make_run(tmp / "e" / "run", trainer_record="stale", nonfinite=(150,),
                                          bad_lines=("garbage",), torn_tail='{"step": 30',
                                          state_text="[]")), WIDE, ()
    yield "empty-directory", app_for(make_run(tmp / "f" / "run", empty=True)), WIDE, ()
    yield "help", app_for(healthy(tmp / "g"), live_probe), WIDE, ("question_mark",)
    yield "help-80x24", app_for(healthy(tmp / "g2"), live_probe), NARROW, ("question_mark",)
    yield "stop-confirmation", app_for(healthy(tmp / "h"), live_probe), WIDE, ("s",)
    yield "stop-confirmation-80x24", app_for(healthy(tmp / "h2"), live_probe), NARROW, ("s",)
    yield "pivot", app_for(healthy(tmp / "i"), live_probe), WIDE, ("p",)
    yield "overview", overview_for(runs_dir(tmp / "j")), WIDE, ()
    yield "comparison", overview_for(runs_dir(tmp / "k")), WIDE, ("space", "down", "space", "down", "down",
                                                                  "space", "v")
    yield "inspector", app_for(make_run(tmp / "l" / "run", checkpoints=(100, 200, 300), model_sized=True),
                               live_probe), WIDE, ("i", *"s" * 9)    # sorted by update_ratio, largest first
    yield "pivot-80x24", app_for(healthy(tmp / "i2"), live_probe), NARROW, ("p",)
    yield "rollback", app_for(healthy(tmp / "m"), live_probe), WIDE, ("r",)
    yield "rollback-80x24", app_for(healthy(tmp / "m2"), live_probe), NARROW, ("r",)
    yield "dashboard-grid", app_for(healthy(tmp / "n"), live_probe), BIG, ("g",)
    yield "zoom-and-cursor-80x24", app_for(healthy(tmp / "n2"), live_probe), NARROW, ("z", "z", "m", "down", "enter",
                                                                                  *["left"] * 20)
    yield "series-picker-80x24", app_for(healthy(tmp / "n3"), live_probe), NARROW, ("m",)
    yield "series-table-80x24", app_for(make_run(tmp / "n4" / "run", steps=1500, checkpoints=(500, 1000, 1500),
                                                 series=True), live_probe), NARROW, ("left", "t")
    yield "inspector-80x24", app_for(make_run(tmp / "l2" / "run", checkpoints=(100, 200, 300), model_sized=True),
                                     live_probe), NARROW, ("i",)


async def shoot(name: str, app, size, keys) -> Path:
    async with app.run_test(size=size) as pilot:
        await settled(pilot)
        for key in keys:
            await pilot.press(key)
            await pilot.pause(0.3)     # the pivot and rollback screens open once the journal has been looked at
            # the inspector's read (not every worker: the pivot screen's lasts while it is open)
            reads = [w for w in pilot.app.workers if w.group == "inspect"]
            if reads:
                await pilot.app.workers.wait_for_complete(reads)
                await pilot.pause()
        steady_cursors(pilot.app)
        await pilot.pause(0.5)         # the rollback screen's proposal is worked out in a worker
        return Path(app.save_screenshot(f"{name}.svg", str(OUT)))


def shoot_web(tmp: Path) -> Path | None:
    """``dashboard-web.png``: a live micro trainer's dashboard in chromium, read-only, after
    ``c`` was refused."""
    from rundir.layout import LOSS_JSON
    from tests.console import browser
    from tests.console.trainer_proc import Trainer

    why = browser.missing()
    if why:
        print(f"dashboard-web.png: skipped: {why}", file=sys.stderr)
        return None
    from playwright.sync_api import sync_playwright

    run = tmp / "web" / "demo"
    run.parent.mkdir()
    with Trainer(run), sync_playwright() as playwright, browser.Served(run) as served:
        # Enough steps for a curve.
        browser.wait_until(lambda: (run / LOSS_JSON).read_bytes().count(b"\n") >= 300, what="300 steps")
        chromium = browser.launch(playwright)
        page, _ = browser.open_page(chromium, served.url, size=(1600, 1000))
        browser.wait_for_text(page, "running")
        browser.press(page, "c")
        browser.wait_for_text(page, "c: refused")
        page.wait_for_timeout(1500)         # the frame after the text arrived, and the next read
        path = OUT / "dashboard-web.png"
        page.screenshot(path=str(path))
        chromium.close()
    return path


def main() -> int:
    OUT.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name, app, size, keys in states(Path(tmp)):
            path = asyncio.run(shoot(name, app, size, keys))
            print(path.relative_to(OUT.parent))
        path = shoot_web(Path(tmp))
        if path is not None:
            print(path.relative_to(OUT.parent))
    return 0


if __name__ == "__main__":
    sys.exit(main())
