"""A FUSE view of a directory, as a login node (or a laptop) sees a compute node's writes.

``bindfs SRC MNT`` (Debian's bindfs) shows SRC at MNT through FUSE: a writer that writes SRC
goes through this host's kernel without passing the mount, so a reader of MNT gets no
inotify event for it, and MNT has a device of its own, as a network filesystem's mount
would. ``sshfs SRC MNT`` (Debian's sshfs, over an sshd of the test's own on 127.0.0.1) is
the mount a person makes on a laptop, with its caches: a listing may be 20 s old. The mount
is always undone, also when the test fails.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest


def fill(disk: Path) -> Path:
    """Every free byte of ``disk`` taken by one file (returned, to free it): a full disk."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        for size in (1 << 16, 1):
            try:
                while True:
                    os.write(fd, b"\0" * size)
            except OSError:
                pass
    finally:
        os.close(fd)
    return filler


def mount_tmpfs(where: Path, size: str) -> bool:
    """A real small tmpfs at ``where`` (created), for a full disk; False where none can be
    mounted (not root, no mount permission, not Linux). Undo it with ``umount -l``."""
    if not os.uname().sysname == "Linux" or os.geteuid() != 0:
        return False
    where.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True)
    return r.returncode == 0


def fuse_missing() -> str | None:
    """Why a FUSE mount cannot be made here (None: it can)."""
    if not Path("/dev/fuse").exists():
        return "no /dev/fuse on this machine"
    for tool, package in (("bindfs", "bindfs"), ("fusermount3", "fuse3")):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (Debian's {package}; .ci/run installs it)"
    return None


def unmount(mount: Path) -> None:
    """Undo a FUSE mount; a lazy unmount if something still holds it."""
    if subprocess.run(["fusermount3", "-u", str(mount)], capture_output=True).returncode:
        subprocess.run(["fusermount3", "-u", "-z", str(mount)], capture_output=True)


@contextmanager
def bindfs(source: Path, mount: Path) -> Iterator[Path]:
    missing = fuse_missing()
    if missing:
        pytest.skip(missing)
    source.mkdir(parents=True, exist_ok=True)
    mount.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["bindfs", "--no-allow-other", str(source), str(mount)], capture_output=True, text=True)
    assert done.returncode == 0, f"bindfs failed: {done.stderr}"
    deadline = time.monotonic() + 60
    while not mount.is_mount():
        assert time.monotonic() < deadline, "the bindfs mount did not appear"
        time.sleep(0.05)
    try:
        yield mount
    finally:
        unmount(mount)


def sshfs_missing() -> str | None:
    """Why an sshfs mount over this host's own sshd cannot be made here (None: it can)."""
    if not Path("/dev/fuse").exists():
        return "no /dev/fuse on this machine"
    for tool, package in (("sshfs", "sshfs"), ("sshd", "openssh-server"), ("ssh-keygen", "openssh-client"),
                          ("fusermount3", "fuse3")):
        if shutil.which(tool) is None and not Path(f"/usr/sbin/{tool}").exists():
            return f"{tool} is not installed (Debian's {package}; .ci/run installs it)"
    if os.geteuid() != 0:
        return "sshd serves a login to this host only when started as root"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def sshfs(source: Path, mount: Path, *options: str) -> Iterator[Path]:
    """``source`` mounted at ``mount`` with sshfs (its default options, plus ``options``) over
    an sshd of its own bound to 127.0.0.1: a generated host key and a key for root, a spare
    port. As a laptop mounts a cluster's run directory: listings and attributes are cached,
    no change event comes. The mount and the sshd are always undone."""
    missing = sshfs_missing()
    if missing:
        pytest.skip(missing)
    source.mkdir(parents=True, exist_ok=True)
    mount.mkdir(parents=True, exist_ok=True)
    keys = Path(tempfile.mkdtemp(prefix="sshfs-keys-"))
    for name in ("host", "user"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(keys / name)], check=True)
    port = _free_port()
    (keys / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {keys / 'host'}\nAuthorizedKeysFile {keys / 'user.pub'}\n"
        f"PidFile {keys / 'sshd.pid'}\nPasswordAuthentication no\nPermitRootLogin prohibit-password\n"
        "StrictModes no\nUsePAM no\nSubsystem sftp internal-sftp\n")
    Path("/run/sshd").mkdir(exist_ok=True)            # its privilege separation directory
    sshd = subprocess.Popen([shutil.which("sshd") or "/usr/sbin/sshd", "-D", "-f", str(keys / "sshd_config"),
                             "-E", str(keys / "sshd.log")])
    try:
        ssh_options = (f"IdentityFile={keys / 'user'},StrictHostKeyChecking=no,UserKnownHostsFile=/dev/null,"
                       "BatchMode=yes,ConnectTimeout=20")
        deadline = time.monotonic() + 60
        while True:                                   # until sshd listens (it starts in its own time)
            done = subprocess.run(["sshfs", "-p", str(port), "-o", ",".join((ssh_options, *options)),
                                   f"root@127.0.0.1:{source}", str(mount)], capture_output=True, text=True)
            if done.returncode == 0 or time.monotonic() > deadline or sshd.poll() is not None:
                break
            time.sleep(0.2)
        log = (keys / "sshd.log").read_text(errors="replace") if (keys / "sshd.log").exists() else ""
        assert done.returncode == 0, f"sshfs failed: {done.stderr}; sshd: {log[-1000:]}"
        while not mount.is_mount():
            assert time.monotonic() < deadline, "the sshfs mount did not appear"
            time.sleep(0.05)
        try:
            yield mount
        finally:
            unmount(mount)
    finally:
        sshd.terminate()
        sshd.wait(30)
        shutil.rmtree(keys, ignore_errors=True)
