"""The run API's process model: only the process that opened a run acts for it (a forked
child that exits touches neither the record, the lock nor the history), several runs open in
one process keep their signal handlers until the last finishes, and a stop the loop never
looks at ends the run at the next ``run.log`` (its stop event, then ``SystemExit(0)``)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from rundir import RunError, open_run
from rundir.layout import LOSS_JSON, TRAINER_JSON
from tests.processes import until
from tests.rundirs import read_history as history

ROOT = Path(__file__).resolve().parents[2]

FORK = """
import json, os, sys, rundir
run = rundir.open_run(sys.argv[1])
run.log(1, loss=1.0)
child = os.fork()
if child == 0:                      # the child returns normally: the interpreter's exit runs atexit
    try:
        run.log(2, loss=1.0)
    except rundir.RunError as err:
        print("child:", err, flush=True)
    run.finish()
    sys.exit(0)
_, status = os.waitpid(child, 0)
print("child exit", os.waitstatus_to_exitcode(status), flush=True)
print("record", json.load(open(os.path.join(sys.argv[1], ".trainer.json")))["pid"] == os.getpid(), flush=True)
try:
    rundir.open_run(sys.argv[1])
except rundir.RunError as err:
    print("second open refused:", "another trainer" in str(err), flush=True)
run.log(2, loss=0.5)
run.finish()
print("parent done", flush=True)
"""


def test_a_forked_child_that_exits_leaves_the_parents_run_alone(tmp_path):
    run_dir = tmp_path / "x"
    r = subprocess.run([sys.executable, "-c", FORK, str(run_dir)], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("child: run.log: this process (pid ") and "is a fork of pid" in lines[0], lines
    assert lines[1:] == ["child exit 0", "record True", "second open refused: True", "parent done"], lines
    h = history(run_dir)
    assert list(h.step) == [1, 2] and [e.event for e in h.events] == ["start", "stop"]
    assert h.events[-1].data["reason"] == "finished"


def test_two_runs_in_one_process_keep_the_handlers_until_the_last_finishes(tmp_path):
    before = signal.getsignal(signal.SIGUSR1), signal.getsignal(signal.SIGTERM)
    first, second = open_run(tmp_path / "a"), open_run(tmp_path / "b")
    first.finish()
    assert signal.getsignal(signal.SIGUSR1) not in (signal.SIG_DFL, signal.SIG_IGN)
    os.kill(os.getpid(), signal.SIGUSR1)                   # the default action would end this process
    until(lambda: second.checkpoint_requested, what="SIGUSR1 seen by the run still open")
    assert not (tmp_path / "a" / TRAINER_JSON).exists() and (tmp_path / "b" / TRAINER_JSON).exists()
    second.finish()
    assert (signal.getsignal(signal.SIGUSR1), signal.getsignal(signal.SIGTERM)) == before     # put back


def test_a_stop_the_loop_never_looks_at_ends_the_run_at_the_next_log(tmp_path):
    run_dir = tmp_path / "x"
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    with pytest.raises(SystemExit) as ended:
        with open_run(run_dir) as run:
            run.log(1, loss=1.0)
            os.kill(os.getpid(), signal.SIGTERM)
            until(lambda: run.checkpoint_requested, what="the stop taken")      # the loop looks at this only
            (run_dir / "final.pt").write_bytes(b"x")
            run.checkpoint_saved(1, run_dir / "final.pt")
            run.log(2, loss=1.0)                        # the next log after the stop: the run ends here
            raise AssertionError("run.log returned after an unlooked stop")
    assert ended.value.code == 0
    h = history(run_dir)
    assert list(h.step) == [1, 2] and h.events[-1].event == "stop" and h.events[-1].data["reason"] == "signal"
    assert not (run_dir / TRAINER_JSON).exists()
    assert "did not look at run.stop_requested" in (run_dir / "trainer.log").read_text()
    with pytest.raises(RunError):
        run.log(3, loss=1.0)
    # It exits on a stop: further stops were ignored (SIGTERM and SIGINT), as a process about to
    # exit ignores them. This one goes on: its handlers put back.
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == (signal.SIG_IGN, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, before[0])
    signal.signal(signal.SIGINT, before[1])


def test_a_loop_that_looks_at_the_stop_is_not_ended(tmp_path):
    with open_run(tmp_path / "x") as run:
        run.log(1, loss=1.0)
        os.kill(os.getpid(), signal.SIGTERM)
        until(lambda: run.stop_requested, what="the stop seen")
        run.log(2, loss=1.0)
        run.log(3, loss=1.0)                            # it looked: the loop decides when to leave
    assert json.loads((tmp_path / "x" / LOSS_JSON).read_text().splitlines()[-1])["reason"] == "signal"
