"""Operating the trainer: launch it detached, signal it (verified only), wait for the effect.

Shared by the CLI (``--start``, ``--checkpoint``, ``--stop``) and the dashboard's keys.
Nothing here ever signals a process that :func:`rundir.verify_trainer` did not
verify: :func:`rundir.signal_trainer` checks again right before sending. A wait for a
checkpoint (:func:`wait_for_checkpoint`) is a poll that hands a look from the files to the
one rule of waiting, :class:`console.read.landing.RequestWait`, which the dashboard's reads
drive too: what landed, and when the wait ends without it, are decided there, not here.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from rundir import (
    CheckpointInfo,
    CheckpointStamp,
    ConfigError,
    Verification,
    checkpoint_stamps,
    latest_resumable,
    load_run_config,
    newest_complete_since,
    signal_trainer,
    verify_trainer,
)
from rundir.history import read_history_tail
from rundir.identity import run_lock_holder
from rundir.layout import (
    CHECKPOINT_REQUEST,
    EVENT_STOP,
    LOCK_FILE,
    LOCK_OWNER_FILE,
    LOSS_JSON,
    RUN_TOML,
    TRAINER_LOG,
    is_error_stop,
)
from rundir.process import trainer_alive
from rundir.run_lock import live_lock_owner
from rundir.text import printable

from .. import launch_environment
from ..model.checkpoint_wait import CheckpointWait, WaitEnd
from ..read.landing import AwaitedCheckpoint, ExternalSince, FilesLook, RequestWait

POLL_S = 0.1
SLURM_POLL_S = 1.0
# The trainers this process started that have not been seen to exit (see reap_children).
_children: list[subprocess.Popen] = []
_children_lock = threading.Lock()


def reap_children() -> None:
    """Wait for (reap) every trainer this process started that has exited, whoever stopped
    it: one the console started (``--start``, the pivot's restart) must not stay a zombie
    until the console quits. The dashboard calls this at every tick; no thread of its own
    (the history prefetch forks only while the process has a single thread). An exit code
    stays readable with ``child.poll()``."""
    with _children_lock:
        _children[:] = [c for c in _children if c.poll() is None]     # poll() reaps an exited child


@dataclass(frozen=True)
class SignalResult:
    """What sending a signal did: ``ok`` False means nothing was sent, ``message`` says why."""

    ok: bool
    message: str
    verification: Verification
    sent_at: float
    baseline: dict[str, CheckpointStamp] = field(default_factory=dict)    # the checkpoints before the signal


def trainer_executable() -> list[str]:
    """``andrea-train`` beside this interpreter, else on PATH, else ``python -m trainer``."""
    sibling = Path(sys.executable).with_name("andrea-train")
    if sibling.exists():
        return [str(sibling)]
    found = shutil.which("andrea-train")
    return [found] if found else [sys.executable, "-m", "trainer"]


def launch_command(run_dir: str | os.PathLike[str], preset: str | None = None,
                   extra_args: Sequence[str] = ()) -> list[str]:
    """run.toml's ``run.launch`` when set (``{run_dir}`` is substituted), else ``andrea-train RUN_DIR``;
    ``--preset`` is passed through when given, then ``extra_args`` (the pivot's ``--resume``)."""
    run_dir = str(run_dir)
    launch: list[str] = []
    try:
        launch = list(load_run_config(run_dir).run.launch)
    except ConfigError:
        pass
    cmd = [a.replace("{run_dir}", run_dir) for a in launch] if launch else [*trainer_executable(), run_dir]
    if preset:
        cmd += ["--preset", preset]
    return [*cmd, *extra_args]


@dataclass(frozen=True)
class Launch:
    """A started trainer: a local ``child`` process, or a SLURM ``job_id`` (submitted with sbatch)."""

    command: list[str]
    child: subprocess.Popen | None = None
    job_id: str | None = None

    def describe(self) -> str:
        return f"submitted SLURM job {self.job_id}" if self.job_id else f"started pid {self.child.pid}"


def is_sbatch(cmd: Sequence[str]) -> bool:
    return bool(cmd) and Path(cmd[0]).name == "sbatch"


def sbatch_command(run_dir: str | os.PathLike[str], preset: str | None = None, extra_args: Sequence[str] = (),
                   sbatch_args: Sequence[str] = ()) -> list[str]:
    """``sbatch`` for the trainer as a batch job of its own: named ``andrea:<run name>``, in the
    run directory, its output appended to ``trainer.log``, the batch script ``exec``-ing the
    trainer (so that ``scancel --batch`` reaches it); ``sbatch_args`` (``--time``, ``--gres``,
    ``--partition``...) go to sbatch."""
    run = Path(run_dir).resolve()
    trainer = [*trainer_executable(), str(run), *(["--preset", preset] if preset else []), *extra_args]
    return ["sbatch", "--parsable", f"--job-name=andrea:{run.name}", f"--chdir={run}", f"--output={run / TRAINER_LOG}",
            "--open-mode=append", *sbatch_args, f"--wrap=exec {shlex.join(trainer)}"]


class LaunchRefused(OSError):
    """Nothing was launched: a trainer holds the run's lock, or run.toml's launch command was
    not confirmed."""


def untrusted_launch(run_dir: str | os.PathLike[str]) -> str | None:
    """Why run.toml's ``run.launch`` must be confirmed before it runs, or None. Operating a run
    directory means trusting its run.toml: its launch command runs as whoever starts the
    trainer. One that another user owns, or that anyone may write, is shown and asked about."""
    path = Path(run_dir) / RUN_TOML
    try:
        if not load_run_config(run_dir).run.launch:
            return None
        st = os.stat(path)
    except (ConfigError, OSError):
        return None                         # no launch command: andrea-train itself runs
    if st.st_uid != os.getuid():
        return f"{RUN_TOML} belongs to uid {st.st_uid}, not to you (uid {os.getuid()})"
    if st.st_mode & 0o002:
        return f"{RUN_TOML} may be written by anyone (mode {st.st_mode & 0o777:o})"
    return None


def start_trainer(run_dir: str | os.PathLike[str], preset: str | None = None, extra_args: Sequence[str] = (),
                  sbatch_args: Sequence[str] | None = None,
                  confirm_launch: Callable[[str], bool] | None = None) -> Launch:
    """Launch the trainer so that the console quitting never stops training: detached in its
    own session, stdout and stderr appended to ``RUN_DIR/trainer.log``; or, with
    ``sbatch_args`` (``--start --slurm``) or a ``run.launch`` that is an sbatch command line,
    submitted as a SLURM job (raises ``OSError`` naming sbatch's complaint).

    Raises :class:`LaunchRefused` when a trainer here holds the run's lock (a second one
    would only be refused by it), or when run.toml's launch command is untrusted
    (:func:`untrusted_launch`) and ``confirm_launch``, shown the command, does not say yes."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    holder = run_lock_holder(run_dir)
    if holder is not None:
        raise LaunchRefused(f"a trainer (pid {holder}) holds {run_dir / LOCK_FILE}: not starting a second one")
    owner = live_lock_owner(run_dir)
    if owner is not None:
        raise LaunchRefused(f"a trainer ({owner.describe()}) holds {run_dir / LOCK_OWNER_FILE}: "
                            "not starting a second one")
    cmd = sbatch_command(run_dir, preset, extra_args, sbatch_args) if sbatch_args is not None \
        else launch_command(run_dir, preset, extra_args)
    if sbatch_args is None and (why := untrusted_launch(run_dir)) is not None:
        question = f"{why}; run its launch command `{shlex.join(cmd)}`?"
        if confirm_launch is None or not confirm_launch(question):
            raise LaunchRefused(f"not launched: {why}, and its launch command `{shlex.join(cmd)}` was not confirmed")
    with open(run_dir / TRAINER_LOG, "ab") as log:
        log.write(f"# {time.strftime('%Y-%m-%d %H:%M:%S')} andrea-console --start: {shlex.join(cmd)}\n".encode())
        log.flush()
        if not is_sbatch(cmd):
            child = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True, close_fds=True, env=launch_environment())
            with _children_lock:
                _children.append(child)
            return Launch(cmd, child=child)
    if "--parsable" not in cmd:
        cmd = [cmd[0], "--parsable", *cmd[1:]]
    r = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120,
                       env=launch_environment())       # sbatch hands the job its environment
    if r.returncode != 0:
        raise OSError(f"sbatch refused: {(r.stderr or r.stdout).strip()}")
    return Launch(cmd, job_id=r.stdout.strip().split(";")[0])


def send(run_dir: str | os.PathLike[str], sig: signal.Signals,
         baseline: dict[str, CheckpointStamp] | None = None) -> SignalResult:
    """Verify, then signal. Never signals an unverified process. ``baseline`` is the
    checkpoints before the signal (taken now when not given)."""
    run_dir = Path(run_dir)
    baseline = checkpoint_stamps(run_dir) if baseline is None else baseline
    sent_at = time.time()
    v = signal_trainer(run_dir, sig)
    name = signal.Signals(sig).name
    if v.requested:
        assert v.record is not None
        how = "not verifiable from this host" if v.elsewhere else v.reason
        whom = f"rank 0 of {v.record.world_size}" if v.record.distributed else "the trainer"
        return SignalResult(True, f"checkpoint requested from {whom} (pid {v.record.pid} on "
                                  f"{printable(v.record.host, 60)}; {how}) through {CHECKPOINT_REQUEST}", v, sent_at,
                            baseline)
    if not v.ok:
        return SignalResult(False, f"{name} not sent: {refusal(v)}", v, sent_at, baseline)
    assert v.record is not None
    where = f" on {v.record.host}, through SLURM job {v.job.job_id}" if v.job is not None else ""
    return SignalResult(True, f"{name} sent to trainer pid {v.record.pid}{where}", v, sent_at, baseline)


def refusal(v: Verification) -> str:
    """Why there is nothing verified to signal, in words an operator can act on."""
    if v.state == "stopped":
        return "no trainer is running for this run directory (no .trainer.json)"
    return {"stale": "the .trainer.json record is stale: ", "unverified": "the recorded process failed verification: ",
            "remote": "the trainer runs on another host and is no SLURM job to signal through (stop it there): ",
            "unreadable": "the .trainer.json record is unreadable: "}.get(v.state, "") + v.reason


def wait_for_checkpoint(run_dir: str | os.PathLike[str], result: SignalResult, timeout: float,
                        cancelled: Callable[[], bool] = lambda: False) -> CheckpointWait:
    """After a SIGUSR1 (the overview's ``c`` on another run, the command line's
    ``--checkpoint``, the pivot's first step): the poll that drives the one rule of waiting
    (:class:`console.read.landing.RequestWait`), a look from the files every ``POLL_S``,
    until the checkpoint lands, the trainer exits or ``timeout`` passes."""
    run_dir = Path(run_dir)
    record = result.verification.record
    request = AwaitedCheckpoint(result.sent_at, result.baseline, record.pid if record is not None else None,
                                timeout)
    wait, look, alive = RequestWait(request), FilesLook(run_dir, request), _Liveness(run_dir, result.verification)
    started = time.monotonic()
    while not cancelled():
        waited = time.monotonic() - started
        # The trainer first, then the files: the look that finds it gone has read what it wrote before it went.
        pid, state = alive.seen()
        end = wait.see(look(pid, state, waited))
        if end is not None:
            return end
        time.sleep(POLL_S)
    return CheckpointWait(WaitEnd.CANCELLED, pid=request.pid)


class _Liveness:
    """Whether the verified trainer still runs, asked at most every ``SLURM_POLL_S`` when the
    answer comes from the scheduler, or from the record, lock file and run.toml of a trainer on
    another host (its heartbeat's bound is minutes); a local pid is asked every ``POLL_S``."""

    def __init__(self, run_dir: Path, verification: Verification):
        self.run_dir, self.verification = run_dir, verification
        self.every = SLURM_POLL_S if verification.via_slurm or verification.elsewhere else 0.0
        self.asked, self.answer = 0.0, True

    def __call__(self) -> bool:
        if time.monotonic() - self.asked >= self.every:
            self.asked, self.answer = time.monotonic(), trainer_alive(self.run_dir, self.verification)
        return self.answer

    def seen(self) -> tuple[int | None, str]:
        """The trainer as the poll sees it, in the words :func:`console.read.landing.trainer_gone`
        reads the dashboard's in: the verified one while it runs (``running``), or while its
        record stands when it is on another host with no scheduler to ask (``remote``:
        :func:`rundir.process.trainer_alive` can tell no more of it); else none."""
        record = self.verification.record
        if record is None or not self():
            return None, "stopped"
        return record.pid, "remote" if self.verification.elsewhere else "running"


def wait_for_exit(run_dir: str | os.PathLike[str], result: SignalResult, timeout: float,
                  child: subprocess.Popen | None = None,
                  cancelled: Callable[[], bool] = lambda: False) -> tuple[bool, str]:
    """After a SIGTERM: wait until the trainer's process is gone. ``(exited, description)``:
    the exit code when the trainer is our child, whether it removed its record, and the
    final checkpoint."""
    run_dir = Path(run_dir)
    record = result.verification.record
    assert record is not None
    deadline = time.monotonic() + timeout
    alive = _Liveness(run_dir, result.verification)
    while time.monotonic() < deadline and not cancelled():
        if child is not None and child.poll() is not None:
            break
        if child is None and not alive():
            break
        time.sleep(POLL_S)
    else:
        return False, f"trainer pid {record.pid} still running after {timeout:g} s"
    parts = [f"trainer pid {record.pid} exited"]
    if child is not None:
        parts[0] += f" with code {child.returncode}"
    after, failed = verify_trainer(run_dir), stop_error(run_dir, result)
    if failed is not None:
        parts[0] += f" with an error ({printable(failed)}; see trainer.log)"
    else:
        parts[0] += " cleanly (it removed .trainer.json)" if after.state == "stopped" else \
            f", leaving a {after.state} record"
    final = newest_complete_since(run_dir, result.baseline)
    if final is not None:
        parts.append(f"final checkpoint {final.path}")
    elif (final := stop_checkpoint(run_dir, result)) is not None:
        parts.append(f"final checkpoint {final.path} (already written at that step)")
    elif (own := ExternalSince(run_dir, result.sent_at)()) is not None:
        parts.append(f"final checkpoint {printable(own.path)} (external: the trainer's own format)")
    else:
        parts.append("no new checkpoint was written")
    return True, "; ".join(parts)


def stop_error(run_dir: str | os.PathLike[str], result: SignalResult) -> str | None:
    """The reason of the trainer's ``stop`` event written after the signal when it says the
    trainer failed (``error: ...``: its stop or its checkpoint failed in the framework), else None."""
    tail = read_history_tail(Path(run_dir) / LOSS_JSON)
    stop = next((e for e in reversed(tail.events) if e.event == EVENT_STOP), None)
    if stop is None or (stop.time or 0.0) < result.sent_at - 1.0:         # 1 s: two hosts' clocks
        return None
    reason = stop.data.get("reason")
    return reason if is_error_stop(reason) else None


def stop_checkpoint(run_dir: str | os.PathLike[str], result: SignalResult) -> CheckpointInfo | None:
    """The complete checkpoint a stop left: one newer than those before the signal, or the
    newest one when the trainer's own ``stop`` event (after the signal) is at its step. A
    trainer writes no second checkpoint at a step that has one: a stop that comes while the
    step's checkpoint has just been written for an earlier request (a pivot's audit) stops
    at that step, and that checkpoint is the final one."""
    final = newest_complete_since(run_dir, result.baseline)
    if final is not None:
        return final
    newest = latest_resumable(run_dir)
    if newest is None or newest.status != "complete":
        return None
    tail = read_history_tail(Path(run_dir) / LOSS_JSON)
    stop = next((e for e in reversed(tail.events) if e.event == EVENT_STOP), None)
    if stop is None or stop.step != newest.step or stop.data.get("reason") != "signal" or \
            (stop.time or 0.0) < result.sent_at - 1.0:          # 1 s: two hosts' clocks
        return None
    return newest
