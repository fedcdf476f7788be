"""``.trainer.json``: who trains a run directory now, as a typed record, and whether a live
process is the one it names.

Every field is named once here; the trainer writes the record with
:meth:`TrainerRecord.for_this_process` and every reader gets the same typed value from
:func:`read_trainer_record` (unknown keys of another writer are kept in ``extra``, never
read by key elsewhere).

**Identity.** A pid alone names a process only until it is reused. The record carries two
start stamps: ``create_time`` (psutil's, Unix seconds) and, where ``/proc`` gives them,
``start_ticks`` (``/proc/PID/stat`` field 22: the start in clock ticks since boot) with the
boot's ``boot_id``. ``create_time`` is computed from the kernel's boot time, which moves
whenever the wall clock is stepped (NTP, a paused VM), so after a step every live process
appears to have started at another time. Ticks since boot and the boot id never move while
the machine runs, and a reboot changes the boot id: where both are recorded, they alone
decide. ``create_time`` decides only for records without them (older trainers, other
writers).
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping

import psutil

from .atomic import atomic_write_json
from .layout import TRAINER_JSON
from .safe_read import PID_RECORD_MAX, read_json_object

CREATE_TIME_TOLERANCE = 0.01
# Every key of the pid record (docs/contract.md#the-lock-and-the-trainers-identity) that a record
# must have: one without them is not verified.
RECORD_KEYS = ("pid", "create_time", "host", "argv", "started")
BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"
BATCH_STEP = "batch"            # the step id recorded by a trainer that is the batch script's process
REQUESTS_BY_FILE = "file"       # checkpoint_requests: only through .checkpoint_request.json, never SIGUSR1

# The SLURM placement's fields and the environment variables they come from.
_SLURM_FROM_ENV = {"job_id": "SLURM_JOB_ID", "step_id": "SLURM_STEP_ID", "cluster": "SLURM_CLUSTER_NAME",
                   "node": "SLURMD_NODENAME", "job_name": "SLURM_JOB_NAME", "user": "SLURM_JOB_USER"}


@dataclass(frozen=True)
class SlurmPlacement:
    """The SLURM job (and step) a trainer runs in, as the pid record carries it."""

    job_id: str
    step_id: str = BATCH_STEP
    cluster: str = ""
    node: str = ""
    job_name: str = ""
    user: str = ""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "SlurmPlacement | None":
        """This process's job, from the environment SLURM gives every task; None outside SLURM."""
        env = os.environ if env is None else env
        if not env.get("SLURM_JOB_ID"):
            return None
        values = {key: env.get(var, "") for key, var in _SLURM_FROM_ENV.items()}
        values["user"] = values["user"] or env.get("USER", "")
        values["step_id"] = values["step_id"] or BATCH_STEP        # the batch step has no SLURM_STEP_ID
        return cls(**values)

    @classmethod
    def from_value(cls, value: Any) -> "SlurmPlacement | None":
        """The record's ``"slurm"`` object; None when it is absent or names no job."""
        if not isinstance(value, dict) or not value.get("job_id"):
            return None
        known = {key: str(value[key]) for key in _SLURM_FROM_ENV if value.get(key) not in (None, "")}
        return cls(**known)

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


@dataclass(frozen=True)
class RunDirId:
    """The run directory's identity as the trainer's host sees it: ``(st_dev, st_ino)``. On
    that host it names the directory however it is spelled; elsewhere the device number
    means nothing (each host numbers its own mounts)."""

    dev: int
    ino: int

    @classmethod
    def of_fd(cls, fd: int) -> "RunDirId":
        st = os.fstat(fd)
        return cls(st.st_dev, st.st_ino)

    @classmethod
    def from_value(cls, value: Any) -> "RunDirId | None":
        if not isinstance(value, dict):
            return None
        dev, ino = _int_or_none(value.get("dev")), _int_or_none(value.get("ino"))
        if dev is None or ino is None:
            return None
        return cls(dev, ino)

    def to_dict(self) -> dict[str, int]:
        return {"dev": self.dev, "ino": self.ino}


@dataclass(frozen=True)
class ProcessStart:
    """When a live process started, in the stamps a record carries."""

    create_time: float
    start_ticks: int | None
    boot_id: str | None


def read_boot_id() -> str | None:
    try:
        with open(BOOT_ID_PATH, "rb") as fh:
            text = fh.read(64).decode("ascii", "replace").strip()
    except OSError:
        return None
    return text or None


def read_start_ticks(pid: int) -> int | None:
    """``/proc/PID/stat`` field 22: the process's start in clock ticks since boot."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read(4096)
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces or ")": fields after
    # it are counted from its last ")", the first of them being field 3.
    rest = stat[stat.rfind(b")") + 1:].split()
    try:
        return int(rest[22 - 3])
    except (IndexError, ValueError):
        return None


def process_start(proc: psutil.Process) -> ProcessStart:
    """Raises psutil's errors (the process is gone, or not ours to inspect)."""
    return ProcessStart(proc.create_time(), read_start_ticks(proc.pid), read_boot_id())


@dataclass(frozen=True)
class TrainerRecord:
    """The content of ``.trainer.json``."""

    pid: int
    create_time: float
    host: str
    argv: list[str]
    started: float
    start_ticks: int | None = None
    boot_id: str | None = None
    # Under torchrun the record names rank 0's worker, with its launcher (the agent).
    rank: int | None = None
    world_size: int | None = None
    launcher_pid: int | None = None
    slurm: SlurmPlacement | None = None
    run_dir: RunDirId | None = None       # the directory it trains, as its host sees it
    # How it takes a checkpoint request: None, by SIGUSR1 (and the request file when it has
    # several processes); REQUESTS_BY_FILE, only through the request file (its SIGUSR1 is a
    # framework's own: Lightning's SLURM save-and-requeue).
    checkpoint_requests: str | None = None
    # The launch (job) it belongs to: a run API job's launch_key (rundir.job), the key its other ranks
    # join by; andrea-train's random launch id. Every rank's record carries it too (rundir/ranks.py):
    # records of an earlier launch of the same directory are never read as this one's.
    launch: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)     # another writer's keys, kept as they came

    @classmethod
    def for_this_process(cls, **fields: Any) -> "TrainerRecord":
        proc = psutil.Process()
        start = process_start(proc)
        return cls(pid=proc.pid, create_time=start.create_time, host=socket.gethostname(), argv=proc.cmdline(),
                   started=time.time(), start_ticks=start.start_ticks, boot_id=start.boot_id, **fields)

    def on_this_host(self) -> bool:
        """Recorded by a process of this host and this boot: its pid names a process of this
        kernel. Another host name, or (where both are known) another boot id, is elsewhere."""
        if self.host != socket.gethostname():
            return False
        here = read_boot_id()
        return self.boot_id is None or here is None or self.boot_id == here

    @property
    def distributed(self) -> bool:
        return (self.world_size or 1) > 1

    @property
    def requests_by_file(self) -> bool:
        """Whether the console asks it for a checkpoint through ``.checkpoint_request.json``
        rather than a SIGUSR1: a trainer of several processes, or one whose SIGUSR1 means
        something else."""
        return self.distributed or self.checkpoint_requests == REQUESTS_BY_FILE

    def is_process(self, start: ProcessStart) -> bool:
        """Whether a live process that started at ``start`` is the one this record names
        (the pid being the same): by ticks since boot and boot id where both sides have them,
        immune to a stepped clock; else by ``create_time``."""
        if self.start_ticks is not None and self.boot_id and start.start_ticks is not None and start.boot_id:
            return self.start_ticks == start.start_ticks and self.boot_id == start.boot_id
        return abs(start.create_time - self.create_time) <= CREATE_TIME_TOLERANCE

    def same_trainer(self, other: "TrainerRecord | None") -> bool:
        """Whether ``other`` (read again later) names the same process as this record."""
        return other is not None and (other.pid, other.host, other.start_ticks, other.boot_id, other.create_time) == \
            (self.pid, self.host, self.start_ticks, self.boot_id, self.create_time)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = dict(self.extra)
        data.update(pid=self.pid, create_time=self.create_time, host=self.host, argv=list(self.argv),
                    started=self.started)
        optional = {"start_ticks": self.start_ticks, "boot_id": self.boot_id, "rank": self.rank,
                    "world_size": self.world_size, "launcher_pid": self.launcher_pid,
                    "slurm": self.slurm.to_dict() if self.slurm else None,
                    "run_dir": self.run_dir.to_dict() if self.run_dir else None, "launch": self.launch,
                    "checkpoint_requests": self.checkpoint_requests}
        data.update({key: value for key, value in optional.items() if value is not None})
        return data


_OPTIONAL_INTS = ("start_ticks", "rank", "world_size", "launcher_pid")
_TYPED_KEYS = frozenset(RECORD_KEYS) | frozenset(_OPTIONAL_INTS) | {"boot_id", "slurm", "run_dir", "launch",
                                                                   "checkpoint_requests"}


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def parse_trainer_record(data: dict[str, Any]) -> tuple[TrainerRecord | None, str | None]:
    """A decoded ``.trainer.json`` object as ``(record, None)`` or ``(None, reason)``. An
    optional field of the wrong type is dropped (the check it serves falls back to the
    required fields); a required one of the wrong type refuses the record."""
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
    boot_id, launch, requests = data.get("boot_id"), data.get("launch"), data.get("checkpoint_requests")
    return TrainerRecord(pid=pid, create_time=float(ctime), host=host, argv=argv, started=float(started),
                         boot_id=boot_id if isinstance(boot_id, str) and boot_id else None,
                         slurm=SlurmPlacement.from_value(data.get("slurm")),
                         run_dir=RunDirId.from_value(data.get("run_dir")),
                         launch=launch if isinstance(launch, str) and launch else None,
                         checkpoint_requests=requests if requests == REQUESTS_BY_FILE else None,
                         extra={k: v for k, v in data.items() if k not in _TYPED_KEYS},
                         **{key: _int_or_none(data.get(key)) for key in _OPTIONAL_INTS}), None


def read_trainer_record(run_dir: str | os.PathLike[str]) -> tuple[TrainerRecord | None, str | None]:
    """``(record, None)``, ``(None, None)`` when there is none, or ``(None, reason)``; never raises."""
    read = read_json_object(Path(run_dir) / TRAINER_JSON, PID_RECORD_MAX)
    if read.missing:
        return None, None
    if not read.ok or read.value is None:
        return None, read.error
    return parse_trainer_record(read.value)


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
