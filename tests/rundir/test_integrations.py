"""The Lightning and Hugging Face examples, real frameworks on CPU, operated by the console's
command line: their loss is read, ``--checkpoint`` (the dashboard's c) makes the framework
write a checkpoint that lands and is listed, ``--stop`` (s) stops the run cleanly, exit 0."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rundir import verify_trainer
from rundir.layout import LOSS_JSON

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "TOKENIZERS_PARALLELISM": "false"}
EXAMPLES = {"lightning": "lightning_module.py", "transformers": "hf_trainer.py"}


def console(*args: object) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "console", *map(str, args)], capture_output=True, text=True,
                          timeout=180, cwd=ROOT, env=ENV)


@pytest.fixture(scope="module")
def trainers(tmp_path_factory):
    """Both examples started at once (their imports take seconds each), each until stopped."""
    base = tmp_path_factory.mktemp("frameworks")
    started = {}
    for name, script in EXAMPLES.items():
        log = open(base / f"{name}.out", "wb")
        proc = subprocess.Popen([sys.executable, str(ROOT / "examples" / script), str(base / name), "--steps",
                                 "1000000"], stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, env=ENV,
                                start_new_session=True)
        started[name] = (proc, base / name, log)
    yield started
    for proc, _, log in started.values():
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        proc.wait()
        log.close()


def _steps(run_dir: Path) -> int:
    try:
        return sum(1 for line in (run_dir / LOSS_JSON).read_text().splitlines() if '"loss"' in line)
    except OSError:
        return 0


@pytest.mark.parametrize("framework", list(EXAMPLES))
def test_the_console_reads_checkpoints_and_stops_a_framework(trainers, framework):
    proc, run_dir, log = trainers[framework]
    deadline = time.monotonic() + 120
    while not (verify_trainer(run_dir).ok and _steps(run_dir) >= 3):
        assert proc.poll() is None, (run_dir.parent / f"{framework}.out").read_text()[-3000:]
        assert time.monotonic() < deadline, "the example never logged a step"
        time.sleep(0.1)
    report = json.loads(console(run_dir, "--json").stdout)
    assert report["trainer"]["state"] == "running"
    assert report["history"]["steps"] >= 3 and math.isfinite(report["history"]["last_loss"])
    r = console(run_dir, "--checkpoint", "--timeout", "120")
    assert r.returncode == 0, r.stderr
    saved = Path(r.stdout.strip())
    assert saved.exists() and saved.parent == run_dir / "checkpoints"
    report = json.loads(console(run_dir, "--json").stdout)
    listed = report["external_checkpoints"]
    assert [Path(c["path"]).name for c in listed] == [saved.name] and listed[0]["size"] > 0
    assert listed[0]["status"] == "external" and listed[0]["reason"] == "signal"
    assert report["checkpoints"] == []                  # never one of ours: not resumed, not rolled back to
    r = console(run_dir, "--stop", "--timeout", "120")
    assert r.returncode == 0, r.stderr
    assert "exited cleanly" in r.stdout and "final checkpoint checkpoints/" in r.stdout
    assert proc.wait(60) == 0
    report = json.loads(console(run_dir, "--json").stdout)
    assert report["trainer"]["state"] == "stopped" and len(report["external_checkpoints"]) == 2
    r = console(run_dir, "--rollback", "--to", listed[0]["step"], "--yes")
    assert r.returncode != 0 and "no complete checkpoint" in r.stderr      # not ours to roll back to
