"""The console tunes its own numpy through the environment (console/__init__.py); what it
launches (the trainer, an sbatch job) gets the environment as it was."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from .test_no_torch import ROOT

SHOW = ("import json, os, console; print(json.dumps({'own': {k: os.environ.get(k) for k in "
        "('OPENBLAS_NUM_THREADS', 'NUMPY_MADVISE_HUGEPAGE')}, 'launched': console.launch_environment()}))")


def run(env: dict[str, str]) -> dict:
    done = subprocess.run([sys.executable, "-c", SHOW], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_console_tunes_itself_and_launches_with_the_environment_as_it_was():
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "NUMPY_MADVISE_HUGEPAGE")}
    env["KEPT"] = "yes"
    out = run(env)
    assert out["own"] == {"OPENBLAS_NUM_THREADS": "1", "NUMPY_MADVISE_HUGEPAGE": "0"}
    assert "OPENBLAS_NUM_THREADS" not in out["launched"] and "NUMPY_MADVISE_HUGEPAGE" not in out["launched"]
    assert out["launched"]["KEPT"] == "yes"


def test_what_the_environment_says_wins_and_is_passed_on():
    out = run({**os.environ, "OPENBLAS_NUM_THREADS": "4"})
    assert out["own"]["OPENBLAS_NUM_THREADS"] == "4" and out["launched"]["OPENBLAS_NUM_THREADS"] == "4"
