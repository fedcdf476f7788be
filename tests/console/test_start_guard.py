"""``--start`` launches nothing it should not: not a second trainer beside one holding the
run's lock, and not an untrusted run.toml's launch command without a yes."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rundir import RunConfig, write_run_config
from tests.rundir.test_process import start_child
from tests.rundirs import make_run

ROOT = Path(__file__).resolve().parents[2]


def start_on_a_terminal(run: Path, *extra: str) -> subprocess.Popen:
    """``andrea-console RUN --start`` with a terminal for its dashboard (a pty) and no terminal
    to answer a question on (stdin is /dev/null)."""
    leader, follower = pty.openpty()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TERM": "xterm-256color"}
    proc = subprocess.Popen([sys.executable, "-m", "console", str(run), "--start", *extra], stdin=subprocess.DEVNULL,
                            stdout=follower, stderr=subprocess.PIPE, cwd=ROOT, env=env, text=True)
    os.close(follower)
    proc.pty_leader = leader          # kept open (and drained by nobody: the tests end it quickly)
    return proc


def finish(proc: subprocess.Popen, timeout: float = 60) -> tuple[int, str]:
    try:
        _, err = proc.communicate(timeout=timeout)
    finally:
        os.close(proc.pty_leader)
    return proc.returncode, err


def test_start_beside_a_trainer_holding_the_lock_launches_nothing(tmp_path):
    """The lock's holder has no verified record (as after a clock step used to look): --start
    says so in one line and launches nothing, instead of a second trainer the lock refuses."""
    run = make_run(tmp_path / "run")
    holder = start_child(run, tmp_path / "signals.txt")
    try:
        code, err = finish(start_on_a_terminal(run))
        assert code == 1, err
        assert err == f"andrea-console: a trainer (pid {holder.pid}) holds {run / '.lock'}: not starting a second one\n"
        assert "--start" not in (run / "trainer.log").read_text(errors="replace") if (run / "trainer.log").exists() \
            else True
    finally:
        holder.kill()
        holder.wait()


def _untrusted_launch_run(tmp_path: Path, how: str) -> tuple[Path, Path]:
    run = make_run(tmp_path / "run")
    marker = tmp_path / "launched"
    config = RunConfig.from_preset("micro")
    config.run.launch = ["sh", "-c", f"touch {marker}"]
    write_run_config(run, config)
    if how == "world-writable":
        (run / "run.toml").chmod(0o666)
    else:
        os.chown(run / "run.toml", 65534, 65534)
    return run, marker


HOW = ["world-writable", pytest.param("another-user", marks=pytest.mark.skipif(
    os.getuid() != 0, reason="giving run.toml to another user needs root"))]


@pytest.mark.parametrize("how", HOW)
def test_an_untrusted_launch_command_is_shown_and_not_run_without_a_yes(tmp_path, how):
    run, marker = _untrusted_launch_run(tmp_path, how)
    code, err = finish(start_on_a_terminal(run))
    assert code == 1, err
    assert f"touch {marker}" in err and "was not confirmed" in err and "pass --yes" in err
    assert ("may be written by anyone" if how == "world-writable" else "belongs to uid 65534") in err
    assert not marker.exists()


def test_yes_runs_the_untrusted_launch_command(tmp_path):
    run, marker = _untrusted_launch_run(tmp_path, "world-writable")
    proc = start_on_a_terminal(run, "--yes")
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert proc.poll() is None, proc.stderr.read()
            assert time.monotonic() < deadline, "the launch command never ran"
            time.sleep(0.05)
    finally:
        proc.terminate()
        finish(proc)
