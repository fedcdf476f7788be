""".trainer.json, .lock and verification before any signal: real processes, real signals."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import psutil
import pytest

from rundir import (RunLock, RunLockedError, TrainerRecord, read_trainer_record,
                            remove_trainer_record, signal_trainer, verify_trainer, write_trainer_record)

# A stand-in trainer: it names the run directory in its argv, reports every SIGUSR1/SIGTERM
# it receives into a file, and exits on SIGTERM.
CHILD = r"""
import signal, sys, time, pathlib
out = pathlib.Path(sys.argv[2])
def note(sig, frame):
    with out.open("a") as f:
        f.write(signal.Signals(sig).name + "\n")
    if sig == signal.SIGTERM:
        sys.exit(0)
signal.signal(signal.SIGUSR1, note)
signal.signal(signal.SIGTERM, note)
out.write_text("ready\n")
while True:
    time.sleep(0.05)
"""


def start_child(run_dir, log):
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(run_dir), str(log)])
    deadline = time.monotonic() + 20
    while not (log.exists() and log.read_text().startswith("ready")):
        assert time.monotonic() < deadline, "child did not start"
        time.sleep(0.02)
    return proc


def record_for(pid, **changes):
    p = psutil.Process(pid)
    fields = dict(pid=pid, create_time=p.create_time(), host=socket.gethostname(), argv=p.cmdline(),
                  started=time.time())
    fields.update(changes)
    return TrainerRecord(**fields)


def test_record_round_trip_and_removal_only_by_owner(tmp_path):
    rec = TrainerRecord.for_this_process(rank=0)
    write_trainer_record(tmp_path, rec)
    got, err = read_trainer_record(tmp_path)
    assert err is None and got.pid == os.getpid() and got.extra == {"rank": 0}
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
        assert signal_trainer(tmp_path, signal.SIGTERM).ok
        assert proc.wait(timeout=20) == 0
        assert log.read_text().splitlines() == ["ready", "SIGUSR1", "SIGTERM"]
        v = verify_trainer(tmp_path)
        assert v.state == "stale" and "not running" in v.reason
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("case", ["pid1", "own", "unrelated", "reused", "other-host"])
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
        elif case == "reused":         # right pid and argv, but another start time
            rec = record_for(victim.pid, argv=["andrea-train", str(tmp_path)])
            rec = TrainerRecord(rec.pid, rec.create_time - 100, rec.host, rec.argv, rec.started)
        else:
            rec = record_for(victim.pid, host="not-" + socket.gethostname())
        write_trainer_record(tmp_path, rec)
        v = signal_trainer(tmp_path, signal.SIGTERM)
        assert not v.ok and v.state in ("unverified", "stale"), v
        time.sleep(0.3)
        assert victim.poll() is None and log.read_text().splitlines() == ["ready"]
    finally:
        victim.kill()
        victim.wait()


def test_nothing_recorded_means_stopped(tmp_path):
    v = verify_trainer(tmp_path)
    assert v.state == "stopped" and not v.ok
