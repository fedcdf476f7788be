"""A run directory removed while a process holds it open: the kernel's link to it then names
its last place with " (deleted)" after it, a path where nothing is. The console never shows
that path as where the run went (a real process holds a real directory, removed), and the
trainer says the directory was removed, not that it moved to "... (deleted)"."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from console.read.reader import RunReader
from rundir.identity import linked_directory, open_directory
from rundir.layout import TRAINER
from tests.rundirs import make_run
from trainer.held_dir import REMOVED, HeldRunDir

HOLDER = ("import os, sys; fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY); "
          "print(fd, flush=True); sys.stdin.read()")


def test_a_removed_directory_held_open_has_no_place(tmp_path):
    run, moved = tmp_path / "run", tmp_path / "moved"
    run.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(run)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    try:
        fd = int(holder.stdout.readline())
        st = os.stat(run)
        run.rename(moved)                                       # the control: a move has a place
        assert open_directory(holder.pid, (st.st_dev, st.st_ino)) == moved
        moved.rmdir()
        assert os.readlink(f"/proc/{holder.pid}/fd/{fd}").endswith(" (deleted)")      # what the kernel says
        assert linked_directory(f"/proc/{holder.pid}/fd/{fd}") is None
        assert open_directory(holder.pid, (st.st_dev, st.st_ino)) is None
    finally:
        holder.stdin.close()
        holder.wait(30)


def test_the_console_does_not_send_anyone_to_a_deleted_path(tmp_path):
    from console.model.snapshot import TrainerView

    run = make_run(tmp_path / "run", steps=20, checkpoints=())
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(run)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    try:
        holder.stdout.readline()
        views = [TrainerView(state="running", label="running", reason="verified", pid=holder.pid)]
        reader = RunReader(run, probe=lambda _: views[0])
        assert reader.read()[0].dir_state == "ok"
        shutil.rmtree(run)
        views[0] = TrainerView(state="stopped", label="stopped", reason="no trainer record")
        snap, _ = reader.read({TRAINER})
        assert snap.trainer.state == "unverified" and "(deleted)" not in snap.trainer.reason, snap.trainer.reason
        assert "renamed or removed" in snap.trainer.reason
    finally:
        holder.stdin.close()
        holder.wait(30)


def test_the_trainer_says_its_directory_was_removed(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    held = HeldRunDir(run)
    try:
        run.rmdir()
        assert held.where() is None and held.moved_to() == REMOVED and held.moved_to() is None     # said once
    finally:
        held.close()
