"""``.trainer.json`` and ``.lock``: who trains a run directory, and whether it may be signalled.

The trainer holds an exclusive ``flock`` on ``.lock`` for its lifetime (a second
trainer refuses to start) and writes ``.trainer.json`` naming itself. Before anyone
signals that process, :func:`verify_trainer` checks that the record is whole (every key
of DESIGN.md's pid record), that it names this host, that the pid is alive, that its
``create_time`` is the recorded one (so a reused pid is refused), that its command line
names this run directory and runs a trainer entry point, and that it holds the run's
``.lock`` (:mod:`rundir.identity`): a forged record naming any other process is refused.
"""

from __future__ import annotations

import fcntl
import os
import signal
import socket
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import psutil

from .atomic import atomic_write_json
from .identity import holds_run_lock, runs_trainer_entry_point
from .layout import LOCK_FILE, TRAINER_JSON
from .safe_read import PID_RECORD_MAX, read_json_object
from .slurm import JobInfo, check_job, query_job, scancel_command
from .text import printable

CREATE_TIME_TOLERANCE = 0.01
# Every key of DESIGN.md's pid record: a record without one of them is not verified.
RECORD_KEYS = ("pid", "create_time", "host", "argv", "started")


class RunLockedError(RuntimeError):
    """Another trainer holds the run directory's lock."""


@dataclass(frozen=True)
class TrainerRecord:
    """The content of ``.trainer.json``."""

    pid: int
    create_time: float
    host: str
    argv: list[str]
    started: float
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def for_this_process(cls, **extra: Any) -> "TrainerRecord":
        proc = psutil.Process()
        return cls(pid=proc.pid, create_time=proc.create_time(), host=socket.gethostname(),
                   argv=proc.cmdline(), started=time.time(), extra=extra)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.update(data.pop("extra"))
        return data


def write_trainer_record(run_dir: str | os.PathLike[str], record: TrainerRecord) -> None:
    atomic_write_json(Path(run_dir) / TRAINER_JSON, record.to_dict())


def remove_trainer_record(run_dir: str | os.PathLike[str], pid: int | None = None) -> bool:
    """Remove ``.trainer.json`` (only if it names ``pid``, when given); True if removed."""
    path = Path(run_dir) / TRAINER_JSON
    if pid is not None:
        record, _ = read_trainer_record(run_dir)
        if record is None or record.pid != pid:
            return False
    try:
        path.unlink()
        return True
    except FileNotFoundError:
        return False


def read_trainer_record(run_dir: str | os.PathLike[str]) -> tuple[TrainerRecord | None, str | None]:
    """``(record, None)``, ``(None, None)`` when there is none, or ``(None, reason)``; never raises."""
    read = read_json_object(Path(run_dir) / TRAINER_JSON, PID_RECORD_MAX)
    if read.missing:
        return None, None
    if not read.ok:
        return None, read.error
    data = read.value
    pid, ctime, argv = data.get("pid"), data.get("create_time"), data.get("argv")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return None, f"{TRAINER_JSON}: pid {pid!r} is not a positive integer"
    if not isinstance(ctime, (int, float)) or isinstance(ctime, bool):
        return None, f"{TRAINER_JSON}: create_time {ctime!r} is not a number"
    if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
        return None, f"{TRAINER_JSON}: argv is not a list of strings"
    missing = [key for key in RECORD_KEYS if key not in data]
    if missing:
        return None, f"{TRAINER_JSON}: no {', '.join(repr(k) for k in missing)}: not a whole pid record"
    host, started = data.get("host"), data.get("started")
    if not isinstance(host, str) or not host:
        return None, f"{TRAINER_JSON}: host {host!r} is not a host name"
    if not isinstance(started, (int, float)) or isinstance(started, bool):
        return None, f"{TRAINER_JSON}: started {started!r} is not a number"
    return TrainerRecord(pid=pid, create_time=float(ctime), host=host, argv=argv, started=float(started),
                         extra={k: v for k, v in data.items() if k not in RECORD_KEYS}), None


class RunLock:
    """The exclusive ``flock`` on ``RUN_DIR/.lock``, held for a trainer's lifetime."""

    def __init__(self, run_dir: str | os.PathLike[str]):
        self.path = Path(run_dir) / LOCK_FILE
        self._fd: int | None = None

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            record, _ = read_trainer_record(self.path.parent)
            holder = f" (pid {record.pid} on {record.host})" if record else ""
            raise RunLockedError(f"{self.path.parent}: another trainer is training this run directory{holder}") from None
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)     # closing drops the flock
            self._fd = None

    def __enter__(self) -> "RunLock":
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


TrainerState = Literal["running", "stopped", "stale", "unverified", "unreadable"]


@dataclass(frozen=True)
class Verification:
    """What :func:`verify_trainer` found. Only ``state == "running"`` may be signalled."""

    state: TrainerState
    reason: str
    record: TrainerRecord | None = None
    job: JobInfo | None = None          # verified through the scheduler: the trainer's SLURM job

    @property
    def ok(self) -> bool:
        return self.state == "running"

    @property
    def via_slurm(self) -> bool:
        """Verified, and signalled, through SLURM (the trainer runs on another node)."""
        return self.job is not None


def _shown(text: str, limit: int = 80) -> str:
    """Another process's command line, safe to print: one line, no control characters
    (a hostile argv must not forge log lines or send terminal escapes)."""
    return printable(text, limit)


def _names_run_dir(proc: psutil.Process, argv: list[str], run_dir: Path) -> bool:
    try:
        cwd = Path(proc.cwd())
    except (psutil.Error, OSError):
        cwd = None
    target = run_dir.resolve()
    for arg in argv[1:]:
        if arg.startswith("-"):
            arg = arg.split("=", 1)[1] if "=" in arg else ""
            if not arg:
                continue
        candidate = Path(arg)
        if not candidate.is_absolute():
            if cwd is None:
                continue
            candidate = cwd / candidate
        try:
            if candidate.resolve() == target:
                return True
        except (OSError, RuntimeError):
            continue
    return False


def verify_trainer(run_dir: str | os.PathLike[str]) -> Verification:
    """Check ``.trainer.json`` against the live process table; never raises."""
    run_dir = Path(run_dir)
    record, error = read_trainer_record(run_dir)
    if error:
        return Verification("unreadable", error)
    if record is None:
        return Verification("stopped", "no trainer is recorded: there is no .trainer.json")
    if record.host != socket.gethostname():
        recorded_job = record.extra.get("slurm")
        if isinstance(recorded_job, dict) and recorded_job.get("job_id"):
            return _verify_through_slurm(run_dir, record, recorded_job)
        return Verification("unverified", f"the trainer runs on host {record.host!r}, not this one (and not in a "
                                          "SLURM job this console could ask about)", record)
    if record.pid == 1:
        return Verification("unverified", "the record names pid 1 (init), which is never a trainer", record)
    if record.pid == os.getpid():
        return Verification("unverified", "the record names this console's own pid", record)
    try:
        proc = psutil.Process(record.pid)
        create_time = proc.create_time()
        cmdline = proc.cmdline()
        if proc.status() == psutil.STATUS_ZOMBIE:
            return Verification("stale", f"pid {record.pid} has exited (zombie)", record)
    except psutil.NoSuchProcess:
        return Verification("stale", f"pid {record.pid} is not running: the record is stale", record)
    except psutil.AccessDenied:
        return Verification("unverified", f"pid {record.pid} cannot be inspected (access denied)", record)
    if abs(create_time - record.create_time) > CREATE_TIME_TOLERANCE:
        return Verification("stale", f"pid {record.pid} was reused by another process (its start time differs)", record)
    if not _names_run_dir(proc, cmdline, run_dir):
        return Verification("unverified", f"pid {record.pid} ({_shown(' '.join(cmdline))}) does not name this run directory", record)
    if not runs_trainer_entry_point(cmdline):
        return Verification("unverified", f"pid {record.pid} ({_shown(' '.join(cmdline))}) is not a trainer "
                                          "(not andrea-train or python -m trainer)", record)
    holds, why = holds_run_lock(record.pid, run_dir)
    if not holds:
        return Verification("unverified", why, record)
    return Verification("running", f"pid {record.pid} verified", record)


def _verify_through_slurm(run_dir: Path, record: TrainerRecord, recorded_job: dict[str, Any]) -> Verification:
    """A trainer on another node, in a SLURM job: the scheduler vouches for it (the job is
    RUNNING, is this user's, runs on the recorded node and names this run directory)."""
    job_id = str(recorded_job.get("job_id"))
    job, why = query_job(job_id)
    if job is None:
        return Verification("unverified", f"SLURM job {printable(job_id)}: {why}", record)
    problem = check_job(job, recorded_job, run_dir)
    if problem is not None:
        state: TrainerState = "stale" if job.state not in ("RUNNING", "PENDING", "SUSPENDED", "") else "unverified"
        return Verification(state, problem, record)
    return Verification("running", f"pid {record.pid} on {printable(record.host)}, SLURM job {job.job_id} verified",
                        record, job)


def trainer_alive(run_dir: str | os.PathLike[str], verification: Verification) -> bool:
    """Whether the verified trainer still runs: its pid with the recorded start time here,
    or, through SLURM, its record still in place and its job still RUNNING."""
    record = verification.record
    if record is None:
        return False
    if not verification.via_slurm:
        try:
            proc = psutil.Process(record.pid)
            return abs(proc.create_time() - record.create_time) < CREATE_TIME_TOLERANCE and \
                proc.status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False
    now, _ = read_trainer_record(run_dir)
    if now is None or (now.pid, now.create_time, now.host) != (record.pid, record.create_time, record.host):
        return False                         # a clean exit removes the record
    job, _ = query_job(verification.job.job_id)
    return job is not None and job.state == "RUNNING"


def signal_trainer(run_dir: str | os.PathLike[str], sig: signal.Signals) -> Verification:
    """Send ``sig`` to the verified trainer of ``run_dir``; a process that fails verification
    is never signalled. Returns the verification (``ok`` False: nothing was sent). A trainer
    on another node, in a SLURM job, is signalled with ``scancel`` (see
    :func:`rundir.slurm.scancel_command`)."""
    verification = verify_trainer(run_dir)
    if not verification.ok:
        return verification
    assert verification.record is not None
    if verification.via_slurm:
        world = verification.record.extra.get("world_size")
        if sig == signal.SIGUSR1 and isinstance(world, int) and world > 1:
            # scancel reaches torchrun's agent, never its workers (sessions of their own).
            return Verification("unverified", f"a checkpoint request cannot reach the {world} torchrun workers of "
                                              f"SLURM job {verification.job.job_id} through scancel; a stop "
                                              "(SIGTERM, forwarded by torchrun) checkpoints and exits",
                                verification.record, verification.job)
        command = scancel_command(verification.record.extra["slurm"], signal.Signals(sig).name.removeprefix("SIG"))
        try:
            r = subprocess.run(command, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.SubprocessError) as err:
            return Verification("unverified", f"{' '.join(command)} failed: {err}", verification.record)
        if r.returncode != 0:
            return Verification("unverified", f"{' '.join(command)} failed: {printable(r.stderr.strip())}",
                                verification.record)
        return verification
    try:
        # psutil re-checks the create time, closing the window in which the pid could be reused.
        proc = psutil.Process(verification.record.pid)
        if abs(proc.create_time() - verification.record.create_time) > CREATE_TIME_TOLERANCE:
            return Verification("stale", "the trainer exited and its pid was reused", verification.record)
        proc.send_signal(sig)
    except psutil.NoSuchProcess:
        return Verification("stale", f"pid {verification.record.pid} exited before the signal", verification.record)
    except psutil.AccessDenied:
        return Verification("unverified", f"not allowed to signal pid {verification.record.pid}", verification.record)
    return verification
