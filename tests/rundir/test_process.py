""".trainer.json, .lock and verification before any signal: real processes, real signals."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from rundir import (
    RunLock,
    RunLockedError,
    SlurmPlacement,
    TrainerRecord,
    read_trainer_record,
    remove_trainer_record,
    signal_trainer,
    verify_trainer,
    write_trainer_record,
)
from rundir.trainer_record import process_start, read_boot_id, read_start_ticks
from tests.processes import NOBODY, run_as

# A stand-in trainer that passes every check a real one does: run as a script named
# andrea-train, it holds the run directory open, holds the run's .lock, reports every
# SIGUSR1/SIGTERM it receives into a file, and exits on SIGTERM (not with "--stay"). With
# "--no-lock" it holds no lock; run with "python -c" it is not a trainer entry point.
CHILD = r"""
import fcntl, os, signal, sys, time, pathlib
run, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
if "--no-lock" not in sys.argv:
    run.mkdir(parents=True, exist_ok=True)
    fd = os.open(run / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
held = os.open(run, os.O_RDONLY | os.O_DIRECTORY) if run.is_dir() else None   # as a trainer does
def note(sig, frame):
    with out.open("a") as f:
        f.write(signal.Signals(sig).name + "\n")
    if sig == signal.SIGTERM and "--stay" not in sys.argv:
        sys.exit(0)
signal.signal(signal.SIGUSR1, note)
signal.signal(signal.SIGTERM, note)
out.write_text("ready\n")
while True:
    time.sleep(0.05)
"""


def _wait_ready(proc, log):
    deadline = time.monotonic() + 60
    while not (log.exists() and log.read_text().startswith("ready")):
        assert proc.poll() is None, "the stand-in exited"
        assert time.monotonic() < deadline, "child did not start"
        time.sleep(0.02)
    return proc


def start_child(run_dir, log, *extra, as_script=True):
    """The stand-in trainer (see CHILD); ``as_script=False`` runs it as ``python -c``."""
    if as_script:
        script = log.parent / "bin" / "andrea-train"
        script.parent.mkdir(exist_ok=True)
        script.write_text(CHILD)
        cmd = [sys.executable, str(script), str(run_dir), str(log), *extra]
    else:
        cmd = [sys.executable, "-c", CHILD, str(run_dir), str(log), *extra]
    return _wait_ready(subprocess.Popen(cmd), log)


def record_for(pid, **changes):
    """The record a trainer with this pid writes (start ticks and boot id included)."""
    p = psutil.Process(pid)
    start = process_start(p)
    fields = dict(pid=pid, create_time=start.create_time, host=socket.gethostname(), argv=p.cmdline(),
                  started=time.time(), start_ticks=start.start_ticks, boot_id=start.boot_id)
    fields.update(changes)
    return TrainerRecord(**fields)


def test_record_round_trip_and_removal_only_by_owner(tmp_path):
    rec = TrainerRecord.for_this_process(rank=0, world_size=2, launcher_pid=7,
                                         slurm=SlurmPlacement(job_id="12", node="n1"))
    write_trainer_record(tmp_path, rec)
    data = json.loads((tmp_path / ".trainer.json").read_text())
    data["from_another_writer"] = [1]
    (tmp_path / ".trainer.json").write_text(json.dumps(data))
    got, err = read_trainer_record(tmp_path)
    assert err is None and got.pid == os.getpid() and (got.rank, got.world_size, got.launcher_pid) == (0, 2, 7)
    assert got.slurm == SlurmPlacement(job_id="12", step_id="batch", node="n1")
    assert got.start_ticks == read_start_ticks(os.getpid()) and got.boot_id == read_boot_id() and got.boot_id
    assert got.extra == {"from_another_writer": [1]} and got.to_dict() == data
    assert not remove_trainer_record(tmp_path, pid=os.getpid() + 1)
    assert remove_trainer_record(tmp_path, pid=os.getpid())
    assert read_trainer_record(tmp_path) == (None, None)


@pytest.mark.parametrize("content, message", [
    (b"garbage", "not valid JSON"), (b"[]", "not a JSON object"),
    (b'{"pid": "12", "create_time": 1, "argv": []}', "pid '12' is not a positive integer"),
    (b'{"pid": 12, "create_time": "x", "argv": []}', "create_time 'x' is not a number"),
    (b'{"pid": 12, "create_time": 1, "argv": "a b"}', "argv is not a list of strings"),
])
def test_malformed_record_is_unreadable_never_signalled(tmp_path, content, message):
    (tmp_path / ".trainer.json").write_bytes(content)
    v = verify_trainer(tmp_path)
    assert v.state == "unreadable" and message in v.reason
    assert not signal_trainer(tmp_path, signal.SIGUSR1).ok


def test_lock_is_exclusive_and_names_the_holder(tmp_path):
    write_trainer_record(tmp_path, TrainerRecord.for_this_process())
    with RunLock(tmp_path):
        # flock locks are per open file description: a second acquisition conflicts,
        # which is what a second trainer process sees.
        with pytest.raises(RunLockedError, match=f"pid {os.getpid()}"):
            RunLock(tmp_path).acquire()
    with RunLock(tmp_path):
        pass


def test_lock_refuses_a_second_process(tmp_path):
    code = "import sys; from rundir import RunLock; RunLock(sys.argv[1]).acquire()"
    with RunLock(tmp_path):
        r = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True)
        assert r.returncode != 0 and "another trainer is training this run directory" in r.stderr
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True)
    assert r.returncode == 0


def test_verified_trainer_gets_the_signal(tmp_path):
    log = tmp_path / "signals.txt"
    proc = start_child(tmp_path, log)
    try:
        write_trainer_record(tmp_path, record_for(proc.pid))
        v = verify_trainer(tmp_path)
        assert v.state == "running", v.reason
        assert signal_trainer(tmp_path, signal.SIGUSR1).ok
        # Its note written before the next signal: a SIGTERM that came while the stand-in's
        # SIGUSR1 handler still wrote (a loaded machine) would run inside it and exit first.
        until(lambda: "SIGUSR1" in log.read_text(), "the signal")
        assert signal_trainer(tmp_path, signal.SIGTERM).ok
        assert proc.wait(timeout=60) == 0
        assert log.read_text().splitlines() == ["ready", "SIGUSR1", "SIGTERM"]
        v = verify_trainer(tmp_path)
        assert v.state == "stale" and "not running" in v.reason
    finally:
        proc.kill()
        proc.wait()


def test_a_stepped_clock_does_not_make_the_live_trainer_stale(tmp_path):
    """A clock step (NTP, a paused VM) moves every computed process start time: the record's
    create_time is 20 s off the one computed now, but its ticks since boot and boot id are
    the process's own. It is the live trainer and gets the signal."""
    log = tmp_path / "signals.txt"
    proc = start_child(tmp_path, log)
    try:
        rec = record_for(proc.pid)
        write_trainer_record(tmp_path, dataclasses.replace(rec, create_time=rec.create_time - 20.0))
        v = verify_trainer(tmp_path)
        assert v.state == "running", v.reason
        assert signal_trainer(tmp_path, signal.SIGUSR1).ok
        until(lambda: "SIGUSR1" in log.read_text(), "the signal")
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("change", ["ticks", "boot"])
def test_another_start_or_boot_is_a_reused_pid_whatever_create_time_says(tmp_path, change):
    """The pid is alive and create_time matches to the microsecond, but the ticks since boot
    (or the boot) are another process's: refused as reused, and nothing is signalled."""
    log = tmp_path / "signals.txt"
    proc = start_child(tmp_path, log)
    try:
        rec = record_for(proc.pid)
        rec = dataclasses.replace(rec, start_ticks=rec.start_ticks + 1) if change == "ticks" else \
            dataclasses.replace(rec, boot_id="00000000-0000-0000-0000-000000000000")
        write_trainer_record(tmp_path, rec)
        v = signal_trainer(tmp_path, signal.SIGUSR1 if change == "ticks" else signal.SIGTERM)
        if change == "ticks":
            assert v.state == "stale" and "reused" in v.reason, v
        else:       # another boot is another machine's (or this one's before a reboot): never probed here
            assert v.state == "remote" and v.elsewhere and "another boot" in v.reason, v
        time.sleep(0.3)
        assert log.read_text().splitlines() == ["ready"]
    finally:
        proc.kill()
        proc.wait()


def until(condition, what, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


@pytest.mark.parametrize("case", ["pid1", "own", "unrelated", "reused", "other-host", "no-host", "no-started"])
def test_spoofed_records_are_refused_and_nothing_is_signalled(tmp_path, case):
    log = tmp_path / "signals.txt"
    victim = start_child(tmp_path / "elsewhere", log)
    try:
        if case == "pid1":
            rec = record_for(1) if psutil.pid_exists(1) else TrainerRecord(1, 0.0, socket.gethostname(), ["init"], 0.0)
        elif case == "own":
            rec = record_for(os.getpid(), argv=["andrea-train", str(tmp_path)])
        elif case == "unrelated":      # alive, right create_time, but its argv names another directory
            rec = record_for(victim.pid)
        elif case == "reused":         # right pid and argv, but another start time (a record without ticks)
            rec = record_for(victim.pid, argv=["andrea-train", str(tmp_path)])
            rec = TrainerRecord(rec.pid, rec.create_time - 100, rec.host, rec.argv, rec.started)
        elif case == "other-host":
            rec = record_for(victim.pid, host="not-" + socket.gethostname())
        else:                          # a record missing a key is not verified (it used to skip a check)
            rec = record_for(victim.pid)
        write_trainer_record(tmp_path, rec)
        if case.startswith("no-"):
            data = json.loads((tmp_path / ".trainer.json").read_text())
            del data[case[3:]]
            (tmp_path / ".trainer.json").write_text(json.dumps(data))
        v = signal_trainer(tmp_path, signal.SIGTERM)
        assert not v.ok and v.state in (("remote",) if case == "other-host"
                                        else ("unverified", "stale", "unreadable")), v
        if case.startswith("no-"):
            assert f"no '{case[3:]}'" in v.reason
        time.sleep(0.3)
        assert victim.poll() is None and log.read_text().splitlines() == ["ready"]
    finally:
        victim.kill()
        victim.wait()


def test_nothing_recorded_means_stopped(tmp_path):
    v = verify_trainer(tmp_path)
    assert v.state == "stopped" and not v.ok


def _refused_and_untouched(run_dir, victim, log):
    for sig in (signal.SIGUSR1, signal.SIGTERM):
        v = signal_trainer(run_dir, sig)
        assert not v.ok and v.state == "unverified", v
    time.sleep(0.3)
    assert victim.poll() is None
    if log is not None:
        assert log.read_text().splitlines() == ["ready"]
    return v


def test_a_record_naming_a_process_that_is_not_the_trainer_is_refused(tmp_path):
    """What a forged record would point at: a trainer-looking script that holds the run
    directory open and traps signals but holds no lock. (A process that holds both is the
    run's trainer, whatever its program: a loop of the run API, ``rundir.open_run``.)"""
    run, log = tmp_path / "run", tmp_path / "signals.txt"
    run.mkdir()
    (run / ".lock").touch()
    victim = start_child(run, log, "--no-lock", as_script=True)
    try:
        write_trainer_record(run, record_for(victim.pid))
        v = _refused_and_untouched(run, victim, log)
        assert "does not hold the run directory's .lock" in v.reason
    finally:
        victim.kill()
        victim.wait()


@pytest.mark.parametrize("who", ["tail", "shell", "console"])
def test_bystanders_naming_the_run_directory_are_refused(tmp_path, who):
    """Processes whose command line mentions the run directory: tail -f, the shell that runs
    the console, another andrea-console open on the run (waiting for a checkpoint from the
    real trainer, a stand-in here). None holds the lock."""
    run, log = tmp_path / "run", tmp_path / "signals.txt"
    trainer = start_child(run, log)                  # holds the lock, as the run's trainer does
    write_trainer_record(run, record_for(trainer.pid))
    cmd = {"tail": ["tail", "-f", "/dev/null", str(run)],
           "shell": ["sh", "-c", f"sleep 600 # {run}", str(run)],
           "console": [sys.executable, "-m", "console", str(run), "--checkpoint", "--timeout", "600"]}[who]
    victim = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while psutil.Process(victim.pid).cmdline() != cmd:
            assert time.monotonic() < deadline, "the victim never ran its command"
            time.sleep(0.02)         # until exec has replaced the forked child
        if who == "console":         # it has signalled the trainer and waits for a checkpoint
            while "SIGUSR1" not in log.read_text():
                assert time.monotonic() < deadline, "the console never signalled the trainer"
                time.sleep(0.02)
        rec = record_for(victim.pid, argv=["andrea-train", str(run)])
        write_trainer_record(run, rec)
        v = _refused_and_untouched(run, victim, None)
        assert "is not a trainer" in v.reason or "does not hold" in v.reason, v.reason
    finally:
        for proc in (victim, trainer):
            proc.kill()
            proc.wait()


def test_a_waiter_for_the_lock_does_not_hold_it(tmp_path):
    """A process blocked in flock() shows in the kernel's lock table as a waiter (->)."""
    run, log = tmp_path / "run", tmp_path / "signals.txt"
    holder = start_child(run, log)
    waiter_code = ("import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDWR); "
                   "print('waiting', flush=True); fcntl.flock(fd, fcntl.LOCK_EX)")
    script = tmp_path / "bin2" / "andrea-train"
    script.parent.mkdir()
    script.write_text(waiter_code)
    waiter = subprocess.Popen([sys.executable, str(script), str(run / ".lock"), str(run)], stdout=subprocess.PIPE)
    try:
        assert waiter.stdout.readline().strip() == b"waiting"
        write_trainer_record(run, record_for(waiter.pid))
        v = verify_trainer(run)
        assert v.state == "unverified" and "does not hold" in v.reason, v
        write_trainer_record(run, record_for(holder.pid))
        assert verify_trainer(run).ok
    finally:
        for proc in (waiter, holder):
            proc.kill()
            proc.wait()


def _verify_as(uid: int, run_dir) -> tuple[str, str]:
    """``verify_trainer`` by a real console of another user."""
    import pwd  # noqa: F401  (imported before the fork)

    import rundir.slurm  # noqa: F401

    v = run_as(uid, lambda: (lambda v: [v.state, v.reason])(verify_trainer(run_dir)))
    return v[0], v[1]


@pytest.mark.skipif(os.getuid() != 0, reason="starting a process of another user needs root")
def test_a_trainer_of_another_user_is_refused_unless_the_console_is_root():
    """A console verifies only its own user's trainer; root may operate anyone's and says so."""
    import shutil
    import tempfile

    shared = Path(tempfile.mkdtemp(prefix="andrea-uid-"))
    try:
        shared.chmod(0o777)
        run, log = shared / "run", shared / "signals.txt"
        run.mkdir()
        run.chmod(0o777)
        script = shared / "andrea-train"
        script.write_text(CHILD)
        script.chmod(0o755)
        # The system interpreter: the test's own may live where that user cannot enter.
        victim = subprocess.Popen(["/usr/bin/python3", str(script), str(run), str(log)], user=NOBODY, group=NOBODY)
        try:
            _wait_ready(victim, log)
            write_trainer_record(run, record_for(victim.pid))
            (run / ".trainer.json").chmod(0o644)
            v = verify_trainer(run)
            assert v.ok and "this console runs as root" in v.reason and "uid 65534" in v.reason, v.reason
            assert _verify_as(NOBODY, run)[0] == "running"
            state, reason = _verify_as(NOBODY - 1, run)
            assert state == "unverified" and "uid 65534" in reason and "not to you" in reason, reason
        finally:
            victim.kill()
            victim.wait()
    finally:
        shutil.rmtree(shared, ignore_errors=True)
