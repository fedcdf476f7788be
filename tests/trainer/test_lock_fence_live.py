"""The lock file's fence (rundir/fence.py), with real processes on the NFS-like test filesystem
(flock refused) and a server that stalls one holder's heartbeat: a holder whose heartbeat was
last confirmed longer ago than the bound writes nothing more, before another host may take the
lock over; its stalled heartbeat, landing late, never overwrites the new holder's lock file.
The other hosts are UTS namespaces of this one (``unshare -u``: another host name)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rundir import RunConfig
from rundir.atomic import atomic_write_json
from rundir.config import dump_run_config
from rundir.fence import LockLostError
from rundir.history import read_history_tail
from rundir.layout import LOCK_OWNER_FILE, RUN_TOML
from rundir.run_lock import RunLock, read_lock_owner
from tests.console.trainer_proc import ROOT, train_command
from trainer.cli import EXIT_LOCK_LOST

CEILING = 60.0
BOUND = 4.0                    # run.lock_stale_after of the trainers here

_TAKER = """
import sys, time
from rundir.run_lock import RunLock, RunLockedError
lock, deadline = RunLock(sys.argv[1], stale_after=float(sys.argv[2])), time.monotonic() + 60
while True:
    try:
        lock.acquire()
        break
    except RunLockedError:
        assert time.monotonic() < deadline, "never took the lock over"
        time.sleep(0.1)
print("taken", flush=True)
sys.stdin.read()
lock.release()
"""


def on_host(host: str, argv: list[str]) -> list[str]:
    """``argv`` run as on another host: a UTS namespace of its own, named ``host``."""
    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("another host name needs unshare(1) run as root")
    return ["unshare", "-u", "sh", "-c", f'hostname {host} && exec "$@"', "sh", *argv]


def test_a_holder_stalled_past_the_bound_writes_nothing_and_its_late_heartbeat_lands_aside(mount_netfs, tmp_path):
    control = tmp_path / "stall"
    control.write_text("")
    backing, mount = mount_netfs(refuse_flock=True, attr_timeout=1.0, stall_control=control)
    _, other = mount_netfs(backing, refuse_flock=True, attr_timeout=1.0)     # another host's client
    lost: list[str] = []
    lock = RunLock(mount, stale_after=1.0, on_lost=lost.append)
    lock.acquire()
    taker = None
    try:
        atomic_write_json(mount / "before.json", {"ok": True})
        control.write_text(f"{os.getpid()} {LOCK_OWNER_FILE}\n")       # the heartbeat's writes stall from now
        stalled, written = time.monotonic(), 0
        with pytest.raises(LockLostError):
            while time.monotonic() - stalled < CEILING:
                atomic_write_json(mount / "during.json", {"n": written})
                written += 1
                time.sleep(0.05)
        assert time.monotonic() - stalled <= 1.0 + 0.25 + 2.0, "the fence came late"       # the bound, a beat
        assert len(lost) == 1 and "past run.lock_stale_after = 1 s" in lost[0] and lock.lost == lost[0]
        with pytest.raises(LockLostError):
            atomic_write_json(mount / "later.json", {})
        assert not (mount / "later.json").exists()

        taker = subprocess.Popen(on_host("node-b", [sys.executable, "-c", _TAKER, str(other), "1.0"]), cwd=ROOT,
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                 env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert taker.stdout.readline().strip() == "taken"
        assert read_lock_owner(mount)[0].host == "node-b"
        control.write_text("")                                        # the stalled heartbeat lands now
        time.sleep(1.0)
        owner = read_lock_owner(mount)[0]
        assert owner is not None and owner.host == "node-b" and owner.pid == taker.pid
    finally:
        control.write_text("")
        lock.release()
        if taker is not None:
            taker.stdin.close()
            taker.wait(CEILING)


def _rewinds_after(events_and_steps: list[tuple[str, int | None]], start: int) -> int:
    """Steps that go back after ``start`` (a trainer's resume line): two writers interleaving."""
    last, rewinds = None, 0
    for kind, step in events_and_steps[start:]:
        if kind == "step":
            if last is not None and step <= last:
                rewinds += 1
            last = step
    return rewinds


def _lines(run: Path) -> list[tuple[str, int | None, int | None]]:
    """Each history line: its event (``step`` for a step line), step and pid (start, resume)."""
    out = []
    try:
        data = (run / ".loss.json").read_bytes()
    except FileNotFoundError:
        return []
    for raw in data.splitlines():
        try:
            rec = json.loads(raw)
        except ValueError:
            continue
        out.append((rec.get("event", "step"), rec.get("step"), rec.get("pid")))
    return out


@pytest.mark.parametrize("trial", [1, 2])
def test_two_trainers_on_two_hosts_a_stalled_heartbeat_never_makes_two_writers(mount_netfs, tmp_path, trial):
    control = tmp_path / "stall"
    control.write_text("")
    backing, mount = mount_netfs(refuse_flock=True, attr_timeout=1.0, stall_control=control)
    _, other = mount_netfs(backing, refuse_flock=True, attr_timeout=1.0)     # B's host's client
    run = mount / "run"
    run.mkdir()
    text = dump_run_config(RunConfig.from_preset("micro", checkpoint_every=150))
    (run / RUN_TOML).write_text(text.replace("lock_stale_after = 120.0\n", f"lock_stale_after = {BOUND}\n"))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    argv, argv_b = (train_command(where / "run", "--checkpoint-every", "150") for where in (mount, other))
    a_out, b_out = open(tmp_path / "a.out", "wb"), open(tmp_path / "b.out", "wb")
    a = subprocess.Popen(on_host("node-a", argv), cwd=ROOT, env=env, stdout=a_out, stderr=subprocess.STDOUT)
    b = None
    try:
        deadline = time.monotonic() + CEILING
        while not any(kind == "checkpoint" for kind, _, _ in _lines(run)):
            assert a.poll() is None and time.monotonic() < deadline, (tmp_path / "a.out").read_text()
            time.sleep(0.1)
        control.write_text(f"{a.pid} {LOCK_OWNER_FILE}\n")            # A's heartbeat stalls; its loop trains on
        stalled = time.monotonic()
        # A fences itself: one line, then its exit (which completes once its stalled write is
        # answered: a thread inside a FUSE request that was sent cannot be killed before).
        while "writing nothing more" not in (said := (tmp_path / "a.out").read_text()):
            assert time.monotonic() - stalled < CEILING, said
            time.sleep(0.1)
        assert time.monotonic() - stalled <= BOUND + 10, "A wrote on long past the bound"
        assert f"past run.lock_stale_after = {BOUND:g} s" in said, said
        a_lines = len(_lines(run))
        while True:                           # B starts, and is refused until A's heartbeat is past bound + margin
            b = subprocess.Popen(on_host("node-b", argv_b), cwd=ROOT, env=env, stdout=b_out, stderr=subprocess.STDOUT)
            try:
                if b.wait(5) != 2:
                    break
            except subprocess.TimeoutExpired:
                break                         # it trains
            assert time.monotonic() - stalled < CEILING, (tmp_path / "b.out").read_text()
            time.sleep(0.5)
        deadline = time.monotonic() + CEILING
        while sum(1 for kind, _, _ in _lines(run)[a_lines:] if kind == "step") < 200:
            assert b.poll() is None and time.monotonic() < deadline, (tmp_path / "b.out").read_text()
            time.sleep(0.1)
        control.write_text("")                # A's stalled heartbeat lands now, and A's exit completes
        assert a.wait(CEILING) == EXIT_LOCK_LOST, (tmp_path / "a.out").read_text()
        time.sleep(1.0)
        owner = read_lock_owner(run)[0]
        assert owner is not None and owner.host == "node-b" and owner.pid == b.pid and b.poll() is None
        lines = _lines(run)
        assert len(lines) > a_lines and lines[a_lines][0] == "resume" and lines[a_lines][2] == b.pid, lines[a_lines]
        assert _rewinds_after([(k, s) for k, s, _ in lines], a_lines + 1) == 0, "two writers interleaved"
        b.terminate()
        assert b.wait(CEILING) == 0, (tmp_path / "b.out").read_text()
        steps = read_history_tail(run / ".loss.json").step
        assert len(steps) > 0
    finally:
        control.write_text("")
        for proc in (a, b):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
        a_out.close()
        b_out.close()


_LOOP = """
import sys, time
import rundir
run = rundir.open_run(sys.argv[1])
print("open", flush=True)
step = 0
try:
    while True:
        step += 1
        run.log(step, loss=1.0 / step)
        time.sleep(0.01)
except Exception as err:
    print(f"refused: {type(err).__name__}: {err}", flush=True)
    sys.exit(3)
"""


@pytest.mark.parametrize("trial", [1, 2])
def test_a_run_api_holder_stopped_past_a_takeover_writes_nothing_when_continued(mount_netfs, tmp_path, trial):
    """SIGSTOP: its heartbeat and its loop both frozen. Another host takes the lock over; on
    SIGCONT the loop's next line is refused (its last confirmed heartbeat is past the bound),
    before the heartbeat could look: the history does not grow by a byte."""
    import signal

    backing, mount = mount_netfs(refuse_flock=True, attr_timeout=1.0)
    _, other = mount_netfs(backing, refuse_flock=True, attr_timeout=1.0)
    run = mount / "run"
    run.mkdir()
    (run / RUN_TOML).write_text('[run]\nname = "run"\npreset = "custom"\nlock_stale_after = 2.0\n\n[config]\n')
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    a = subprocess.Popen(on_host("node-a", [sys.executable, "-c", _LOOP, str(run)]), cwd=ROOT, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    taker = None
    try:
        assert a.stdout.readline().strip() == "open"
        deadline = time.monotonic() + CEILING
        while len(read_history_tail(run / ".loss.json").step) < 20:
            assert a.poll() is None and time.monotonic() < deadline, a.stdout.read()
            time.sleep(0.05)
        os.kill(a.pid, signal.SIGSTOP)
        taker = subprocess.Popen(on_host("node-b", [sys.executable, "-c", _TAKER, str(other / "run"), "2.0"]),
                                 cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert taker.stdout.readline().strip() == "taken"
        size = (run / ".loss.json").stat().st_size
        os.kill(a.pid, signal.SIGCONT)
        assert a.wait(CEILING) == 3
        said = a.stdout.read()
        assert "LockLostError" in said or "another trainer took this run over" in said, said
        assert (run / ".loss.json").stat().st_size == size, "the stopped holder wrote after the takeover"
        owner = read_lock_owner(run)[0]
        assert owner is not None and owner.host == "node-b"
    finally:
        if a.poll() is None:
            os.kill(a.pid, signal.SIGCONT)
            a.kill()
            a.wait()
        if taker is not None:
            taker.stdin.close()
            taker.wait(CEILING)
