"""The run directory's lock: one trainer (or other writer) per run directory, on any filesystem.

Where ``flock(2)`` works (a local disk; NFS with a lock manager; Lustre mounted ``flock``;
GPFS; BeeGFS; CephFS), the lock is an exclusive ``flock`` on ``RUN_DIR/.lock``, held for
the holder's lifetime and dropped by the kernel however it ends.

Where ``flock`` is refused (``ENOSYS``, ``ENOLCK``, ``EOPNOTSUPP``: Lustre mounted
``noflock``, NFS without a lock manager), the lock is a file, ``RUN_DIR/.lock-owner.json``,
created with ``O_CREAT|O_EXCL`` (atomic on NFSv3 and later, and on every local and
parallel filesystem) and holding :class:`LockOwner`: host, boot id, pid, start ticks and a
heartbeat that a thread of the holder refreshes every quarter of the stale bound (a thread,
so that a checkpoint write of minutes does not let it age; each refresh is an atomic
replace, so a reader never sees half of one). It is removed on a clean exit. A holder that
died leaves it behind; it is taken over only when provably stale:

- **same host** (host name and boot id as here): that process is gone (no such pid, or the
  pid now names a process that started at another time). A live holder here is never
  taken over, however old its heartbeat (it may be stopped by a signal or a debugger);
- **any other host**, or a file naming no holder: no heartbeat for ``run.lock_stale_after``
  seconds (run.toml, default :data:`DEFAULT_STALE_AFTER`), by the later of the recorded
  heartbeat and the file's modification time (the server's clock on NFS), so that a clock
  behind here never makes a live holder look stale.

A takeover is made under a second ``O_CREAT|O_EXCL`` file, ``RUN_DIR/.lock-takeover``, so
that two starters that both find a stale lock cannot both win: the one that creates it
checks again that the lock file is the stale one it read, then replaces it atomically.
A holder whose heartbeat finds the lock file no longer its own (taken over while it was
stopped, or removed by hand) says so once through :attr:`RunLock.lost`.

A trainer whose flock works still respects a live lock file (a trainer on a host where
flock is refused holds it), so a directory shared by hosts of both kinds has one holder.

A lock file no start could get past is refused at once in one line that names it and what
to do (:func:`blocking_lock_file`, which the console says too): any of the three names held
by something other than a regular file (a directory, a symbolic link, dangling or not), or
a heartbeat dated ahead of this host's clock by more than the margin the hosts' clocks may
differ by (it would never age, so another host's lock file would refuse every start).
"""

from __future__ import annotations

import errno
import fcntl
import os
import secrets
import socket
import stat
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Literal

import psutil

from . import fence
from .atomic import atomic_write_json, dumps_json
from .layout import LOCK_FILE, LOCK_OWNER_FILE, LOCK_TAKEOVER_FILE
from .safe_read import PID_RECORD_MAX, not_regular, parse_json, read_bytes
from .text import printable
from .trainer_record import process_start, read_boot_id, read_start_ticks, read_trainer_record

__all__ = ["DEFAULT_STALE_AFTER", "FLOCK_REFUSED", "LockFileError", "LockOwner", "RunLock", "RunLockedError",
           "blocking_lock_file", "configured_stale_after", "heartbeat_age", "live_lock_owner", "lock_owner_state",
           "read_lock_owner", "takeover_after"]

DEFAULT_STALE_AFTER = 120.0          # seconds without a heartbeat before another host's lock file is stale
# The errnos a filesystem answers flock(2) with when it does not do it at all.
FLOCK_REFUSED = frozenset({errno.ENOSYS, errno.ENOLCK, errno.EOPNOTSUPP})
_MIN_BEAT_S = 0.25
TAKEOVER_MARGIN = 0.25               # a taker waits the bound and this share of it more...
MIN_MARGIN_S = 0.5                   # ...and at least this long
LOCK_RECORD_BYTES = 1024             # a lock file's record, padded with spaces: rewritten in place whole


class RunLockedError(RuntimeError):
    """Another trainer holds the run directory's lock (the message is one line naming it)."""


class LockFileError(RunLockedError):
    """A lock file no start can get past (:func:`blocking_lock_file`): the message is one line
    naming it and what to do."""


@dataclass(frozen=True)
class LockOwner:
    """The content of ``.lock-owner.json``: who holds the lock, and when it last said so."""

    host: str
    boot_id: str | None
    pid: int
    start_ticks: int | None
    create_time: float
    token: str                  # this holding's own id: a takeover and a heartbeat check it
    heartbeat: float            # Unix seconds, the holder's clock
    acquired: float

    @classmethod
    def for_this_process(cls) -> "LockOwner":
        start = process_start(psutil.Process())
        now = time.time()
        return cls(host=socket.gethostname(), boot_id=start.boot_id, pid=os.getpid(), start_ticks=start.start_ticks,
                   create_time=start.create_time, token=secrets.token_hex(16), heartbeat=now, acquired=now)

    def to_dict(self) -> dict[str, Any]:
        return {"host": self.host, "boot_id": self.boot_id, "pid": self.pid, "start_ticks": self.start_ticks,
                "create_time": self.create_time, "token": self.token, "heartbeat": self.heartbeat,
                "acquired": self.acquired}

    @classmethod
    def from_value(cls, data: Any) -> "LockOwner | None":
        """A decoded lock file; None when it is not a whole one."""
        if not isinstance(data, dict):
            return None
        pid, host, token = data.get("pid"), data.get("host"), data.get("token")
        numbers: list[Any] = [data.get(key) for key in ("create_time", "heartbeat", "acquired")]
        if not (isinstance(pid, int) and not isinstance(pid, bool) and pid > 0 and isinstance(host, str) and host
                and isinstance(token, str) and token
                and all(isinstance(n, (int, float)) and not isinstance(n, bool) for n in numbers)):
            return None
        boot_id, ticks = data.get("boot_id"), data.get("start_ticks")
        return cls(host=host, boot_id=boot_id if isinstance(boot_id, str) and boot_id else None, pid=pid,
                   start_ticks=ticks if isinstance(ticks, int) and not isinstance(ticks, bool) else None,
                   create_time=float(numbers[0]), token=token, heartbeat=float(numbers[1]),
                   acquired=float(numbers[2]))

    def on_this_host(self) -> bool:
        """Named by host name and boot id as this host's (a record without a boot id is not)."""
        return self.host == socket.gethostname() and self.boot_id is not None and self.boot_id == read_boot_id()

    def describe(self) -> str:
        return f"pid {self.pid} on {printable(self.host, 80)}"


@dataclass(frozen=True)
class _Seen:
    """A lock file as read: its owner (None when unreadable) and what identifies this version of it."""

    owner: LockOwner | None
    mtime: float
    fingerprint: tuple[Any, ...]


def _read(path: Path) -> _Seen | None:
    """The lock file at ``path``, or None when there is none."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    read = read_bytes(path, PID_RECORD_MAX)
    if read.missing:
        return None
    owner = None
    if read.ok and read.value is not None:
        parsed = parse_json(read.value, path.name)
        owner = LockOwner.from_value(parsed.value) if parsed.ok else None
    return _Seen(owner, st.st_mtime, (owner.token if owner else None, st.st_ino, st.st_mtime_ns, st.st_size))


def _record(owner: LockOwner) -> bytes:
    """A lock file's bytes: the record, padded with spaces to :data:`LOCK_RECORD_BYTES`, so that
    a rewrite in place covers the whole of the one before (JSON ignores the trailing spaces)."""
    data = dumps_json(owner.to_dict())
    return data + b" " * max(LOCK_RECORD_BYTES - len(data), 0)


def read_lock_owner(run_dir: str | os.PathLike[str]) -> tuple[LockOwner | None, float | None]:
    """``RUN_DIR/.lock-owner.json``'s owner and modification time; ``(None, None)`` when there is
    none, ``(None, mtime)`` when it names no holder (being written, or damaged)."""
    seen = _read(Path(run_dir) / LOCK_OWNER_FILE)
    return (None, None) if seen is None else (seen.owner, seen.mtime)


LockState = Literal["held", "stale", "ahead"]


def _process_gone(owner: LockOwner) -> bool:
    try:
        proc = psutil.Process(owner.pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return True
        ticks = read_start_ticks(owner.pid)
        if owner.start_ticks is not None and ticks is not None:
            return ticks != owner.start_ticks
        created: float = proc.create_time()
        return abs(created - owner.create_time) > 0.01
    except psutil.NoSuchProcess:
        return True
    except psutil.Error:
        return False         # there, but not ours to inspect: alive


def heartbeat_age(owner: LockOwner | None, mtime: float, now: float | None = None) -> float:
    """Seconds since the lock file's last sign of life: the later of its recorded heartbeat
    and its modification time (a clock here ahead of the holder's never ages it early)."""
    now = time.time() if now is None else now
    return now - (max(mtime, owner.heartbeat) if owner is not None else mtime)


def lock_owner_state(owner: LockOwner | None, mtime: float, stale_after: float,
                     now: float | None = None) -> tuple[LockState, str]:
    """Whether a lock file is held or provably stale, with the reason in words; "ahead" when
    its last sign of life is dated ahead of this host's clock by more than the margin the
    hosts' clocks may differ by (:func:`takeover_after`): it would never age, and is neither."""
    now = time.time() if now is None else now
    if owner is not None and owner.on_this_host():
        if _process_gone(owner):
            return "stale", f"{owner.describe()} is gone"
        return "held", f"{owner.describe()} is running"
    age = heartbeat_age(owner, mtime, now)
    who = owner.describe() if owner is not None else "a lock file naming no holder"
    margin = takeover_after(stale_after) - stale_after
    if -age > margin:
        return "ahead", (f"{who}: its heartbeat is dated {-age:,.0f} s ahead of this host's clock, more than the "
                         f"{margin:g} s the hosts' clocks may differ by, so it never ages")
    if age > takeover_after(stale_after):
        return "stale", (f"{who}: no heartbeat for {age:.0f} s (run.lock_stale_after = {stale_after:g}, "
                         f"and a margin of {takeover_after(stale_after) - stale_after:g} s)")
    return "held", f"{who}, heartbeat {max(age, 0.0):.0f} s ago"


def takeover_after(stale_after: float) -> float:
    """How old another host's heartbeat must be before its lock file is taken over: the bound,
    past which its holder writes nothing more (:mod:`rundir.fence`), plus a margin for the two
    hosts' clocks (they must agree to within it) and a write under way when the bound passed."""
    return stale_after + max(stale_after * TAKEOVER_MARGIN, MIN_MARGIN_S)


def live_lock_owner(run_dir: str | os.PathLike[str]) -> LockOwner | None:
    """The holder of a lock file that is not stale (run.toml's bound, or the default when it
    cannot be read), or None: what a launcher asks before starting a trainer."""
    from .config import ConfigError

    owner, mtime = read_lock_owner(run_dir)
    if owner is None or mtime is None:
        return None
    try:
        bound = configured_stale_after(Path(run_dir))
    except ConfigError:
        bound = DEFAULT_STALE_AFTER
    return owner if lock_owner_state(owner, mtime, bound)[0] == "held" else None


def blocking_lock_file(run_dir: str | os.PathLike[str], stale_after: float | None = None,
                       now: float | None = None) -> str | None:
    """One line naming a lock file that refuses every start of a trainer in ``run_dir``, and
    what to do; None when there is none. :meth:`RunLock.acquire` refuses with it and the
    console says it. ``stale_after`` None: run.toml's bound (the default where it cannot be read)."""
    run_dir = Path(run_dir)
    for name in (LOCK_FILE, LOCK_OWNER_FILE, LOCK_TAKEOVER_FILE):
        what = _not_a_lock_file(run_dir / name)
        if what is not None:
            return (f"{run_dir / name} is {what}: the run's lock needs a regular file or nothing there, so no "
                    "trainer can start past it; remove it")
    for name in (LOCK_OWNER_FILE, LOCK_TAKEOVER_FILE):
        seen = _read(run_dir / name)
        if seen is None:
            continue
        if stale_after is None:
            from .config import ConfigError
            try:
                stale_after = configured_stale_after(run_dir)
            except ConfigError:
                stale_after = DEFAULT_STALE_AFTER
        state, why = lock_owner_state(seen.owner, seen.mtime, stale_after, now)
        if state == "ahead":
            where = f" on {printable(seen.owner.host, 80)}" if seen.owner is not None else ""
            return f"{run_dir / name}: {why}: if no trainer runs this directory{where}, remove it"
    return None


def _not_a_lock_file(path: Path) -> str | None:
    """``a directory, not a regular file`` where the lock needs a regular file or nothing (a
    symbolic link says where it points, and whether that exists); None when it is either."""
    what = not_regular(path)
    if what is None:
        return None
    try:
        if stat.S_ISLNK(os.lstat(path).st_mode):
            gone = "" if os.path.exists(path) else ", which does not exist"
            return f"{what}, not a regular file (it points to {printable(os.readlink(path), 120)}{gone})"
    except OSError:
        pass
    return f"{what}, not a regular file"


def configured_stale_after(run_dir: Path) -> float:
    """``run.lock_stale_after`` from run.toml (raises ConfigError for a bad one); the default
    when there is no run.toml yet."""
    from .config import load_run_config
    from .layout import RUN_TOML

    if not (run_dir / RUN_TOML).exists():
        return DEFAULT_STALE_AFTER
    return load_run_config(run_dir).run.lock_stale_after


class RunLock:
    """The run directory's lock, held from :meth:`acquire` to :meth:`release`.

    ``mode`` says which lock is held: ``"flock"`` or ``"file"`` (flock refused here).
    ``stale_after`` is the heartbeat bound; None reads it from run.toml when it is needed.
    ``on_lost`` is called once, from the heartbeat thread, with a line saying why the lock
    file is no longer this holder's."""

    def __init__(self, run_dir: str | os.PathLike[str], stale_after: float | None = None,
                 on_lost: Callable[[str], None] | None = None):
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / LOCK_FILE
        self.owner_path = self.run_dir / LOCK_OWNER_FILE
        self.stale_after = stale_after
        self.on_lost = on_lost
        self.mode: Literal["flock", "file"] | None = None
        self.lost: str | None = None
        self._fd: int | None = None
        self._dir_fd: int | None = None
        self._owner: LockOwner | None = None
        self._owner_fd: int | None = None        # the lock file this holder wrote: its heartbeat rewrites it in place
        self._confirmed = 0.0                    # monotonic: when its last heartbeat confirmed was stamped
        self._losing = threading.Lock()
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None

    # -- taking it ----------------------------------------------------------------
    def acquire(self) -> None:
        """Take the lock, or raise :class:`RunLockedError` naming the holder (ConfigError for a
        bad run.lock_stale_after where the lock file is used); :class:`LockFileError` naming a
        lock file no start can get past (:func:`blocking_lock_file`)."""
        blocking = blocking_lock_file(self.run_dir, self.stale_after)
        if blocking is not None:
            raise LockFileError(blocking)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            record, _ = read_trainer_record(self.run_dir)
            raise self._locked(f"pid {record.pid} on {printable(record.host, 80)}" if record else None) from None
        except OSError as err:
            os.close(fd)
            if err.errno not in FLOCK_REFUSED:
                raise
            self._acquire_file()
            return
        try:
            self._respect_lock_file()
        except BaseException:
            os.close(fd)
            raise
        self._fd, self.mode = fd, "flock"

    def _bound(self) -> float:
        if self.stale_after is None:
            self.stale_after = configured_stale_after(self.run_dir)
        return self.stale_after

    def _locked(self, holder: str | None, how: str = "") -> RunLockedError:
        said = f"{holder}{how}" if holder else how.removeprefix("; ")
        named = f" ({said})" if said else ""
        return RunLockedError(f"{self.run_dir}: another trainer is training this run directory{named}")

    def _refused(self, state: LockState, why: str, how: str) -> RunLockedError:
        """A lock file that is not stale, as the start's refusal: held by another trainer, or
        dated ahead (:func:`blocking_lock_file` says which file and what to do)."""
        if state == "ahead":
            return LockFileError(blocking_lock_file(self.run_dir, self._bound()) or f"{self.owner_path}: {why}")
        return self._locked(None, f"{why}; {how}")

    def _respect_lock_file(self) -> None:
        """With flock held: a live lock file is a holder on a host where flock is refused."""
        seen = _read(self.owner_path)
        if seen is None:
            return
        state, why = lock_owner_state(seen.owner, seen.mtime, self._bound())
        if state != "stale":
            raise self._refused(state, why, f"it holds {LOCK_OWNER_FILE}")

    def _acquire_file(self) -> None:
        self._bound()                       # a bad run.lock_stale_after is refused before anything is written
        stamped = time.monotonic()
        owner = LockOwner.for_this_process()
        for _ in range(3):
            try:
                fd = os.open(self.owner_path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                seen = _read(self.owner_path)
                if seen is None:
                    continue                   # released between the create and the read: try again
                state, why = lock_owner_state(seen.owner, seen.mtime, self._bound())
                if state != "stale":
                    raise self._refused(state, why, f"flock is refused here: the lock is {LOCK_OWNER_FILE}") from None
                self._take_over(seen, owner, why)
                fd = self._open_own(owner)
                break
            try:
                os.write(fd, _record(owner))
                os.fsync(fd)
            except BaseException:
                os.close(fd)
                raise
            break
        else:
            raise self._locked(None, f"{LOCK_OWNER_FILE} keeps changing")
        self._owner, self._owner_fd, self._confirmed, self.mode = owner, fd, stamped, "file"
        self._hold_directory()
        fence.register(self._fence)
        self._start_heartbeat()

    def _open_own(self, owner: LockOwner) -> int:
        """The lock file just written by a takeover, opened to be rewritten in place; it must
        still be ``owner``'s (another starter may have come between)."""
        fd = os.open(self.owner_path, os.O_RDWR)
        seen = _read(self.owner_path)
        if seen is None or seen.owner is None or seen.owner.token != owner.token or \
                seen.fingerprint[1] != os.fstat(fd).st_ino:
            os.close(fd)
            raise self._locked(seen.owner.describe() if seen is not None and seen.owner else None,
                               f"; {LOCK_OWNER_FILE} changed")
        return fd

    def _take_over(self, seen: _Seen, owner: LockOwner, why: str) -> None:
        """Replace the stale lock file ``seen`` with ``owner``'s, under the takeover file."""
        guard = self.run_dir / LOCK_TAKEOVER_FILE
        try:
            fd = os.open(guard, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            guard_seen = _read(guard)
            if guard_seen is not None and lock_owner_state(guard_seen.owner, guard_seen.mtime,
                                                           self._bound())[0] == "stale":
                guard.unlink(missing_ok=True)       # left by a starter that died mid-takeover
                return self._take_over(seen, owner, why)
            raise self._locked(None, f"; another trainer is taking over the stale lock ({why})") from None
        try:
            os.write(fd, dumps_json(owner.to_dict()))
            os.close(fd)
            again = _read(self.owner_path)
            if again is not None and again.fingerprint != seen.fingerprint:
                raise self._locked(again.owner.describe() if again.owner else None, f"; {LOCK_OWNER_FILE} changed")
            atomic_write_json(self.owner_path, owner.to_dict())
        finally:
            guard.unlink(missing_ok=True)

    # -- holding it ---------------------------------------------------------------
    def _hold_directory(self) -> None:
        """Reach the lock file through an open descriptor of the run directory from now on, so
        that the heartbeat follows a run moved or renamed under its trainer (as the trainer's
        own files do)."""
        try:
            self._dir_fd = os.open(self.run_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            through = Path(f"/proc/self/fd/{self._dir_fd}")
            a, b = os.stat(through), os.fstat(self._dir_fd)
            if (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino):
                self.owner_path = through / LOCK_OWNER_FILE
        except OSError:
            pass

    def _start_heartbeat(self) -> None:
        interval = max(self._bound() / 4, _MIN_BEAT_S)
        self._stop.clear()
        self._beat = threading.Thread(target=self._heartbeat, args=(interval,), name="run-lock-heartbeat",
                                      daemon=True)
        self._beat.start()

    def _heartbeat(self, interval: float) -> None:
        """Every ``interval``: the lock file must still be this holder's; its record is rewritten
        in place, through the descriptor of the file this holder wrote (so that a write stalled
        past a takeover lands in the file that was replaced, never over the new holder's), and
        read back: the beat is confirmed only when the file under the name is this holder's."""
        while not self._stop.wait(interval):
            assert self._owner is not None and self._owner_fd is not None
            stamped = time.monotonic()
            if self.lost is not None or self._fence_age(stamped) is not None:
                return            # lost, or past the bound: the fence says it at the next write
            try:
                seen = _read(self.owner_path)
            except OSError:
                continue          # not to be looked at now (a soft mount's EIO, ESTALE): the next beat looks again
            # There but unreadable (a read error, a copy caught half-written) is no proof of another
            # holder: beat, as when it reads as this trainer's.
            if seen is None or (seen.owner is not None and seen.owner.token != self._owner.token):
                self._taken(seen)
                return
            self._owner = LockOwner(**{**self._owner.to_dict(), "heartbeat": time.time()})
            try:
                os.pwrite(self._owner_fd, _record(self._owner), 0)
                again = _read(self.owner_path)
                ino = os.fstat(self._owner_fd).st_ino
            except OSError:
                continue          # a full disk or a lost mount: the next beat tries again
            if again is not None and again.owner is not None and again.owner.token != self._owner.token:
                self._taken(again)
                return
            if again is not None and again.owner is not None and again.fingerprint[1] == ino:
                self._confirmed = stamped

    def _taken(self, seen: _Seen | None) -> None:
        holder = seen.owner.describe() if seen is not None and seen.owner is not None else "nobody"
        self._lose(f"{self.run_dir / LOCK_OWNER_FILE} is no longer this trainer's lock (it names {holder})")

    def _fence_age(self, now: float) -> float | None:
        """How long ago this holder's last confirmed heartbeat was stamped, when that is past the
        bound (another host may take the lock over soon after); else None."""
        age = now - self._confirmed
        return age if age > self._bound() else None

    def _fence(self) -> None:
        """Before each write of the run's files (:mod:`rundir.fence`): raises
        :class:`~rundir.fence.LockLostError` once the lock is lost or may be."""
        if self.lost is None:
            age = self._fence_age(time.monotonic())
            if age is None:
                return
            self._lose(f"{self.run_dir / LOCK_OWNER_FILE}: this trainer's heartbeat was last confirmed {age:.1f} s "
                       f"ago, past run.lock_stale_after = {self._bound():g} s: another trainer may take the run over")
        raise fence.LockLostError(self.lost)

    def _lose(self, why: str) -> None:
        """Lost, once: :attr:`lost` says why and ``on_lost`` is told (andrea-train exits there)."""
        with self._losing:
            if self.lost is not None:
                return
            self.lost = why
        if self.on_lost is not None:
            self.on_lost(why)

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)     # closing drops the flock
            self._fd = None
        if self._owner is not None:
            fence.unregister(self._fence)
            self._stop.set()
            if self._beat is not None:
                self._beat.join()
            seen = _read(self.owner_path)
            if seen is not None and seen.owner is not None and seen.owner.token == self._owner.token:
                self.owner_path.unlink(missing_ok=True)
            self._owner = self._beat = None
        if self._owner_fd is not None:
            os.close(self._owner_fd)
            self._owner_fd = None
        if self._dir_fd is not None:
            os.close(self._dir_fd)
            self._dir_fd = None
        self.owner_path = self.run_dir / LOCK_OWNER_FILE
        self.mode = None

    def __enter__(self) -> "RunLock":
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
