"""The run's lock where flock(2) is refused: a lock file with a heartbeat, on the NFS-like
test filesystem (tests/netfs.py, flock refused with ENOLCK), and its stale takeover rules."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from rundir import ConfigError, RunConfig, RunLock, RunLockedError, load_run_config
from rundir.config import dump_run_config
from rundir.layout import LOCK_OWNER_FILE, LOCK_TAKEOVER_FILE, RUN_TOML
from rundir.run_lock import LockFileError, LockOwner, blocking_lock_file, live_lock_owner, read_lock_owner
from rundir.trainer_record import read_boot_id

CEILING = 15.0


def _owner(**changes) -> LockOwner:
    now = time.time()
    fields = dict(host=socket.gethostname(), boot_id=read_boot_id(), pid=os.getpid(), start_ticks=None,
                  create_time=0.0, token="f" * 32, heartbeat=now, acquired=now)
    fields.update(changes)
    return LockOwner(**fields)


def _leave(run_dir, owner: LockOwner, age: float = 0.0) -> None:
    """A lock file as a holder left it, last touched ``age`` seconds ago."""
    path = run_dir / LOCK_OWNER_FILE
    path.write_text(json.dumps(owner.to_dict()))
    if age:
        then = time.time() - age
        os.utime(path, (then, then))


def _run_toml(run_dir, stale_after: str) -> None:
    """A whole run.toml (the micro preset's) with ``run.lock_stale_after = stale_after``."""
    text = dump_run_config(RunConfig.from_preset("micro"))
    assert "lock_stale_after = 120.0\n" in text
    (run_dir / RUN_TOML).write_text(text.replace("lock_stale_after = 120.0\n", f"lock_stale_after = {stale_after}\n"))


def _gone_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_where_flock_is_refused_the_lock_is_a_file_with_a_heartbeat(netfs):
    _, mount = netfs
    lock = RunLock(mount, stale_after=1.0)
    lock.acquire()
    try:
        assert lock.mode == "file"
        owner, _ = read_lock_owner(mount)
        assert owner is not None and owner.pid == os.getpid() and owner.host == socket.gethostname()
        first = owner.heartbeat
        deadline = time.monotonic() + CEILING
        while read_lock_owner(mount)[0].heartbeat == first:         # refreshed every quarter of the bound
            assert time.monotonic() < deadline, "no heartbeat"
            time.sleep(0.05)
        with pytest.raises(RunLockedError) as refused:               # this process is alive here: held
            RunLock(mount, stale_after=1.0).acquire()
        assert f"pid {os.getpid()} on {socket.gethostname()}" in str(refused.value)
        assert "\n" not in str(refused.value)
    finally:
        lock.release()
    assert not (mount / LOCK_OWNER_FILE).exists() and lock.mode is None


def test_a_lock_file_of_a_process_gone_from_this_host_is_taken_over(netfs):
    _, mount = netfs
    _leave(mount, _owner(pid=_gone_pid(), start_ticks=1))
    with RunLock(mount, stale_after=3600.0) as lock:
        assert lock.mode == "file"
        assert read_lock_owner(mount)[0].pid == os.getpid()
    assert not (mount / LOCK_TAKEOVER_FILE).exists()


def test_another_hosts_lock_file_is_held_while_its_heartbeat_is_fresh(netfs):
    _, mount = netfs
    _leave(mount, _owner(host="gpu-node-7", boot_id="another-boot", pid=4242), age=5.0)
    with pytest.raises(RunLockedError) as refused:
        RunLock(mount, stale_after=60.0).acquire()
    assert "pid 4242 on gpu-node-7" in str(refused.value) and "\n" not in str(refused.value)
    assert read_lock_owner(mount)[0].pid == 4242 and live_lock_owner(mount).pid == 4242


def test_another_hosts_lock_file_is_taken_over_once_its_heartbeat_is_older_than_the_bound_and_a_margin(netfs):
    _, mount = netfs
    old = time.time() - 160
    _leave(mount, _owner(host="gpu-node-7", boot_id="another-boot", pid=4242, heartbeat=old), age=160.0)
    assert live_lock_owner(mount) is None             # the default bound from no run.toml is 120 s, plus 30 s
    with RunLock(mount, stale_after=60.0) as lock:
        assert lock.mode == "file" and read_lock_owner(mount)[0].pid == os.getpid()


def test_a_takeover_under_way_is_not_raced(netfs):
    _, mount = netfs
    _leave(mount, _owner(host="gpu-node-7", boot_id="another-boot", pid=4242, heartbeat=0.0), age=3600.0)
    (mount / LOCK_TAKEOVER_FILE).write_text(json.dumps(_owner(host="login-2", pid=99).to_dict()))
    with pytest.raises(RunLockedError, match="taking over"):
        RunLock(mount, stale_after=60.0).acquire()
    assert read_lock_owner(mount)[0].pid == 4242


def test_a_holder_whose_lock_file_was_taken_is_told(netfs):
    _, mount = netfs
    lost = []
    lock = RunLock(mount, stale_after=1.0, on_lost=lost.append)
    lock.acquire()
    try:
        _leave(mount, _owner(host="gpu-node-7", pid=4242, token="e" * 32))
        deadline = time.monotonic() + CEILING
        while not lost:
            assert time.monotonic() < deadline, "the loss was not noticed"
            time.sleep(0.05)
        assert lock.lost == lost[0] and "pid 4242 on gpu-node-7" in lost[0]
    finally:
        lock.release()
    assert read_lock_owner(mount)[0].pid == 4242          # another holder's file is never removed


def test_a_trainer_whose_flock_works_respects_a_live_lock_file(tmp_path):
    _leave(tmp_path, _owner(host="gpu-node-7", boot_id="another-boot", pid=4242))
    with pytest.raises(RunLockedError, match="pid 4242 on gpu-node-7"):
        RunLock(tmp_path, stale_after=60.0).acquire()
    _leave(tmp_path, _owner(host="gpu-node-7", boot_id="another-boot", pid=4242, heartbeat=0.0), age=3600.0)
    with RunLock(tmp_path, stale_after=60.0) as lock:
        assert lock.mode == "flock"


@pytest.mark.parametrize("value", ["0.5", "-3", "1e9", "\"soon\"", "true", "nan"])
def test_a_bad_stale_bound_in_run_toml_is_refused_naming_the_key(netfs, value):
    _, mount = netfs
    _run_toml(mount, value)
    with pytest.raises(ConfigError, match="run.lock_stale_after"):
        load_run_config(mount)
    with pytest.raises(ConfigError, match="run.lock_stale_after"):
        RunLock(mount).acquire()
    assert not (mount / LOCK_OWNER_FILE).exists()


def test_the_stale_bound_comes_from_run_toml(netfs):
    _, mount = netfs
    _run_toml(mount, "30")
    with RunLock(mount) as lock:
        assert lock.mode == "file" and lock.stale_after == 30


def test_an_empty_lock_file_is_held_while_new_and_stale_once_old(netfs):
    """A starter that died between the create and the write leaves an empty file: no holder
    named, so only its age speaks."""
    _, mount = netfs
    (mount / LOCK_OWNER_FILE).write_bytes(b"")
    with pytest.raises(RunLockedError, match="naming no holder"):
        RunLock(mount, stale_after=60.0).acquire()
    old = time.time() - 3600
    os.utime(mount / LOCK_OWNER_FILE, (old, old))
    with RunLock(mount, stale_after=60.0) as lock:
        assert lock.mode == "file" and read_lock_owner(mount)[0].pid == os.getpid()


def test_the_heartbeat_follows_a_run_directory_moved_under_its_holder(netfs):
    _, mount = netfs
    (mount / "run").mkdir()
    lock = RunLock(mount / "run", stale_after=1.0)
    lock.acquire()
    try:
        os.rename(mount / "run", mount / "run-moved")
        first = read_lock_owner(mount / "run-moved")[0].heartbeat
        deadline = time.monotonic() + CEILING
        while read_lock_owner(mount / "run-moved")[0].heartbeat == first:
            assert time.monotonic() < deadline, "no heartbeat in the moved directory"
            time.sleep(0.05)
        assert lock.lost is None
    finally:
        lock.release()
    assert not (mount / "run-moved" / LOCK_OWNER_FILE).exists()


def test_a_lock_file_that_cannot_be_read_for_a_moment_is_not_a_lost_lock(netfs):
    """A read that fails (a soft mount's EIO, a copy caught half-written) is no proof that
    another trainer holds the lock: the heartbeat looks again and rewrites its own record."""
    _, mount = netfs
    lost = []
    lock = RunLock(mount, stale_after=1.0, on_lost=lost.append)
    lock.acquire()
    try:
        (mount / LOCK_OWNER_FILE).write_bytes(b'{"host": "half-writt')
        deadline = time.monotonic() + CEILING
        while (owner := read_lock_owner(mount)[0]) is None or owner.pid != os.getpid():
            assert time.monotonic() < deadline, "the heartbeat did not write its record again"
            time.sleep(0.05)
        assert lost == [] and lock.lost is None
    finally:
        lock.release()


@pytest.mark.parametrize("name, what", [(LOCK_TAKEOVER_FILE, "directory"), (LOCK_TAKEOVER_FILE, "dangling symlink"),
                                        (LOCK_OWNER_FILE, "dangling symlink"), (LOCK_OWNER_FILE, "directory")])
def test_where_flock_is_refused_a_lock_name_held_by_no_file_refuses_in_one_line(netfs, name, what):
    """Beside a stale lock file of another host: the takeover hit a directory at the takeover
    file with IsADirectoryError, a dangling symbolic link there was "another trainer is taking
    over" forever, and one at the lock file was "keeps changing" forever. Now the run API is
    refused at once, naming the file and what to do."""
    import rundir

    _, mount = netfs
    run = mount / "run"
    run.mkdir()
    if name != LOCK_OWNER_FILE:
        _leave(run, _owner(host="gpu-node-7", boot_id="another-boot", pid=4242, heartbeat=0.0), age=3600.0)
    path = run / name
    if what == "directory":
        path.mkdir()
        os.utime(path, (0.0, 0.0))          # as old as the stale lock: its age is no excuse to wait
    else:
        path.symlink_to("gone")
    with pytest.raises(rundir.RunError) as refused:
        rundir.open_run(run, config={"lr": 0.1})
    text = str(refused.value)
    assert "\n" not in text and f"{path} is a {what.split()[-1].replace('symlink', 'symbolic link')}" in text, text
    assert text.endswith("remove it") and "another trainer" not in text, text
    path.rmdir() if what == "directory" else path.unlink()
    with rundir.open_run(run, config={"lr": 0.1}) as api_run:      # the stale lock is taken over
        assert read_lock_owner(run)[0].pid == os.getpid()
        api_run.log(0, loss=1.0)


def test_a_heartbeat_ahead_of_this_clock_by_more_than_the_margin_is_named_not_held(netfs):
    _, mount = netfs
    ahead = time.time() + 40.0                # the margin of a 60 s bound is 15 s
    _leave(mount, _owner(host="gpu-node-7", boot_id="another-boot", pid=4242, heartbeat=ahead))
    with pytest.raises(LockFileError) as refused:
        RunLock(mount, stale_after=60.0).acquire()
    text = str(refused.value)
    assert text.startswith(f"{mount / LOCK_OWNER_FILE}: pid 4242 on gpu-node-7: its heartbeat is dated 4") and \
        "more than the 15 s the hosts' clocks may differ by" in text and "another trainer" not in text, text
    assert live_lock_owner(mount) is None and blocking_lock_file(mount, 60.0) == text
    assert blocking_lock_file(mount, 200.0) is None          # within a 200 s bound's 50 s margin: a holder
    with pytest.raises(RunLockedError, match="another trainer is training"):
        RunLock(mount, stale_after=200.0).acquire()
