"""Is a process the trainer of a run directory? The two checks a pid record cannot forge.

A ``.trainer.json`` is data from elsewhere: anyone who can write the run directory can
name any process in it. Its pid, start time and command line only say which process it
claims. Before a signal, the process must also

- **hold the run's lock**: an exclusive ``flock`` on ``RUN_DIR/.lock``, which only the
  trainer of that directory can hold (a second trainer refuses to start). The kernel's
  lock table, ``/proc/locks``, names the holder's pid with the lock file's device and
  inode; when it names no such pid (another pid namespace), the holder's own open files
  (``/proc/PID/fd`` and ``fdinfo``) are checked instead;
- **hold the run directory itself open**, as every trainer does for its lifetime
  (:func:`trainer_directory`). With the lock, two kernel facts: any program that shows both
  is the run's trainer, whatever its name (``andrea-train``, torchrun's workers, or a loop
  of the run API, :mod:`rundir.run`).

Which run directory a process trains is the directory it holds open, never how a command
line spells it (:func:`trainer_directory`): a trainer keeps its run directory open, so that a
run moved or renamed under it trains on, and is still its trainer's, at its new name. The
directory is the same when its ``(st_dev, st_ino)`` is: a symlink, a kernel bind mount or
``/scratch`` against ``/lustre/scratch`` reach it under another spelling with the same
identity. A FUSE view of it (bindfs, an sshfs mount of this host) has another device, and
sshfs other inode numbers: there a file created under a random name through this spelling,
holding a random token, that appears with it in the trainer's open directory proves them one
directory.

Where flock is refused (:mod:`rundir.run_lock`), the run's lock is its ``.lock-owner.json``,
naming the holder's pid and start: on this host that record, the live process it names and
the open directory are the proof.

Linux only, like the rest of the console's process checks: where ``/proc`` cannot answer,
the answer is "not proven", and nothing is signalled.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

from .layout import LOCK_FILE, LOCK_OWNER_FILE, TMP_PREFIX
from .run_lock import read_lock_owner
from .trainer_record import read_start_ticks

PROC_LOCKS = "/proc/locks"
_PROC_LOCKS_MAX = 4 << 20        # a lock table larger than this is not read whole


def _lock_key(run_dir: Path) -> tuple[int, int] | None:
    """``(st_dev, st_ino)`` of ``RUN_DIR/.lock`` (``run_dir`` as the holder reaches it, where
    that is known); None when there is none."""
    try:
        st = os.stat(run_dir / LOCK_FILE)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _exclusive_flock_holders(lines: list[str], dev: int, ino: int) -> list[str]:
    """The holders (pid fields) of granted exclusive flocks on (dev, ino) in
    ``/proc/locks``-format lines. A waiter (``->``) holds nothing."""
    where = f"{os.major(dev):02x}:{os.minor(dev):02x}:{ino}"
    holders = []
    for line in lines:
        parts = line.split()
        if len(parts) < 6 or "->" in parts:
            continue
        kind, mode, holder, key = parts[1], parts[3], parts[4], parts[5]
        if kind == "FLOCK" and mode == "WRITE" and key == where:
            holders.append(holder)
    return holders


def _lock_table() -> list[str]:
    try:
        with open(PROC_LOCKS, "rb") as fh:
            return fh.read(_PROC_LOCKS_MAX).decode("ascii", "replace").splitlines()
    except OSError:
        return []


def _from_lock_table(pid: int, dev: int, ino: int) -> bool:
    return str(pid) in _exclusive_flock_holders(_lock_table(), dev, ino)


def run_lock_holder(run_dir: str | os.PathLike[str]) -> int | None:
    """The pid that holds ``RUN_DIR/.lock`` as the kernel's lock table shows it here, or None
    when nobody does (or the table cannot tell). Read without taking the lock: taking it,
    even for a moment, would refuse a trainer starting at that moment."""
    key = _lock_key(Path(run_dir))
    if key is None:
        return None
    holders = _exclusive_flock_holders(_lock_table(), *key)
    return int(holders[0]) if holders and holders[0].isdigit() else None


def _from_open_files(pid: int, dev: int, ino: int) -> bool:
    """The holder's own view: one of its open files is the lock file, and its fdinfo
    shows an exclusive flock on it (needs permission to read the process's fds)."""
    fd_dir = f"/proc/{pid}/fd"
    try:
        fds = os.listdir(fd_dir)
    except OSError:
        return False
    for fd in fds:
        try:
            st = os.stat(f"{fd_dir}/{fd}")
            if (st.st_dev, st.st_ino) != (dev, ino):
                continue
            with open(f"/proc/{pid}/fdinfo/{fd}", "rb") as fh:
                info = fh.read(1 << 16).decode("ascii", "replace")
        except OSError:
            continue
        lock_lines = [line.split(":", 1)[1] for line in info.splitlines() if line.startswith("lock:")]
        if _exclusive_flock_holders(lock_lines, dev, ino):
            return True
    return False


def open_directory(pid: int, identity: tuple[int, int]) -> Path | None:
    """Where the directory with ``identity`` (device, inode) is now, when process ``pid``
    holds it open (a trainer holds its run directory open for its lifetime, and trains on in
    it when it is moved); None when it does not, or that cannot be seen."""
    fd_dir = f"/proc/{pid}/fd"
    try:
        fds = os.listdir(fd_dir)
    except OSError:
        return None
    for fd in fds:
        try:
            st = os.stat(f"{fd_dir}/{fd}")
            if (st.st_dev, st.st_ino) == identity and stat.S_ISDIR(st.st_mode):
                return linked_directory(f"{fd_dir}/{fd}")
        except OSError:
            continue
    return None


def linked_directory(link: str | os.PathLike[str]) -> Path | None:
    """Where the directory that an open descriptor's link (``/proc/PID/fd/N``) names is now;
    None when it was removed: the kernel's link then names its last place with " (deleted)"
    after it, a place where it is not (a removed directory has no links left)."""
    if os.stat(link).st_nlink == 0:
        return None
    return Path(os.readlink(link))


def _directory_fds(pid: int) -> list[tuple[Path, tuple[int, int]]]:
    """The directories process ``pid`` holds open: ``/proc/PID/fd/N`` and its ``(st_dev, st_ino)``."""
    fd_dir = Path(f"/proc/{pid}/fd")
    try:
        fds = os.listdir(fd_dir)
    except OSError:
        return []
    found = []
    for fd in fds:
        try:
            st = os.stat(fd_dir / fd)
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode):
            found.append((fd_dir / fd, (st.st_dev, st.st_ino)))
    return found


# Shown across a FUSE view: (pid, start ticks, its directory's identity, this one's) -> same or not.
_PROVEN_SAME: dict[tuple[int, int | None, tuple[int, int], tuple[int, int]], bool] = {}


def _same_through_probe(here: Path, there: Path) -> bool | None:
    """Whether directory ``there`` (another process's open descriptor) is ``here`` seen through
    another filesystem view: a file created in ``here`` under a random name, holding a random
    token, is in ``there`` with that token. By what the directory holds, not by inode numbers:
    sshfs numbers its files its own way. None when no probe could be made here (it needs write
    access to ``here``); never raises."""
    token = secrets.token_hex(8)
    name = f"{TMP_PREFIX}same-directory-{token}.{os.getpid()}"
    try:
        fd = os.open(here / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError:
        return None
    try:
        try:
            os.write(fd, token.encode())
        finally:
            os.close(fd)
        try:
            with open(there / name, "rb") as fh:
                return fh.read(64) == token.encode()
        except OSError:
            return False
    except OSError:
        return None
    finally:
        try:
            os.unlink(here / name)
        except OSError:
            pass


def trainer_directory(pid: int, run_dir: str | os.PathLike[str]) -> tuple[Path | None, str]:
    """``(/proc/PID/fd/N, "")`` when process ``pid`` holds ``run_dir`` itself open, however
    either side spells it: the same ``(st_dev, st_ino)``, or (a FUSE view of the same
    directory: bindfs, an sshfs mount of this host) the same directory by
    :func:`_same_through_probe`; else ``(None, why)``."""
    try:
        st = os.stat(run_dir)
    except OSError as err:
        return None, f"the run directory cannot be examined: {err.strerror or err}"
    here = (st.st_dev, st.st_ino)
    held = _directory_fds(pid)
    for path, identity in held:
        if identity == here:
            return path, ""
    ticks = read_start_ticks(pid)
    unknown = False
    for path, identity in held:
        if identity[0] == here[0]:
            continue            # the same filesystem, another inode: another directory
        key = (pid, ticks, identity, here)
        same = _PROVEN_SAME.get(key)
        if same is None:
            same = _same_through_probe(Path(run_dir), path)
            if same is not None:
                if len(_PROVEN_SAME) > 256:
                    _PROVEN_SAME.clear()
                _PROVEN_SAME[key] = same
        if same:
            return path, ""
        unknown = unknown or same is None
    if unknown:
        return None, (f"pid {pid} may train this run directory under another path, but that cannot be shown "
                      "(a probe file needs write access here); run the console on the trainer's own path")
    return None, f"pid {pid} does not name this run directory (it does not hold it open, under any path)"


def holds_run_lock(pid: int, run_dir: str | os.PathLike[str], view: Path | None = None) -> tuple[bool, str]:
    """Whether ``pid`` holds the run's lock: the exclusive ``flock`` on ``RUN_DIR/.lock`` (as
    ``view``, the holder's own open descriptor of the directory, reaches it, where given), or,
    where flock is refused, the ``.lock-owner.json`` naming this very process on this host.
    ``(False, why)`` when it does not or it cannot be shown. Never raises."""
    owner, _ = read_lock_owner(run_dir)
    if owner is not None and owner.pid == pid and owner.on_this_host() and \
            owner.start_ticks is not None and owner.start_ticks == read_start_ticks(pid):
        return True, ""
    key = (_lock_key(view) if view is not None else None) or _lock_key(Path(run_dir))
    if key is None:
        return False, f"the run directory has no {LOCK_FILE}, so no trainer holds it"
    dev, ino = key
    if _from_lock_table(pid, dev, ino) or _from_open_files(pid, dev, ino):
        return True, ""
    if owner is not None:
        return False, f"pid {pid} holds neither the run directory's {LOCK_FILE} nor its {LOCK_OWNER_FILE}"
    return False, f"pid {pid} does not hold the run directory's {LOCK_FILE}"
