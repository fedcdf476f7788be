"""A small FUSE filesystem that behaves like an NFS client, for tests (mfusepy over libfuse3).

A passthrough over a backing directory, mounted by a child process (``python -m
tests.netfs BACKING MOUNT [options]``; :func:`mounted` starts it, waits for the mount and
always unmounts it with ``fusermount3 -u``). What it does that a local disk does not:

- ``refuse_flock``: ``flock(2)`` (and POSIX ``fcntl`` locks) on its files fail with
  ``ENOLCK``, as on Lustre mounted ``noflock`` or NFS without a lock manager. The kernel
  passes the handler's errno through unchanged (tests/test_netfs.py checks it).
- ``attr_timeout`` seconds: the kernel caches entries and attributes (FUSE's
  ``attr_timeout``/``entry_timeout``), as an NFS client does (``actimeo``): a size or a
  name changed behind the mount is seen up to that late.
- ``nul_window`` seconds: bytes that another client appended to a file (written to the
  backing directory, or through another mount of it) read as NUL bytes for that long
  after this mount first sees the file's new size, then as the real bytes at the same
  offsets: an NFS client that learns a size before the data. Writes made through this
  mount are its own, known to it, and read back as written (close-to-open). Every open
  file is ``direct_io``, so a re-read reaches this process and never a cached page of NULs.
- ``stall_control``: a file of lines ``PID NAME``; a write to, or a rename onto, a file named
  NAME by process PID is held until its line is removed, as a server that stalls one
  client's writes (an NFS hiccup) holds them; the process's other threads go on. The kernel
  holds the file's inode lock meanwhile, so another host's rename of that file goes through
  a second mount of the backing directory (another client, as another host has).
- No change events: inotify on the mount reports only what is done through the mount, so a
  write to the backing directory (another client's) raises no event at a reader of the
  mount. That is true by construction; nothing here suppresses events.

A file replaced by ``rename`` (a new inode) is complete when it appears, as it is on NFS
(the writer closed it first); only growth of a file this mount already knows reads as NULs.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

FUSERMOUNT = "fusermount3"
EDGE = 32          # bytes compared to tell an append from another file under a reused inode number


def _pread_path(path: str, offset: int, n: int) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return b""
    try:
        return os.pread(fd, n, offset)
    except OSError:
        return b""
    finally:
        os.close(fd)
MOUNT_TIMEOUT = 20.0


@dataclass
class _Growth:
    """What this mount knows of one backing inode: the size it has seen, and the ranges that
    grew behind it, each with when it was first seen (served as NULs for ``nul_window``)."""

    known: int
    ranges: list[tuple[int, int, float]] = field(default_factory=list)
    edge: bytes = b""          # the bytes just before ``known``: an append leaves them as they were


def missing_requirements() -> str | None:
    """Why this filesystem cannot be mounted here (None when it can)."""
    if not os.access("/dev/fuse", os.R_OK | os.W_OK):
        return "no usable /dev/fuse"
    if shutil.which(FUSERMOUNT) is None:
        return f"no {FUSERMOUNT} (Debian's fuse3)"
    try:
        os.environ.setdefault("FUSE_LIBRARY_NAME", "fuse3")
        import mfusepy  # noqa: F401
    except (ImportError, OSError, AttributeError) as error:
        return f"mfusepy cannot load libfuse3 ({error})"
    return None


def _operations_class():
    import mfusepy

    class NetFS(mfusepy.Operations):
        use_ns = True

        def __init__(self, backing: str, refuse_flock: bool, nul_window: float, stall_control: str = ""):
            self.backing = backing
            self.refuse_flock = refuse_flock
            self.nul_window = nul_window
            self.stall_control = stall_control
            self._growth: dict[tuple[int, int], _Growth] = {}
            self._lock = threading.Lock()

        def _path(self, path: str) -> str:
            return os.path.join(self.backing, path.lstrip("/"))

        def _observe(self, st: os.stat_result, read_at) -> None:
            """Note a regular file's size as this mount sees it: growth behind the mount
            starts a NUL window. A file replaced behind the mount whose new inode reuses a
            freed number is another file (an NFS client sees another file handle): its bytes
            before the size known are not the ones seen, and it is taken whole."""
            if self.nul_window <= 0 or not (st.st_mode & 0o100000):
                return
            key = (st.st_dev, st.st_ino)
            with self._lock:
                growth = self._growth.get(key)
                if growth is not None and st.st_size > growth.known and \
                        read_at(max(0, growth.known - EDGE), min(EDGE, growth.known)) != growth.edge:
                    growth = None                      # another file under a reused inode number
                if growth is None:
                    self._growth[key] = _Growth(st.st_size, edge=read_at(max(0, st.st_size - EDGE),
                                                                         min(EDGE, st.st_size)))
                elif st.st_size > growth.known:
                    growth.ranges.append((growth.known, st.st_size, time.monotonic()))
                    growth.known = st.st_size
                    growth.edge = read_at(max(0, st.st_size - EDGE), min(EDGE, st.st_size))
                elif st.st_size < growth.known:        # truncated: forget what lay past the end
                    growth.known = st.st_size
                    growth.ranges = [(a, min(b, st.st_size), t) for a, b, t in growth.ranges if a < st.st_size]

        def _own_write(self, fh: int, end: int, path: str) -> None:
            if self.nul_window <= 0:
                return
            st = os.fstat(fh)
            with self._lock:
                growth = self._growth.setdefault((st.st_dev, st.st_ino), _Growth(0))
                if end >= growth.known:
                    growth.known = end
                    growth.edge = _pread_path(self._path(path), max(0, end - EDGE), min(EDGE, end))

        def _blank(self, fh: int, data: bytes, offset: int, path: str) -> bytes:
            if self.nul_window <= 0 or not data:
                return data
            st = os.fstat(fh)
            self._observe(st, lambda at, n: _pread_path(self._path(path), at, n))
            now = time.monotonic()
            with self._lock:
                growth = self._growth.get((st.st_dev, st.st_ino))
                if growth is None:
                    return data
                growth.ranges = [r for r in growth.ranges if now - r[2] < self.nul_window]
                ranges = list(growth.ranges)
            out = bytearray(data)
            for start, end, _ in ranges:
                lo, hi = max(start, offset), min(end, offset + len(data))
                if lo < hi:
                    out[lo - offset:hi - offset] = bytes(hi - lo)
            return bytes(out)

        # -- metadata ---------------------------------------------------------------
        def getattr(self, path, fh=None):
            st = os.fstat(fh.fh) if fh is not None else os.lstat(self._path(path))
            self._observe(st, lambda offset, n: _pread_path(self._path(path), offset, n))
            keys = ("st_mode", "st_nlink", "st_uid", "st_gid", "st_size", "st_atime_ns", "st_mtime_ns",
                    "st_ctime_ns", "st_ino", "st_blocks", "st_blksize")
            attrs = {key: getattr(st, key) for key in keys}
            attrs.update(st_atime=st.st_atime_ns, st_mtime=st.st_mtime_ns, st_ctime=st.st_ctime_ns)
            return attrs

        def readdir(self, path, fh):
            # With use_ino each entry carries its backing inode number: an entry without one has
            # d_ino 0, which readdir(3) skips.
            here = self._path(path)
            entries = [(".", os.lstat(here)), ("..", os.lstat(os.path.dirname(here.rstrip("/")) or "/"))]
            with os.scandir(here) as listing:
                for entry in listing:
                    try:
                        entries.append((entry.name, entry.stat(follow_symlinks=False)))
                    except FileNotFoundError:
                        pass                # renamed or removed since the listing: not there
            return [(name, {"st_ino": st.st_ino, "st_mode": st.st_mode}, 0) for name, st in entries]

        def statfs(self, path):
            sv = os.statvfs(self._path(path))
            return {key: getattr(sv, key) for key in ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail",
                                                      "f_ffree", "f_files", "f_flag", "f_frsize", "f_namemax")}

        def access(self, path, amode):
            if not os.access(self._path(path), amode):
                raise mfusepy.FuseOSError(errno.EACCES)
            return 0

        def readlink(self, path):
            return os.readlink(self._path(path))

        def chmod(self, path, mode):
            return os.chmod(self._path(path), mode)

        def chown(self, path, uid, gid):
            return os.lchown(self._path(path), uid, gid)

        def utimens(self, path, times=None):
            return os.utime(self._path(path), ns=times) if times else os.utime(self._path(path))

        def mkdir(self, path, mode):
            return os.mkdir(self._path(path), mode)

        def rmdir(self, path):
            return os.rmdir(self._path(path))

        def unlink(self, path):
            return os.unlink(self._path(path))

        def _stall(self, path: str) -> None:
            """Hold a write or rename of ``path`` by a process the stall control names (a line
            ``PID NAME``) until the line is gone: a server that stalls one client's writes."""
            if not self.stall_control:
                return
            tid = mfusepy.fuse_get_context()[2]
            line = f"{_thread_group(tid)} {os.path.basename(path)}"
            while True:
                try:
                    with open(self.stall_control, encoding="utf-8") as fh:
                        if line not in fh.read().splitlines():
                            return
                except OSError:
                    return
                time.sleep(0.05)

        def rename(self, old, new):
            self._stall(new)
            return os.rename(self._path(old), self._path(new))

        def symlink(self, target, source):
            return os.symlink(source, self._path(target))

        def link(self, target, source):
            return os.link(self._path(source), self._path(target))

        # -- files ------------------------------------------------------------------
        def open(self, path, fi):
            fi.fh = os.open(self._path(path), fi.flags & ~os.O_CREAT)
            fi.direct_io = 1
            return 0

        def create(self, path, mode, fi):
            fi.fh = os.open(self._path(path), fi.flags | os.O_CREAT, mode)
            fi.direct_io = 1
            return 0

        def read(self, path, size, offset, fi):
            return self._blank(fi.fh, os.pread(fi.fh, size, offset), offset, path)

        def write(self, path, data, offset, fi):
            self._stall(path)
            written = os.pwrite(fi.fh, data, offset)
            self._own_write(fi.fh, offset + written, path)
            return written

        def truncate(self, path, length, fi=None):
            if fi is not None:
                os.ftruncate(fi.fh, length)
            else:
                os.truncate(self._path(path), length)

        def flush(self, path, fi):
            return 0

        def fsync(self, path, datasync, fi):
            os.fdatasync(fi.fh) if datasync else os.fsync(fi.fh)
            return 0

        def release(self, path, fi):
            os.close(fi.fh)
            return 0

        def flock(self, path, fi, op):
            if self.refuse_flock:
                raise mfusepy.FuseOSError(errno.ENOLCK)
            return 0     # never reached: without refuse_flock the kernel keeps flocks itself

        def lock(self, path, fi, cmd, lock):
            raise mfusepy.FuseOSError(errno.ENOLCK)

    return NetFS


def _thread_group(tid: int) -> int:
    """The process a thread id belongs to (a FUSE request names the calling thread)."""
    try:
        with open(f"/proc/{tid}/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("Tgid:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return tid


def serve(backing: str, mountpoint: str, refuse_flock: bool, attr_timeout: float, nul_window: float,
          stall_control: str = "") -> None:
    """Mount and serve in the foreground until unmounted."""
    os.environ.setdefault("FUSE_LIBRARY_NAME", "fuse3")
    import mfusepy

    cls = _operations_class()
    if not refuse_flock:
        # No handlers at all: the kernel then takes flock and fcntl locks itself, on this mount.
        cls = type("NetFSLocking", (cls,), {"flock": None, "lock": None})
    mfusepy.FUSE(cls(backing, refuse_flock, nul_window, stall_control), mountpoint, raw_fi=True, foreground=True,
                 nothreads=False, attr_timeout=attr_timeout, entry_timeout=attr_timeout,
                 negative_timeout=attr_timeout, fsname="netfs", default_permissions=True,
                 use_ino=True)     # the backing inode numbers, as every NFS client shows the server's fileid


def _is_mounted(mountpoint: Path) -> bool:
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as fh:
            return any(line.split()[4] == str(mountpoint) for line in fh if len(line.split()) > 4)
    except OSError:
        return False


def unmount(mountpoint: Path) -> None:
    """``fusermount3 -u``; a busy mount is detached lazily (``-z``) so a failed test never
    leaves a mount behind."""
    if not _is_mounted(mountpoint):
        return
    done = subprocess.run([FUSERMOUNT, "-u", str(mountpoint)], capture_output=True)
    if done.returncode != 0 and _is_mounted(mountpoint):
        subprocess.run([FUSERMOUNT, "-u", "-z", str(mountpoint)], capture_output=True)


@contextlib.contextmanager
def mounted(backing: Path, mountpoint: Path, *, refuse_flock: bool = False, attr_timeout: float = 1.0,
            nul_window: float = 0.0, stall_control: Path | None = None) -> Iterator[Path]:
    """Mount ``backing`` at ``mountpoint`` (created if need be) in a child process for the
    ``with`` block; unmounted and the child ended however the block ends."""
    mountpoint.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "tests.netfs", str(backing), str(mountpoint),
            f"--attr-timeout={attr_timeout}", f"--nul-window={nul_window}"]
    if refuse_flock:
        argv.append("--refuse-flock")
    if stall_control is not None:
        argv.append(f"--stall-control={stall_control}")
    env = dict(os.environ, FUSE_LIBRARY_NAME="fuse3")
    root = Path(__file__).resolve().parent.parent
    child = subprocess.Popen(argv, cwd=root, env=env, stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + MOUNT_TIMEOUT
        while not _is_mounted(mountpoint):
            if child.poll() is not None:
                raise RuntimeError(f"netfs did not mount (exit status {child.returncode}; its errors are above)")
            if time.monotonic() > deadline:
                raise RuntimeError(f"netfs did not mount within {MOUNT_TIMEOUT:.0f} s")
            time.sleep(0.02)
        yield mountpoint
    finally:
        unmount(mountpoint)
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            child.send_signal(signal.SIGKILL)
            child.wait()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("backing")
    parser.add_argument("mountpoint")
    parser.add_argument("--refuse-flock", action="store_true")
    parser.add_argument("--attr-timeout", type=float, default=1.0)
    parser.add_argument("--nul-window", type=float, default=0.0)
    parser.add_argument("--stall-control", default="")
    args = parser.parse_args(argv)
    serve(args.backing, args.mountpoint, args.refuse_flock, args.attr_timeout, args.nul_window, args.stall_control)


if __name__ == "__main__":
    main()
