"""The NFS-like test filesystem (tests/netfs.py) does what the tests that use it rely on,
each behaviour observed through a real mount."""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import fcntl
import os
import select
import struct
import time
from pathlib import Path

import pytest

CEILING = 15.0      # seconds: a generous bound on what should take well under one


def _wait_for(predicate, what: str):
    deadline = time.monotonic() + CEILING
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"not within {CEILING} s: {what}"
        time.sleep(0.02)


def test_flock_and_fcntl_locks_are_refused_with_enolck(netfs):
    _, mount = netfs
    path = mount / "lockfile"
    path.write_bytes(b"")
    fd = os.open(path, os.O_RDWR)
    try:
        with pytest.raises(OSError) as flock_error:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert flock_error.value.errno == errno.ENOLCK
        with pytest.raises(OSError) as lockf_error:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert lockf_error.value.errno == errno.ENOLCK
    finally:
        os.close(fd)


def test_without_refuse_flock_a_flock_excludes_another(mount_netfs):
    _, mount = mount_netfs(refuse_flock=False, attr_timeout=0.0)
    path = mount / "lockfile"
    path.write_bytes(b"")
    first, second = os.open(path, os.O_RDWR), os.open(path, os.O_RDWR)
    try:
        fcntl.flock(first, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(BlockingIOError):
            fcntl.flock(second, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.close(first)
        os.close(second)


def test_bytes_appended_elsewhere_read_as_nuls_then_as_themselves(mount_netfs):
    backing, mount = mount_netfs(attr_timeout=0.0, nul_window=1.0)
    (backing / "history").write_bytes(b'{"step": 1}\n')
    assert (mount / "history").read_bytes() == b'{"step": 1}\n'
    with open(backing / "history", "ab") as fh:          # another client appends
        fh.write(b'{"step": 2}\n')
    first = (mount / "history").read_bytes()
    assert first == b'{"step": 1}\n' + bytes(12)          # the size is known, the bytes are not yet
    _wait_for(lambda: (mount / "history").read_bytes() != first, "the real bytes")
    assert (mount / "history").read_bytes() == b'{"step": 1}\n{"step": 2}\n'


def test_own_writes_and_replaced_files_read_back_whole(mount_netfs):
    backing, mount = mount_netfs(attr_timeout=0.0, nul_window=30.0)
    with open(mount / "log", "ab") as fh:
        fh.write(b"first\n")
    with open(mount / "log", "ab") as fh:
        fh.write(b"second\n")
    assert (mount / "log").read_bytes() == b"first\nsecond\n"
    (backing / ".tmp-state").write_bytes(b'{"step": 3}')
    os.replace(backing / ".tmp-state", backing / "state")     # a new inode: complete when it appears
    assert (mount / "state").read_bytes() == b'{"step": 3}'


def test_attributes_are_cached_for_attr_timeout(mount_netfs):
    backing, mount = mount_netfs(attr_timeout=1.5)
    (backing / "grows").write_bytes(b"12345")
    assert os.stat(mount / "grows").st_size == 5
    with open(backing / "grows", "ab") as fh:
        fh.write(b"678")
    assert os.stat(mount / "grows").st_size == 5            # the cached size, as an NFS client's
    _wait_for(lambda: os.stat(mount / "grows").st_size == 8, "the new size once the cache expires")


class _Inotify:
    """inotify(7) through libc: the events a reader of the mount would be told of."""

    _EVENT = struct.Struct("iIII")
    IN_MODIFY, IN_CLOSE_WRITE, IN_CREATE = 0x2, 0x8, 0x100

    def __init__(self, directory: Path):
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        self.fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self.fd < 0:
            pytest.skip(f"inotify is not available: {os.strerror(ctypes.get_errno())}")
        mask = self.IN_MODIFY | self.IN_CLOSE_WRITE | self.IN_CREATE
        assert libc.inotify_add_watch(self.fd, os.fsencode(directory), mask) >= 0

    def next_names(self) -> list[str]:
        """The names in the next batch of events, waiting up to the ceiling for one."""
        ready, _, _ = select.select([self.fd], [], [], CEILING)
        assert ready, f"no inotify event within {CEILING} s"
        data, names = os.read(self.fd, 1 << 16), []
        while data:
            _, _, _, length = self._EVENT.unpack_from(data)
            names.append(data[16:16 + length].rstrip(b"\0").decode())
            data = data[16 + length:]
        return names

    def close(self) -> None:
        os.close(self.fd)


def test_writes_behind_the_mount_raise_no_inotify_event(mount_netfs):
    backing, mount = mount_netfs(attr_timeout=0.0)
    (backing / "elsewhere").write_bytes(b"")
    os.stat(mount / "elsewhere")
    watch = _Inotify(mount)
    try:
        with open(backing / "elsewhere", "ab") as fh:       # another client's write: no event here
            fh.write(b"unseen\n")
        (mount / "through-the-mount").write_bytes(b"seen\n")  # a write through the mount: events
        names = watch.next_names()
        assert names and set(names) == {"through-the-mount"}
    finally:
        watch.close()


def test_a_second_mount_is_another_client(mount_netfs):
    """The trainer on one mount, the console on another: the writer's appends are its own on
    its mount and NULs for a while on the other's."""
    backing, writer = mount_netfs(refuse_flock=True, attr_timeout=0.0, nul_window=1.0)
    _, reader = mount_netfs(backing, attr_timeout=0.0, nul_window=1.0)
    with open(writer / "history", "ab") as fh:
        fh.write(b"one\n")
    assert (reader / "history").read_bytes() == b"one\n"       # new to the reader: whole
    with open(writer / "history", "ab") as fh:
        fh.write(b"two\n")
    assert (writer / "history").read_bytes() == b"one\ntwo\n"
    assert (reader / "history").read_bytes() == b"one\n" + bytes(4)
    _wait_for(lambda: (reader / "history").read_bytes() == b"one\ntwo\n", "the real bytes on the other client")


def test_listings_show_names_added_behind_the_mount_with_their_inode_numbers(mount_netfs):
    """An NFS client lists what the server holds, each name with the server's fileid."""
    backing, mount = mount_netfs(attr_timeout=0.2)
    (backing / "run").mkdir()
    assert os.listdir(mount / "run") == []
    (backing / "run" / "step_000100.bin").write_bytes(b"x")
    deadline = time.monotonic() + 60
    while os.listdir(mount / "run") != ["step_000100.bin"]:
        assert time.monotonic() < deadline, os.listdir(mount / "run")
        time.sleep(0.05)
    with os.scandir(mount / "run") as listing:
        assert [entry.inode() for entry in listing] == [(backing / "run" / "step_000100.bin").stat().st_ino]


def test_a_replaced_file_that_reuses_an_inode_number_is_read_whole(mount_netfs):
    """A rename over a file another client reads gives it a new file: never NULs, even when the
    new inode reuses a number this mount has seen grow."""
    backing, mount = mount_netfs(nul_window=30.0)
    for version in range(20):                   # freed inode numbers come back on a local disk
        tmp = backing / f".tmp-state.{version}"
        tmp.write_text('{"version": %d, "step": %d}' % (version, version * 1000))
        os.replace(tmp, backing / "state.json")
        assert (mount / "state.json").read_bytes() == (backing / "state.json").read_bytes()
