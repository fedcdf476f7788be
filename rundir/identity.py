"""Is a process the trainer of a run directory? The two checks a pid record cannot forge.

A ``.trainer.json`` is data from elsewhere: anyone who can write the run directory can
name any process in it. Its pid, start time and command line only say which process it
claims. Before a signal, the process must also

- **hold the run's lock**: an exclusive ``flock`` on ``RUN_DIR/.lock``, which only the
  trainer of that directory can hold (a second trainer refuses to start). The kernel's
  lock table, ``/proc/locks``, names the holder's pid with the lock file's device and
  inode; when it names no such pid (another pid namespace), the holder's own open files
  (``/proc/PID/fd`` and ``fdinfo``) are checked instead;
- **run a trainer entry point**: ``andrea-train`` (as the program, or the script a Python
  interpreter runs) or ``python -m trainer`` (as torchrun starts each worker); or, for a
  trainer of its own through the run API (:mod:`rundir.run`, any script), **hold the run
  directory itself open**, as andrea-train does too: with the lock, two kernel facts.

Which run directory a process trains is what its command line names, or the directory it
holds open (:func:`holds_directory_open`): a trainer keeps its run directory open, so that a
run moved or renamed under it trains on, and is still its trainer's, at its new name.

Linux only, like the rest of the console's process checks: where ``/proc`` cannot answer,
the answer is "not proven", and nothing is signalled.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from .layout import LOCK_FILE

TRAINER_SCRIPTS = frozenset({"andrea-train"})
TRAINER_MODULES = frozenset({"trainer", "trainer.cli", "trainer.entry", "trainer.__main__"})
# Python options that take the next argument as their value.
_PYTHON_OPTIONS_WITH_VALUE = frozenset({"-X", "-W", "--check-hash-based-pycs"})
PROC_LOCKS = "/proc/locks"
_PROC_LOCKS_MAX = 4 << 20        # a lock table larger than this is not read whole


def runs_trainer_entry_point(argv: list[str]) -> bool:
    """Whether a command line runs the trainer: ``andrea-train ...``,
    ``python [options] /path/andrea-train ...`` or ``python [options] -m trainer ...``.
    A mention anywhere else (an argument of ``-c``, of another program) does not count."""
    if not argv:
        return False
    if Path(argv[0]).name in TRAINER_SCRIPTS:
        return True
    if not Path(argv[0]).name.startswith("python"):
        return False                 # any other program: its arguments are its own
    i = 1
    while i < len(argv):
        arg = argv[i]
        if arg == "-m":
            return i + 1 < len(argv) and argv[i + 1] in TRAINER_MODULES
        if arg.startswith("-m") and not arg.startswith("--"):
            return arg[2:] in TRAINER_MODULES
        if arg in _PYTHON_OPTIONS_WITH_VALUE:
            i += 2
            continue
        if arg == "-" or arg.startswith("-c") or not arg.startswith("-"):
            # The program's own argument begins: a script (is it andrea-train?), -c CODE or stdin.
            return not arg.startswith("-") and Path(arg).name in TRAINER_SCRIPTS
        i += 1
    return False


def _lock_key(run_dir: Path) -> tuple[int, int] | None:
    """``(st_dev, st_ino)`` of ``RUN_DIR/.lock``; None when there is none."""
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
                return Path(os.readlink(f"{fd_dir}/{fd}"))
        except OSError:
            continue
    return None


def holds_directory_open(pid: int, run_dir: str | os.PathLike[str]) -> bool:
    """Whether process ``pid`` holds ``run_dir`` itself open."""
    try:
        st = os.stat(run_dir)
    except OSError:
        return False
    return open_directory(pid, (st.st_dev, st.st_ino)) is not None


def holds_run_lock(pid: int, run_dir: str | os.PathLike[str]) -> tuple[bool, str]:
    """Whether ``pid`` holds the exclusive ``flock`` on ``RUN_DIR/.lock``; ``(False, why)``
    when it does not or it cannot be shown. Never raises."""
    key = _lock_key(Path(run_dir))
    if key is None:
        return False, f"the run directory has no {LOCK_FILE}, so no trainer holds it"
    dev, ino = key
    if _from_lock_table(pid, dev, ino) or _from_open_files(pid, dev, ino):
        return True, ""
    return False, f"pid {pid} does not hold the run directory's {LOCK_FILE}"
