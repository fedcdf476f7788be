"""The filesystem under a path, told by statfs's magic as the kernel reports it."""

from __future__ import annotations

import subprocess

import pytest

from rundir.filesystems import LOCAL_DISK, filesystem_magic, filesystem_of, forced_polling


def stat_f_magic(path) -> int:
    """The same magic as coreutils' stat(1) reads it: the reference for filesystem_magic."""
    return int(subprocess.run(["stat", "-f", "-c", "%t", str(path)], capture_output=True, text=True,
                              check=True).stdout.strip(), 16)


@pytest.mark.parametrize("where", ["tmp", "/dev/shm", "/proc"])
def test_magic_is_the_kernels(tmp_path, where):
    path = tmp_path if where == "tmp" else where
    assert filesystem_magic(path) == stat_f_magic(path)


def test_tmpfs_is_local_and_trusted():
    fs = filesystem_of("/dev/shm")
    assert (fs.name, fs.events, fs.shared) == ("tmpfs", True, False)
    assert fs.watched_by == "events"


def test_a_path_not_yet_there_is_named_by_its_parent(tmp_path):
    assert filesystem_of(tmp_path / "not" / "yet") == filesystem_of(tmp_path)


def test_unknown_magic_is_a_local_disk():
    assert filesystem_magic("/proc") == 0x9FA0          # procfs: no entry in the tables
    assert filesystem_of("/proc") == LOCAL_DISK


def test_forced_polling_keeps_the_name():
    fs = forced_polling(filesystem_of("/dev/shm"))
    assert (fs.events, fs.watched_by) == (False, "polling · tmpfs")
