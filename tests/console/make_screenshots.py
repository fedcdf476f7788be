"""Regenerate the SVG screenshots of the console's main states into ``screenshots/``.

    python -m tests.console.make_screenshots      (or: make screenshots)

The run directories are the snapshot tests' (tests/rundirs.py, a fixed clock, a fake
live trainer), so the pictures change only when the console does.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

from tests.console import conftest  # noqa: F401  (UTC, so that times are the same everywhere)
from tests.console.test_snapshots import NARROW, WIDE, app_for, healthy, live_probe, settled
from tests.rundirs import make_run

OUT = Path(__file__).resolve().parents[2] / "screenshots"


def states(tmp: Path):
    yield "dashboard", app_for(healthy(tmp / "a"), live_probe), WIDE, ()
    yield "dashboard-80x24", app_for(healthy(tmp / "b"), live_probe), NARROW, ()
    yield "zombie-arm", app_for(make_run(tmp / "c" / "run", state_arms=(
        "stdlib-code", "stdlib-docstrings", "pydoc-topics", "repo-docstrings")), live_probe), WIDE, ()
    yield "invalid-checkpoint", app_for(make_run(tmp / "d" / "run", truncated=(300,), foreign=(100,))), WIDE, ()
    yield "damaged-run", app_for(make_run(tmp / "e" / "run", trainer_record="stale", nonfinite=(150,),
                                          bad_lines=("garbage",), torn_tail='{"step": 30',
                                          state_text="[]")), WIDE, ()
    yield "empty-directory", app_for(make_run(tmp / "f" / "run", empty=True)), WIDE, ()
    yield "help", app_for(healthy(tmp / "g"), live_probe), WIDE, ("question_mark",)
    yield "stop-confirmation", app_for(healthy(tmp / "h"), live_probe), WIDE, ("s",)
    yield "pivot", app_for(healthy(tmp / "i"), live_probe), WIDE, ("p",)
    yield "rollback", app_for(healthy(tmp / "j"), live_probe), WIDE, ("r",)


async def shoot(name: str, app, size, keys) -> Path:
    async with app.run_test(size=size) as pilot:
        await settled(pilot)
        for key in keys:
            await pilot.press(key)
            await pilot.pause(0.3)     # the pivot and rollback screens open once the journal has been looked at
        await pilot.pause(0.5)         # the rollback screen's proposal is worked out in a worker
        return Path(app.save_screenshot(f"{name}.svg", str(OUT)))


def main() -> int:
    OUT.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name, app, size, keys in states(Path(tmp)):
            path = asyncio.run(shoot(name, app, size, keys))
            print(path.relative_to(OUT.parent))
    return 0


if __name__ == "__main__":
    sys.exit(main())
