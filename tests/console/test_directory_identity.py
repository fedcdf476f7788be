"""A trainer is a run's when the directory it holds is that directory, however either side
spells it (a symlink; a bindfs view, another device with the same files), and a trainer
recorded on another host is never looked for among this host's processes."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import time

import pytest

from console.cli import main as console_main
from console.read.probe import TrainerProbe
from rundir import TrainerRecord, signal_trainer, verify_trainer, write_trainer_record
from rundir.layout import CHECKPOINT_REQUEST, LOCK_OWNER_FILE
from rundir.run_lock import LockOwner
from tests.console.trainer_proc import Trainer
from tests.netfs import missing_requirements, unmount

CEILING = 20.0


def _operate_through(trainer: Trainer, spelling) -> None:
    """Verified, checkpointed (c) and stopped (s) through ``spelling``, not the trainer's own."""
    assert verify_trainer(spelling).state == "running", verify_trainer(spelling).reason
    assert console_main([str(spelling), "--checkpoint", "--timeout", "120"]) == 0
    assert console_main([str(spelling), "--stop", "--timeout", "120"]) == 0
    assert trainer.proc.wait(timeout=120) == 0


def test_a_trainer_started_through_a_symlink_is_operated_through_the_real_path(tmp_path):
    real = tmp_path / "lustre" / "scratch"
    real.mkdir(parents=True)
    (tmp_path / "scratch").symlink_to(real)                 # /scratch -> /lustre/scratch
    trainer = Trainer(tmp_path / "scratch" / "run")
    try:
        trainer.wait_verified()
        _operate_through(trainer, real / "run")
    finally:
        trainer.close()


@pytest.fixture
def bindfs_view(tmp_path):
    """``(real, view)``: a bindfs mount of ``real`` at ``view`` (another device, the same files)."""
    missing = missing_requirements() or (None if shutil.which("bindfs") else "no bindfs (Debian's bindfs)")
    if missing:
        pytest.skip(f"a bindfs view cannot be mounted here: {missing}")
    real, view = tmp_path / "real", tmp_path / "view"
    real.mkdir()
    view.mkdir()
    subprocess.run(["bindfs", str(real), str(view)], check=True, timeout=30)
    try:
        yield real, view
    finally:
        unmount(view)


def test_a_trainer_started_through_a_bindfs_view_is_operated_through_the_real_path(bindfs_view):
    real, view = bindfs_view
    assert os.stat(real).st_dev != os.stat(view).st_dev
    trainer = Trainer(view / "run")
    try:
        trainer.wait_verified()
        _operate_through(trainer, real / "run")
    finally:
        trainer.close()


def _sleeper() -> subprocess.Popen:
    return subprocess.Popen(["sleep", "60"])


@pytest.mark.parametrize("elsewhere", ["host", "boot"])
def test_a_record_of_another_host_or_boot_is_not_probed_here(tmp_path, elsewhere):
    """The record names a live local pid (a sleeper): probed here it would fail verification
    as no trainer; it is shown as remote instead, asked through the request file, never signalled."""
    sleeper = _sleeper()
    try:
        mine = TrainerRecord.for_this_process()
        record = dataclasses.replace(mine, pid=sleeper.pid, argv=["andrea-train", str(tmp_path)],
                                     **({"host": "gpu-node-7"} if elsewhere == "host" else {"boot_id": "another-boot"}))
        write_trainer_record(tmp_path, record)
        v = verify_trainer(tmp_path)
        assert (v.state, v.ok, v.elsewhere, v.via_slurm) == ("remote", False, True, False)
        assert TrainerProbe()(tmp_path).state == "remote"
        stop = signal_trainer(tmp_path, signal.SIGTERM)
        assert (stop.state, stop.ok) == ("remote", False)
        ask = signal_trainer(tmp_path, signal.SIGUSR1)
        assert ask.requested and \
            json.loads((tmp_path / CHECKPOINT_REQUEST).read_text())["trainer"]["pid"] == sleeper.pid
        time.sleep(0.2)
        assert sleeper.poll() is None                           # alive: nothing was sent to it
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_remote_trainers_lock_file_heartbeat_says_whether_it_runs(tmp_path):
    record = dataclasses.replace(TrainerRecord.for_this_process(), host="gpu-node-7", boot_id="another-boot", pid=4242)
    write_trainer_record(tmp_path, record)
    now = time.time()
    owner = LockOwner(host="gpu-node-7", boot_id="another-boot", pid=4242, start_ticks=None, create_time=0.0,
                      token="a" * 32, heartbeat=now, acquired=now)
    (tmp_path / LOCK_OWNER_FILE).write_text(json.dumps(owner.to_dict()))
    assert verify_trainer(tmp_path).state == "remote"
    old = now - 3600
    (tmp_path / LOCK_OWNER_FILE).write_text(json.dumps(dataclasses.replace(owner, heartbeat=old).to_dict()))
    os.utime(tmp_path / LOCK_OWNER_FILE, (old, old))
    v = verify_trainer(tmp_path)
    assert (v.state, v.elsewhere) == ("stale", True)
