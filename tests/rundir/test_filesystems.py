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


def test_a_checkpoint_on_a_shared_filesystem_is_read_not_mapped(tmp_path):
    """The same arrays, read into memory through a FUSE view (another host could remove the
    file under a mapping), and mapped on the local disk."""
    import numpy as np

    from rundir.checkpoint import open_checkpoint, write_checkpoint
    from tests.mounts import bindfs

    rng = np.random.default_rng(0)
    w, m, v = (rng.standard_normal(1000).astype(np.float32) for _ in range(3))
    (tmp_path / "node").mkdir()
    write_checkpoint(tmp_path / "node", 7, w, m, v)
    local = open_checkpoint(tmp_path / "node" / "step_000007.bin")
    assert isinstance(local.weights.base, np.memmap) or isinstance(local.weights, np.memmap)
    with bindfs(tmp_path / "node", tmp_path / "login") as login:
        shared = open_checkpoint(login / "step_000007.bin")
        assert not isinstance(shared.weights, np.memmap) and not isinstance(shared.weights.base, np.memmap)
        for ours, theirs in ((shared.weights, w), (shared.m, m), (shared.v, v)):
            assert np.array_equal(ours, theirs)


def test_a_json_file_cut_short_on_a_shared_filesystem_is_read_again(tmp_path):
    """Through a mount that caches attributes, a file replaced while it is opened can read as its
    predecessor's size, cut short (a sidecar mid-replacement, seen from a login node). A
    freshly written JSON file there that does not parse is read again a little later; here the
    trainer's complete version lands after the first read."""
    import threading

    from rundir.atomic import atomic_write_bytes
    from rundir.safe_read import read_json
    from tests.mounts import bindfs

    (tmp_path / "node").mkdir()
    (tmp_path / "node" / ".state.json").write_bytes(b'{"step": 7, "arms": {')      # as cut short
    with bindfs(tmp_path / "node", tmp_path / "login") as login:
        landed = threading.Timer(0.15, atomic_write_bytes,
                                 (tmp_path / "node" / ".state.json", b'{"step": 7, "arms": {}}'))
        landed.start()
        try:
            read = read_json(login / ".state.json", 1 << 20)
        finally:
            landed.join()
        assert read.ok and read.value == {"step": 7, "arms": {}}, read.error
    # On a local disk a file that does not parse is said at once: nothing there is cut short.
    assert "not valid JSON" in read_json_error(tmp_path / "node" / "cut.json")


def read_json_error(path) -> str:
    from rundir.safe_read import read_json

    path.write_bytes(b'{"step": 7')
    return read_json(path, 1 << 20).error or ""
