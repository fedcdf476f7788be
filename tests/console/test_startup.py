"""andrea-console's start-up: the garbage collector is off until the first full frame
and back on after it (start-up's objects frozen out of later collections); checked in a
fresh process running the real dashboard headless."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.rundirs import make_run

from .test_no_torch import ROOT

SCRIPT = r"""
import gc, json, sys
from pathlib import Path
from console.commands.dashboard_cli import open_dashboard

seen = {}

def record(app_class):
    class FirstFrame(app_class):
        def on_mount(self):
            seen["collector_at_mount"] = gc.isenabled()

        def started(self):
            seen.setdefault("collector_before", gc.isenabled())
            super().started()
            seen.setdefault("collector_after", gc.isenabled())
            seen.setdefault("frozen", gc.get_freeze_count())
            seen.setdefault("steps", self.snapshot.history.n_steps if self.snapshot else None)
            self.exit()
    return FirstFrame

open_dashboard(Path(sys.argv[1]), customize=record, watch=False, tick=None,
               run_options={"headless": True, "size": (140, 45)})
seen["collector_on_return"] = gc.isenabled()
print(json.dumps(seen))
"""


def test_collector_is_off_until_the_first_frame_and_on_after(tmp_path):
    run = make_run(tmp_path / "run", steps=500)
    r = subprocess.run([sys.executable, "-c", SCRIPT, str(run)], cwd=ROOT, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    seen = json.loads(r.stdout.strip().splitlines()[-1])
    assert seen["collector_at_mount"] is False and seen["collector_before"] is False
    assert seen["collector_after"] is True and seen["frozen"] > 1000
    assert seen["steps"] == 500 and seen["collector_on_return"] is True
