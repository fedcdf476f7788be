"""The run API on a full disk: open_run is one RunError line and leaves none of its files
behind (a real tmpfs, filled); finish() is one RunError line, and the exit hook one line on
stderr, each with the run let go and no cut line left in the history or trainer.log (a real
short write: RLIMIT_FSIZE with SIGXFSZ ignored, in a child)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rundir import RunError, open_run
from rundir.layout import LOSS_JSON, TRAINER_JSON, TRAINER_LOG
from tests.mounts import fill, mount_tmpfs

ROOT = Path(__file__).resolve().parents[2]


def test_open_run_on_a_full_disk_is_one_line_and_leaves_nothing(tmp_path):
    disk = tmp_path / "disk"
    if not mount_tmpfs(disk, "256k"):
        pytest.skip("cannot mount a tmpfs here (not root, or no mount permission)")
    try:
        fill(disk)
        with pytest.raises(RunError) as err:
            open_run(disk / "run", config={"lr": 1e-3})
        said = str(err.value)
        assert "\n" not in said and said == (f"open_run: cannot start the run in {disk / 'run'}: writing run.toml: "
                                             "No space left on device")
        assert sorted(p.name for p in (disk / "run").iterdir()) == [".lock"]     # the lock file only, empty
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)


def test_open_run_without_an_inode_for_its_lock_is_one_line(tmp_path):
    disk = tmp_path / "disk"
    if not mount_tmpfs(disk, "256k,nr_inodes=8"):
        pytest.skip("cannot mount a tmpfs here (not root, or no mount permission)")
    try:
        (disk / "run").mkdir()
        for i in range(100):                    # every inode taken
            try:
                (disk / f"f{i}").touch()
            except OSError:
                break
        with pytest.raises(RunError) as err:
            open_run(disk / "run", config={"lr": 1e-3})
        assert str(err.value) == f"open_run: cannot take the lock of {disk / 'run'}: No space left on device"
        assert list((disk / "run").iterdir()) == []
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)


CHILD = r'''
import os, resource, signal, sys
import rundir
run_dir, how = sys.argv[1], sys.argv[2]
run = rundir.open_run(run_dir, config={"lr": 1e-3})
for step in range(1, 40):
    run.log(step, loss=1.0 / step)
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
# Room for 20 bytes more of trainer.log; none for the history (larger): the stop is not written.
resource.setrlimit(resource.RLIMIT_FSIZE, (os.path.getsize(os.path.join(run_dir, "trainer.log")) + 20, hard))
if how == "finish":
    try:
        run.finish()
    except rundir.RunError as err:
        print(err)
'''


@pytest.mark.parametrize("how", ["finish", "exit"])
def test_finish_on_a_full_disk_is_one_line_and_lets_the_run_go(tmp_path, how):
    run_dir = tmp_path / "run"
    r = subprocess.run([sys.executable, "-c", CHILD, str(run_dir), how], capture_output=True, text=True,
                       timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stderr
    said = (r.stdout if how == "finish" else r.stderr).splitlines()
    prefix = "" if how == "finish" else "rundir: at exit: "
    assert len(said) == 1 and said[0].startswith(f"{prefix}run.finish: the stop event was not written to "
                                                 f"{run_dir / LOSS_JSON}: "), r.stdout + r.stderr
    assert said[0].endswith("(the run is released)") and (r.stderr if how == "finish" else r.stdout) == ""
    assert not (run_dir / TRAINER_JSON).exists()                # the record removed all the same
    history = (run_dir / LOSS_JSON).read_bytes()
    assert history.endswith(b"\n") and [json.loads(line).get("event") for line in history.splitlines()][-1] is None
    log = (run_dir / TRAINER_LOG).read_bytes()
    assert log.endswith(b"\n") and b"stop (" not in log         # the cut line taken back
    with open_run(run_dir) as again:                            # the lock was let go
        assert again.last_step == 39
