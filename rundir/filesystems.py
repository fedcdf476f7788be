"""Which filesystem holds a path, and what it promises a reader on this host.

A run's real home is a cluster's shared filesystem: the trainer writes from a GPU node and
the console reads from a login node. There, two promises of a local disk are broken:

- **Change events.** inotify reports only writes made through this host's kernel. A
  network filesystem (NFS, Lustre, GPFS, BeeGFS, CephFS, SMB, 9p) or a FUSE mount never
  tells this host about another host's writes, so a reader that waits for events waits
  for ever. There the run is polled: its files are reopened and looked at every second.
- **Mappings.** A memory-mapped file that another host truncates or replaces can raise
  SIGBUS (or ESTALE) in the process that maps it. On a shared filesystem a cache is read,
  never mapped.

The filesystem is told by ``statfs(2)``'s ``f_type`` magic (the kernel's own name for
it), not by the mount table's spelling, so a bind mount or an automounted path is named
for what it really is. An unknown magic is taken as a local disk: the console polls every
run as a safety net anyway (more slowly where events are trusted).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable

# statfs(2) f_type magics (linux/magic.h and each filesystem's own header).
_NETWORK = {
    0x6969: "nfs",
    0x0BD00BD0: "lustre",
    0x47504653: "gpfs",
    0x19830326: "beegfs",
    0x00C36400: "cephfs",
    0x517B: "smb",
    0xFF534D42: "smb",         # cifs
    0xFE534D42: "smb",         # smb2/3
    0x01021997: "9p",
    0x5346414F: "afs",
    0x65735546: "fuse",        # sshfs, bindfs, gcsfuse, WekaFS's client...: anything could be behind it
}
_LOCAL = {
    0xEF53: "ext4",
    0x58465342: "xfs",
    0x9123683E: "btrfs",
    0x01021994: "tmpfs",
    0x2FC12FC1: "zfs",
    0xF2F52010: "f2fs",
    0x794C7630: "overlay",
}


@dataclass(frozen=True)
class Filesystem:
    """What a path's filesystem promises: ``name`` as the status says it; ``events`` whether
    inotify sees every change a reader needs (writes from other hosts cannot reach it
    unseen); ``shared`` whether other hosts may write it, so nothing there is memory-mapped."""

    name: str
    events: bool
    shared: bool
    listing: str = ""       # how long its mount may serve a cached directory listing (listing_cache)

    @property
    def watched_by(self) -> str:
        """How a run on it is followed, as the status says it."""
        how = "events" if self.events else f"polling · {self.name}"
        if self.listing:
            how += f" ({self.listing}: checkpoints are known from the trainer's history, each confirmed by opening it)"
        return how


LOCAL_DISK = Filesystem("local", events=True, shared=False)


class _StatFs(ctypes.Structure):
    # f_type is the first field of struct statfs on every Linux ABI (__fsword_t: a long);
    # the rest is room enough for any architecture's layout.
    _fields_ = [("f_type", ctypes.c_long), ("_rest", ctypes.c_byte * 248)]


@lru_cache(maxsize=1)
def _statfs_call() -> Callable[..., int] | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        call = libc.statfs
    except (OSError, AttributeError):
        return None
    call.argtypes = [ctypes.c_char_p, ctypes.POINTER(_StatFs)]
    call.restype = ctypes.c_int
    return call


def filesystem_magic(path: str | os.PathLike[str]) -> int | None:
    """``statfs(2)``'s ``f_type`` for ``path``, or None where it cannot be asked (no such
    path, not Linux)."""
    call = _statfs_call()
    if call is None:
        return None
    buf = _StatFs()
    if call(os.fsencode(path), ctypes.byref(buf)) != 0:
        return None
    f_type: int = buf.f_type
    return f_type & 0xFFFFFFFF


def filesystem_of(path: str | os.PathLike[str]) -> Filesystem:
    """The filesystem holding ``path`` (a path that does not exist yet: its nearest parent
    that does). Never raises; an unknown filesystem is taken as a local disk."""
    probe = os.path.abspath(os.fspath(path))
    while True:
        magic = filesystem_magic(probe)
        if magic is not None or probe == os.path.dirname(probe):
            break
        probe = os.path.dirname(probe)
    if magic in _NETWORK:
        return Filesystem(_NETWORK[magic], events=False, shared=True)
    if magic == 0x794C7630:
        # An overlay's lower layers change without an event through the overlay.
        return Filesystem("overlay", events=False, shared=False)
    if magic in _LOCAL:
        return Filesystem(_LOCAL[magic], events=True, shared=False)
    return LOCAL_DISK


# Opened to be looked at, never read: a FIFO in a file's place must not block the open.
_LOOK_FLAGS = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)

Stamp = tuple[int, int, int, int]


def fresh_stamp(path: str | os.PathLike[str]) -> Stamp | None:
    """A file's (inode, size, mtime, ctime) as the server has them now: from a fresh open
    and ``fstat``, since an NFS client revalidates attributes when a file is opened
    (close-to-open consistency), while a ``stat`` by path may answer from its attribute
    cache for up to a minute. None when it is absent or cannot be opened."""
    try:
        fd = os.open(path, _LOOK_FLAGS)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        return st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns
    except OSError:
        return None
    finally:
        os.close(fd)


def forced_polling(fs: Filesystem) -> Filesystem:
    """``fs`` followed by polling whatever it promises (``--poll``)."""
    return fs if not fs.events else Filesystem(fs.name, events=False, shared=fs.shared)


MOUNTINFO = "/proc/self/mountinfo"
SSHFS_DIR_CACHE_S = 20          # sshfs's default dir_cache timeout (cache_timeout)
NFS_ACDIRMAX_S = 60             # the NFS client's default acdirmax


def _mount_of(path: str) -> tuple[str, dict[str, str]] | None:
    """The filesystem type and options (mount and superblock options together) of the mount
    holding ``path``, from this process's mount table; None where it cannot be read."""
    try:
        with open(MOUNTINFO, "rb") as fh:
            lines = fh.read(4 << 20).decode("utf-8", "replace").splitlines()
    except OSError:
        return None
    best: tuple[int, str, dict[str, str]] | None = None
    for line in lines:
        fields = line.split(" ")
        if "-" not in fields or len(fields) < 6:
            continue
        sep = fields.index("-")
        point = fields[4].encode().decode("unicode_escape")
        inside = path == point or path.startswith(point.rstrip("/") + "/")
        if not inside or (best is not None and len(point) < best[0]) or len(fields) < sep + 4:
            continue
        options = {}
        for opt in (fields[5] + "," + fields[sep + 3]).split(","):
            key, _, value = opt.partition("=")
            options[key] = value
        best = (len(point), fields[sep + 1], options)
    return (best[1], best[2]) if best is not None else None


def listing_cache(path: str | os.PathLike[str]) -> str:
    """What the mount holding ``path`` says of its cached directory listings, "" when it keeps
    none (or cannot be told): sshfs caches them for 20 s unless mounted with ``-o
    dir_cache=no`` (its options are the sshfs process's own, not in the mount table); an NFS
    client caches lookups and directory attributes up to ``acdirmax`` (60 s) unless
    ``lookupcache=none``/``positive``, ``actimeo=0`` or ``noac``. Meanwhile a listing can
    miss a file just written and name one just removed."""
    mount = _mount_of(os.path.realpath(os.fspath(path)))
    if mount is None:
        return ""
    kind, options = mount
    if kind == "fuse.sshfs":
        return f"sshfs may cache directory listings for up to {SSHFS_DIR_CACHE_S} s unless mounted with -o dir_cache=no"
    if kind in ("nfs", "nfs4"):
        if "noac" in options or options.get("actimeo") == "0" or options.get("lookupcache") in ("none", "pos",
                                                                                                   "positive"):
            return ""
        limit = options.get("acdirmax", options.get("actimeo", str(NFS_ACDIRMAX_S)))
        return f"NFS may cache directory listings for up to {limit} s (lookupcache=positive or actimeo=0 avoid it)"
    return ""
