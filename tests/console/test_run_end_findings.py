"""What a run's end and its trainer's state are said to be, the same in every view: a run-API
training that an exception stopped is an error (never "healthy", never "exited cleanly"); a
suspended trainer (state T) is not healthy; a kind's level is one table's."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from console.actions.alerts import check_report
from console.model.findings import KINDS, Finding
from console.model.levels import Level
from console.read.changes import describe_changes
from console.read.reader import RunReader
from tests.console.test_cli import console
from tests.processes import until

ROOT = Path(__file__).resolve().parents[2]


def trainer(run_dir: Path, body: str) -> subprocess.Popen:
    """A real program on the run API (``run`` is the open run), in its own process."""
    code = ("import sys, time\nfrom rundir import open_run\n"
            f"with open_run({str(run_dir)!r}) as run:\n" + "".join(f"    {line}\n" for line in body.splitlines()))
    return subprocess.Popen([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(ROOT)},
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_run_api_training_stopped_by_an_error_is_an_error_everywhere(tmp_path):
    run = tmp_path / "run"
    proc = trainer(run, "for s in range(1, 8):\n    run.log(s, loss=3.0 - s / 10)\nraise ValueError('bad batch')")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1 and "ValueError: bad batch" in err
    stop = json.loads((run / ".loss.json").read_text().splitlines()[-1])
    assert stop["event"] == "stop" and stop["reason"] == "error: ValueError"
    snap, _ = RunReader(run).read()
    text = "the trainer stopped with an error at step 7: ValueError (see its log)"
    assert [(p.kind, p.level, p.text) for p in snap.problems] == [("exit", Level.ERROR, text)]
    assert [(a.kind, a.level, a.text) for a in snap.alerts] == [("exit", Level.ERROR, text)]
    code, lines = check_report(snap)
    assert (code, lines) == (2, [f"error: {text}"])
    r = console(run, "--check")
    assert r.returncode == 2 and r.stdout.splitlines() == [f"error: {text}"]
    assert "problems (1)" in console(run, "--once").stdout


def test_an_error_stop_seen_live_is_never_said_to_exit_cleanly(tmp_path):
    run = tmp_path / "run"
    proc = trainer(run, "for s in range(1, 4):\n    run.log(s, loss=3.0)\nsys.stdin.readline()\n"
                        "raise ValueError('late')")
    until(lambda: (run / ".trainer.json").exists() and (run / ".loss.json").read_text().count("\n") >= 4,
          what="the trainer's three steps")
    reader = RunReader(run)
    before, _ = reader.read()
    assert before.trainer.state == "running"
    proc.communicate("go\n", timeout=60)
    assert proc.returncode == 1
    after, _ = reader.read()
    assert after.trainer.state == "stopped"
    said = [(str(n.level), n.text) for n in describe_changes(before, after, time.time())]
    assert not any("cleanly" in text for _, text in said), said
    assert ("error", "the trainer stopped with an error at step 3: ValueError (see its log)") in said


def test_a_suspended_trainer_is_not_healthy(tmp_path):
    run = tmp_path / "run"
    proc = trainer(run, "for s in range(1, 4):\n    run.log(s, loss=3.0)\ntime.sleep(300)")
    try:
        until(lambda: (run / ".trainer.json").exists() and (run / ".loss.json").read_text().count("\n") >= 4,
              what="the trainer's three steps")
        assert console(run, "--check").returncode == 0           # alive, stepping lately: healthy
        os.kill(proc.pid, signal.SIGSTOP)
        until(lambda: RunReader(run).read()[0].trainer.suspended is not None, what="state T")
        r = console(run, "--check")
        assert r.returncode == 1, r.stdout
        assert r.stdout.startswith("warning: trainer SUSPENDED: stopped by a signal (state T"), r.stdout
    finally:
        proc.kill()
        proc.wait(timeout=60)


def test_each_kind_has_one_level_and_a_finding_at_another_is_refused():
    assert KINDS["zombie"].level is Level.ERROR and KINDS["spike"].level is Level.WARNING
    with pytest.raises(ValueError, match="a 'zombie' finding is at level error, not warning"):
        Finding("zombie", Level.WARNING, "zombie arm x: gone")
