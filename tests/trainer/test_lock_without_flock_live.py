"""A real trainer on a filesystem that refuses flock (tests/netfs.py, as Lustre ``noflock`` or
NFS without a lock manager): it trains under its lock file, a second trainer is refused with
one line naming it, and the console verifies, checkpoints and stops it."""

from __future__ import annotations

import os
import socket
import subprocess

from console.cli import main as console_main
from rundir import read_trainer_record, verify_trainer
from rundir.layout import LOCK_OWNER_FILE, TRAINER_JSON
from rundir.run_lock import read_lock_owner
from tests.console.trainer_proc import ROOT, Trainer, train_command


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
