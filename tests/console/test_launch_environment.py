"""The console's command line tunes its own numpy through the environment (console/__init__.py),
before numpy is imported; importing the package changes nothing; what the console launches
(the trainer, an sbatch job) gets the environment as it was."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.rundirs import make_run

from .test_no_torch import ROOT

TUNING = ("OPENBLAS_NUM_THREADS", "NUMPY_MADVISE_HUGEPAGE")
# The real entry (console/cli.py:main) on a real run, its own output set aside; then what the
# process's environment holds, what it would launch with, and whether numpy was imported
# before the entry ran (then the tuning came too late for it).
SHOW = f"""
import contextlib, io, json, os, sys
from console import cli
import console
numpy_first = "numpy" in sys.modules
with contextlib.redirect_stdout(io.StringIO()):
    code = cli.main(sys.argv[1:])
print(json.dumps({{"code": code, "numpy_first": numpy_first, "numpy_after": "numpy" in sys.modules,
                  "own": {{k: os.environ.get(k) for k in {TUNING!r}}}, "launched": console.launch_environment()}}))
"""


def run(env: dict[str, str], run_dir) -> dict:
    done = subprocess.run([sys.executable, "-c", SHOW, str(run_dir), "--json"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["code"] == 0 and not out["numpy_first"] and out["numpy_after"], out
    return out


def test_importing_the_console_changes_no_environment():
    show = ("import json, os; before = dict(os.environ); import console, console.cli; "
            "print(json.dumps(dict(os.environ) == before))")
    env = {k: v for k, v in os.environ.items() if k not in TUNING}
    done = subprocess.run([sys.executable, "-c", show], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) is True


def test_the_console_tunes_itself_and_launches_with_the_environment_as_it_was(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in TUNING}
    env["KEPT"] = "yes"
    out = run(env, make_run(tmp_path / "run"))
    assert out["own"] == {"OPENBLAS_NUM_THREADS": "1", "NUMPY_MADVISE_HUGEPAGE": "0"}
    assert "OPENBLAS_NUM_THREADS" not in out["launched"] and "NUMPY_MADVISE_HUGEPAGE" not in out["launched"]
    assert out["launched"]["KEPT"] == "yes"


def test_what_the_environment_says_wins_and_is_passed_on(tmp_path):
    out = run({**os.environ, "OPENBLAS_NUM_THREADS": "4"}, make_run(tmp_path / "run"))
    assert out["own"]["OPENBLAS_NUM_THREADS"] == "4" and out["launched"]["OPENBLAS_NUM_THREADS"] == "4"
