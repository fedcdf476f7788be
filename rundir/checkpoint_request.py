"""``.checkpoint_request.json``: a checkpoint asked for through the run directory.

A SIGUSR1 reaches one process on one host. A trainer of several processes (torchrun, one
node or several) is asked for a checkpoint through a file instead: any console that can
write the run directory, on any node, writes the request (atomically); the trainer's
rank 0 looks for it at its step boundaries (at most every :data:`POLL_S`), removes it, and
treats it as a SIGUSR1: the ranks agree on the step, rank 0 writes the checkpoint. So a
request is taken once, by the one process that writes checkpoints, whichever process
and host the console could reach, and however the job was launched.

A request names the trainer it is for (the pid record's identity: pid, host, start
stamps). Rank 0 takes only a request addressed to itself; one addressed to another
trainer (left by a console whose trainer stopped before it answered) or one it cannot
read is removed and said, never answered. Something at the request's path that is not a
regular file (a directory, a FIFO, a symlink: a console only ever writes a regular one) is
never opened nor removed: it is said once and left alone until it changes, and so is a
request that cannot be removed (:attr:`TakenRequest.left`). Writing a request signals
nothing: it only asks a trainer that looks for it.
"""

from __future__ import annotations

import os
import socket
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from .atomic import atomic_write_json
from .layout import CHECKPOINT_REQUEST
from .safe_read import file_kind, read_json_object
from .text import printable
from .trainer_record import TrainerRecord

VERSION = 1
REQUEST_MAX = 16 << 10   # a request is a few hundred bytes; a hostile one costs no memory
POLL_S = 0.1          # rank 0 looks at most this often (one stat; on a shared filesystem, a round trip)
_IDENTITY = ("pid", "host", "start_ticks", "boot_id", "create_time")


@dataclass(frozen=True)
class CheckpointRequest:
    """A console's request: when, from where, and the trainer it is for."""

    requested_at: float
    host: str                       # the console's host
    pid: int                        # the console's pid
    trainer: dict[str, object]      # the addressed trainer's identity (pid record fields)

    def describe(self) -> str:
        return f"console pid {self.pid} on {printable(self.host, 60)}"


@dataclass(frozen=True)
class TakenRequest:
    """What rank 0 found: ``answer`` True for a request to checkpoint now; else ``note``
    says what was removed and why (a stale or unreadable request)."""

    answer: bool
    request: CheckpointRequest | None = None
    note: str = ""
    # What was left in place, not taken (type, device, inode, mtime): the same again next
    # time is the same thing, said already; None when nothing was left.
    left: tuple[int, int, int, int] | None = None


def request_path(run_dir: str | os.PathLike[str]) -> Path:
    return Path(run_dir) / CHECKPOINT_REQUEST


def _identity(record: TrainerRecord) -> dict[str, object]:
    return {key: getattr(record, key) for key in _IDENTITY}


def write_request(run_dir: str | os.PathLike[str], record: TrainerRecord) -> Path:
    """Ask the trainer ``record`` names for a checkpoint; raises OSError when the run
    directory cannot be written."""
    path = request_path(run_dir)
    atomic_write_json(path, {"version": VERSION, "requested_at": time.time(), "host": socket.gethostname(),
                             "pid": os.getpid(), "trainer": _identity(record)})
    return path


def _parse(value: dict[str, object]) -> tuple[CheckpointRequest | None, str]:
    trainer, at, host, pid = value.get("trainer"), value.get("requested_at"), value.get("host"), value.get("pid")
    if not isinstance(trainer, dict) or not isinstance(at, (int, float)) or isinstance(at, bool) or \
            not isinstance(host, str) or not isinstance(pid, int) or isinstance(pid, bool):
        return None, f"{CHECKPOINT_REQUEST}: not a checkpoint request (trainer, requested_at, host, pid)"
    return CheckpointRequest(float(at), host, pid, trainer), ""


def take_request(run_dir: str | os.PathLike[str], record: TrainerRecord) -> TakenRequest | None:
    """Rank 0, at a step boundary: the request in ``run_dir``, removed (taken once). None when
    there is none. Never raises."""
    path = request_path(run_dir)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as err:                # the directory cannot be searched: said once while the error lasts
        return TakenRequest(False, note=f"{CHECKPOINT_REQUEST} cannot be looked at ({err}): not answered",
                            left=(0, err.errno or 0, 0, 0))
    left = (stat.S_IFMT(st.st_mode), st.st_dev, st.st_ino, st.st_mtime_ns)
    if not stat.S_ISREG(st.st_mode):
        kind = "a symbolic link" if stat.S_ISLNK(st.st_mode) else file_kind(st.st_mode)
        return TakenRequest(False, note=f"{CHECKPOINT_REQUEST} is {kind}, not a request: left alone", left=left)
    read = read_json_object(path, REQUEST_MAX)
    if read.missing:
        return None
    try:
        path.unlink()
    except FileNotFoundError:
        return None                       # taken by another reader: not ours to answer
    except OSError as err:
        return TakenRequest(False, note=f"{CHECKPOINT_REQUEST} could not be removed ({err}): not answered",
                            left=left)
    if not read.ok or read.value is None:
        return TakenRequest(False, note=f"removed an unreadable {CHECKPOINT_REQUEST}: {read.error}")
    request, why = _parse(read.value)
    if request is None:
        return TakenRequest(False, note=f"removed {why}")
    if request.trainer != _identity(record):
        who = printable(f"pid {request.trainer.get('pid')} on {request.trainer.get('host')}", 80)
        return TakenRequest(False, request, f"removed a checkpoint request from {request.describe()} addressed to "
                                            f"another trainer ({who}), not answered")
    return TakenRequest(True, request)
