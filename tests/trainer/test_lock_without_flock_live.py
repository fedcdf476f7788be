"""A real trainer on a filesystem that refuses flock (tests/netfs.py, as Lustre ``noflock`` or
NFS without a lock manager): it trains under its lock file, a second trainer is refused with
one line naming it, and the console verifies, checkpoints and stops it."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time

from console.cli import main as console_main
from rundir import RunConfig, read_trainer_record, verify_trainer
from rundir.config import dump_run_config
from rundir.layout import LOCK_OWNER_FILE, RUN_TOML, TRAINER_JSON
from rundir.run_lock import LockOwner, read_lock_owner
from tests.console.trainer_proc import ROOT, Trainer, train_command
from trainer.cli import EXIT_LOCK_LOST


def test_a_trainer_where_flock_is_refused_holds_a_lock_file(netfs):
    _, mount = netfs
    run = mount / "run"
    trainer = Trainer(run)
    try:
        trainer.wait_verified()
        owner, _ = read_lock_owner(run)
        record, _ = read_trainer_record(run)
        assert owner is not None and owner.pid == trainer.proc.pid == record.pid
        assert verify_trainer(run).state == "running"

        second = subprocess.run(train_command(run), capture_output=True, text=True, timeout=300, cwd=ROOT,
                                env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert second.returncode == 2, second.stderr
        lines = second.stderr.strip().splitlines()
        assert len(lines) == 1 and f"pid {trainer.proc.pid} on {socket.gethostname()}" in lines[0], second.stderr

        assert console_main([str(run), "--checkpoint", "--timeout", "120"]) == 0
        assert console_main([str(run), "--stop", "--timeout", "120"]) == 0
        assert trainer.proc.wait(timeout=120) == 0
        assert not (run / LOCK_OWNER_FILE).exists() and not (run / TRAINER_JSON).exists()
        assert "flock is refused on this filesystem" in (mount / "run.out").read_text()
    finally:
        trainer.close()


def test_a_trainer_whose_lock_file_is_taken_over_stops_writing_nothing(netfs):
    """Frozen past the bound on its host, its lock file taken over by another trainer: at its
    next heartbeat it stops at once, leaving the directory to the new holder."""
    _, mount = netfs
    run = mount / "run"
    run.mkdir()
    text = dump_run_config(RunConfig.from_preset("micro", checkpoint_every=100000))
    (run / RUN_TOML).write_text(text.replace("lock_stale_after = 120.0\n", "lock_stale_after = 1.0\n"))
    trainer = Trainer(run)
    try:
        trainer.wait_verified()
        now = time.time()
        usurper = LockOwner(host="gpu-node-7", boot_id="another-boot", pid=4242, start_ticks=None, create_time=0.0,
                            token="b" * 32, heartbeat=now, acquired=now)
        (run / LOCK_OWNER_FILE).write_text(json.dumps(usurper.to_dict()))
        assert trainer.proc.wait(timeout=120) == EXIT_LOCK_LOST
        assert read_lock_owner(run)[0].pid == 4242                   # the new holder's file stays
        assert "no longer this trainer's lock" in (mount / "run.out").read_text()
    finally:
        trainer.close()
