"""``.trainer.json`` and the run's lock: who trains a run directory, and whether it may be signalled.

The trainer holds the run's lock for its lifetime (:mod:`rundir.run_lock`: a ``flock`` on
``.lock``, or where flock is refused a ``.lock-owner.json`` with a heartbeat; a second
trainer refuses to start) and writes ``.trainer.json`` naming itself. Before anyone
signals that process, :func:`verify_trainer` checks that the record is whole (every key
of the pid record, docs/contract.md#the-lock-and-the-trainers-identity), that it names this
host (host name and boot id: a trainer on another host is never looked for among this
kernel's pids), that the pid is alive and
started when the record says (:meth:`TrainerRecord.is_process`: a reused pid is refused),
that it is this user's (root may operate any user's trainer, and says so), that it holds
this very directory open (by its identity, however
either side spells the path) and that it holds the run's lock (:mod:`rundir.identity`): a
forged record naming any other process is refused.

A trainer recorded on another host is verified through SLURM when the record names a job;
else it is ``remote``: shown from its record (and its lock file's heartbeat, where flock is
refused), asked for a checkpoint through ``.checkpoint_request.json``, and never signalled.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import psutil

from .checkpoint_request import write_request
from .config import ConfigError
from .identity import holds_run_lock, trainer_directory
from .run_lock import RunLock, RunLockedError, configured_stale_after, heartbeat_age, lock_owner_state, read_lock_owner
from .slurm import JobInfo, check_job, query_job, scancel_command
from .text import printable
from .trainer_record import (
    SlurmPlacement,
    TrainerRecord,
    process_start,
    read_trainer_record,
    remove_trainer_record,
    write_trainer_record,
)

__all__ = ["RunLock", "RunLockedError", "SlurmPlacement", "TrainerRecord", "Verification", "read_trainer_record",
           "remove_trainer_record", "signal_trainer", "trainer_alive", "verify_trainer", "write_trainer_record"]


# "remote": recorded on another host (not a SLURM job to ask): shown, asked through the
# request file, never signalled and never looked for among this host's processes.
TrainerState = Literal["running", "stopped", "stale", "unverified", "unreadable", "remote"]


@dataclass(frozen=True)
class Verification:
    """What :func:`verify_trainer` found. Only ``state == "running"`` may be signalled."""

    state: TrainerState
    reason: str
    record: TrainerRecord | None = None
    job: JobInfo | None = None          # verified through the scheduler: the trainer's SLURM job
    elsewhere: bool = False             # the record names another host (or boot), and no scheduler to ask
    requested: bool = False             # signal_trainer wrote .checkpoint_request.json instead of a SIGUSR1

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


def verify_trainer(run_dir: str | os.PathLike[str]) -> Verification:
    """Check ``.trainer.json`` against the live process table; never raises.

    A trainer that exits cleanly removes its record, then releases the run's lock: a check
    that read the record just before may find the process gone or the lock free. When a
    check fails, the record is read again, and a record gone since means a trainer that
    stopped, not a stale record or a process that is not the trainer."""
    run_dir = Path(run_dir)
    verification = _verify_recorded(run_dir)
    if verification.state in ("stale", "unverified") and verification.record is not None \
            and not verification.elsewhere:
        again, error = read_trainer_record(run_dir)
        if again is None and not error:
            return Verification("stopped", "no trainer is recorded: there is no .trainer.json")
    return verification


def _verify_recorded(run_dir: Path) -> Verification:
    record, error = read_trainer_record(run_dir)
    if error:
        return Verification("unreadable", error)
    if record is None:
        return Verification("stopped", "no trainer is recorded: there is no .trainer.json")
    if not record.on_this_host():
        if record.slurm is not None:
            return _verify_through_slurm(run_dir, record, record.slurm)
        return _verify_remote(run_dir, record)
    if record.pid == 1:
        return Verification("unverified", "the record names pid 1 (init), which is never a trainer", record)
    if record.pid == os.getpid():
        return Verification("unverified", "the record names this console's own pid", record)
    try:
        proc = psutil.Process(record.pid)
        start = process_start(proc)
        cmdline = proc.cmdline()
        uid = proc.uids().real
        if proc.status() == psutil.STATUS_ZOMBIE:
            return Verification("stale", f"pid {record.pid} has exited (zombie)", record)
    except psutil.NoSuchProcess:
        return Verification("stale", f"pid {record.pid} is not running: the record is stale", record)
    except psutil.AccessDenied:
        return Verification("unverified", f"pid {record.pid} cannot be inspected (access denied)", record)
    if not record.is_process(start):
        return Verification("stale", f"pid {record.pid} was reused by another process (its start time differs)", record)
    if uid != os.getuid() and os.getuid() != 0:
        return Verification("unverified", f"pid {record.pid} belongs to {_user_name(uid)}, not to you", record)
    view, why = trainer_directory(record.pid, run_dir)
    if view is None:
        return Verification("unverified", f"{why}: {_shown(' '.join(cmdline))}", record)
    # Any program may train this directory (andrea-train, or a loop of the run API, rundir.open_run):
    # what proves it is its trainer is that it holds this very directory open and, below, its lock;
    # neither is a record's word.
    holds, why = holds_run_lock(record.pid, run_dir, view)
    if not holds:
        return Verification("unverified", why, record)
    if uid != os.getuid():
        # Root may operate anyone's trainer; it is said, never silent.
        return Verification("running", f"pid {record.pid} verified (it belongs to {_user_name(uid)}; "
                                       "this console runs as root)", record)
    return Verification("running", f"pid {record.pid} verified", record)


def _user_name(uid: int) -> str:
    try:
        import pwd
        return f"user {pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (KeyError, ImportError):
        return f"uid {uid}"


def _verify_remote(run_dir: Path, record: TrainerRecord) -> Verification:
    """A trainer recorded on another host (or before a reboot), with no scheduler to ask: its
    pid means nothing to this kernel. Where it holds a lock file, its heartbeat says whether it
    still runs; else its record stands until it is removed."""
    where = printable(record.host, 80)
    if record.host == socket.gethostname():
        where += " (another boot: this machine before a reboot, or another of the same name)"
    owner, mtime = read_lock_owner(run_dir)
    if owner is not None and mtime is not None and (owner.pid, owner.host, owner.boot_id) == \
            (record.pid, record.host, record.boot_id):
        try:
            bound = configured_stale_after(run_dir)
        except ConfigError as err:
            return Verification("unverified", str(err), record, elsewhere=True)
        state, why = lock_owner_state(owner, mtime, bound)
        if state == "stale":
            return Verification("stale", f"pid {record.pid} on {where}: {why}", record, elsewhere=True)
        if state == "ahead":
            return Verification("remote", f"pid {record.pid} on {where}: {why}; not examined from this host", record,
                                elsewhere=True)
        return Verification("remote", f"pid {record.pid} on {where}: its lock file's heartbeat "
                                      f"{max(heartbeat_age(owner, mtime), 0.0):.0f} s ago; not examined from this host",
                            record, elsewhere=True)
    return Verification("remote", f"pid {record.pid} on {where}: not examined from this host (no SLURM job to ask)",
                        record, elsewhere=True)


def _verify_through_slurm(run_dir: Path, record: TrainerRecord, placement: SlurmPlacement) -> Verification:
    """A trainer on another node, in a SLURM job: the scheduler vouches for it (the job is
    RUNNING, is this user's, runs on the recorded node and names this run directory)."""
    job, why = query_job(placement.job_id)
    if job is None:
        return Verification("unverified", f"SLURM job {printable(placement.job_id)}: {why}", record)
    problem = check_job(job, placement, run_dir)
    if problem is not None:
        state: TrainerState = "stale" if job.state not in ("RUNNING", "PENDING", "SUSPENDED", "") else "unverified"
        return Verification(state, problem, record)
    return Verification("running", f"pid {record.pid} on {printable(record.host)}, SLURM job {job.job_id} verified",
                        record, job)


def _is_live_process(record: TrainerRecord) -> bool:
    """The recorded pid runs here, is the process the record names, and has not exited."""
    try:
        proc = psutil.Process(record.pid)
        return record.is_process(process_start(proc)) and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def trainer_alive(run_dir: str | os.PathLike[str], verification: Verification) -> bool:
    """Whether the verified trainer still runs: its pid with the recorded start here; through
    SLURM, its record still in place and its job still RUNNING; on another host with no
    scheduler to ask, its record still in place and its lock file's heartbeat not stale."""
    record = verification.record
    if record is None:
        return False
    if not verification.via_slurm and not verification.elsewhere:
        return _is_live_process(record)
    now, _ = read_trainer_record(run_dir)
    if verification.elsewhere:
        # No process table or scheduler to ask: its record stays, and its lock file's heartbeat
        # (where it holds one) says whether it still runs, as verify_trainer judges it.
        return record.same_trainer(now) and _verify_remote(Path(run_dir), record).state == "remote"
    if not record.same_trainer(now):
        return False                         # a clean exit removes the record
    assert verification.job is not None      # via SLURM: neither here nor elsewhere
    job, _ = query_job(verification.job.job_id)
    return job is not None and job.state == "RUNNING"


def signal_trainer(run_dir: str | os.PathLike[str], sig: signal.Signals) -> Verification:
    """Send ``sig`` to the verified trainer of ``run_dir``; a process that fails verification
    is never signalled. Returns the verification (``ok`` False: nothing was sent). A trainer
    on another node, in a SLURM job, is signalled with ``scancel`` (see
    :func:`rundir.slurm.scancel_command`). A SIGUSR1 to a trainer of several processes, or to
    one whose record says it takes requests by file (its SIGUSR1 is a framework's), is a
    ``.checkpoint_request.json`` instead (``requested`` True), written once the trainer is
    verified, or when it runs on another host with no scheduler to ask (a request signals
    nothing; only the trainer the request names takes it)."""
    verification = verify_trainer(run_dir)
    record = verification.record
    by_file = record is not None and record.requests_by_file and (verification.ok or verification.elsewhere)
    if sig == signal.SIGUSR1 and record is not None and (by_file or verification.state == "remote"):
        # Several processes, maybe on several nodes, launched by whatever launcher, or a SIGUSR1
        # that means something else to it: rank 0 takes the request from the shared directory
        # (rundir/checkpoint_request.py).
        return _request_checkpoint(run_dir, verification)
    if not verification.ok:
        return verification
    assert record is not None
    if verification.via_slurm:
        assert record.slurm is not None and verification.job is not None
        command = scancel_command(record.slurm, signal.Signals(sig).name.removeprefix("SIG"))
        try:
            r = subprocess.run(command, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.SubprocessError) as err:
            return Verification("unverified", f"{' '.join(command)} failed: {err}", record)
        if r.returncode != 0:
            return Verification("unverified", f"{' '.join(command)} failed: {printable(r.stderr.strip())}", record)
        return verification
    try:
        # Checked again right before the signal, closing the window in which the pid could be reused.
        proc = psutil.Process(record.pid)
        if not record.is_process(process_start(proc)):
            return Verification("stale", "the trainer exited and its pid was reused", record)
        proc.send_signal(sig)
    except psutil.NoSuchProcess:
        return Verification("stale", f"pid {record.pid} exited before the signal", record)
    except psutil.AccessDenied:
        return Verification("unverified", f"not allowed to signal pid {record.pid}", record)
    return verification


def _request_checkpoint(run_dir: str | os.PathLike[str], verification: Verification) -> Verification:
    """Write ``.checkpoint_request.json`` for the recorded rank 0 (verified, or on another host
    with no scheduler to vouch for it: a request signals nothing, so it can still be asked)."""
    record = verification.record
    assert record is not None
    try:
        write_request(run_dir, record)
    except OSError as err:
        return Verification("unverified", f"the checkpoint request could not be written: {err}", record)
    return dataclasses.replace(verification, requested=True)
