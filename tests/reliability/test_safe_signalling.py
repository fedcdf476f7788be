"""``andrea-console --stop`` / ``--checkpoint`` against a ``.trainer.json`` that names the
wrong process: refused with a clear message and a non-zero exit, and the named process
provably received nothing. (The library-level refusals, pid 1 included, are in
tests/rundir/test_process.py; a live process whose argv names another directory is in
tests/console/test_cli.py.)"""

from __future__ import annotations

import os
import signal
import socket

import pytest

from console.cli import main as console_main
from rundir import TrainerRecord, write_trainer_record
from rundir.layout import CHECKPOINT_REQUEST
from tests.console.test_cli import console
from tests.rundir.test_process import record_for, start_child

FLAGS = ("--stop", "--checkpoint")


@pytest.mark.parametrize("flag", FLAGS)
@pytest.mark.parametrize("case, why", [
    ("reused", "was reused by another process (its start time differs)"),
    ("other-host", "not examined from this host"),
    ("unrelated", "does not name this run directory"),
    ("no-lock", "does not hold the run directory's .lock"),
])
def test_console_refuses_a_record_naming_the_wrong_process(tmp_path, flag, case, why, reliability_report):
    run = tmp_path / "run"
    run.mkdir()
    log = tmp_path / "signals.txt"
    # The victim names the run directory in its argv (as a real trainer would), except when
    # it is meant to be unrelated; it writes down every SIGUSR1 and SIGTERM it receives.
    # "no-lock": a forged record naming a trainer-looking process that traps signals but
    # holds no lock. (A process of this user that holds the run directory open and its lock
    # is the run's trainer whatever its program: a loop of the run API, rundir.open_run.)
    extra = ("--no-lock",) if case == "no-lock" else ()
    if case == "no-lock":
        (run / ".lock").touch()
    victim = start_child(run if case != "unrelated" else tmp_path / "elsewhere", log, *extra, as_script=True)
    try:
        if case == "reused":
            rec = record_for(victim.pid)
            rec = TrainerRecord(rec.pid, rec.create_time - 100, rec.host, rec.argv, rec.started)
        elif case == "other-host":
            rec = record_for(victim.pid, host="not-" + socket.gethostname())
        else:
            rec = record_for(victim.pid)
        write_trainer_record(run, rec)
        r = console(run, flag, "--timeout", "2")
        if case == "other-host" and flag == "--checkpoint":
            # A trainer on another host is asked through the run directory, never signalled.
            assert r.returncode != 0 and (run / CHECKPOINT_REQUEST).exists(), r.stderr
            assert "through .checkpoint_request.json" in r.stderr and "not verifiable from this host" in r.stderr
        else:
            assert r.returncode == 1, r.stderr
            name = "SIGTERM" if flag == "--stop" else "SIGUSR1"
            assert f"{name} not sent" in r.stderr and why in r.stderr
            assert r.stderr.count("\n") == 1
        assert victim.poll() is None and log.read_text().splitlines() == ["ready"]
    finally:
        victim.kill()
        victim.wait()


@pytest.mark.parametrize("flag", FLAGS)
def test_console_refuses_its_own_pid(tmp_path, flag, capsys):
    """In-process, so that the record can name the console itself; a handler records any signal."""
    run = tmp_path / "run"
    run.mkdir()
    write_trainer_record(run, record_for(os.getpid(), argv=["andrea-train", str(run)]))
    received = []
    previous = {sig: signal.signal(sig, lambda s, f: received.append(s)) for sig in (signal.SIGTERM, signal.SIGUSR1)}
    try:
        assert console_main([str(run), flag, "--timeout", "1"]) == 1
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    assert received == []
    assert "this console's own pid" in capsys.readouterr().err


def test_console_refuses_pid_1(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    write_trainer_record(run, TrainerRecord(1, 0.0, socket.gethostname(), ["andrea-train", str(run)], 0.0))
    for flag in FLAGS:
        r = console(run, flag, "--timeout", "2")
        assert r.returncode == 1 and "pid 1 (init)" in r.stderr
