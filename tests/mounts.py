"""A FUSE view of a directory, as a login node sees a compute node's writes.

``bindfs SRC MNT`` (Debian's bindfs) shows SRC at MNT through FUSE: a writer that writes SRC
goes through this host's kernel without passing the mount, so a reader of MNT gets no
inotify event for it, and MNT has a device of its own, as a network filesystem's mount
would. The mount is always undone, also when the test fails.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest


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
