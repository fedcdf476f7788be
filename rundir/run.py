"""The run API: any PyTorch training loop, operated by the console as ``andrea-train`` is.

    run = rundir.open_run("runs/x", config={"lr": 3e-4})
    run.log(step, loss=loss, lr=lr)
    if run.checkpoint_requested: torch.save(state, path); run.checkpoint_saved(step, path)
    if run.stop_requested: ...save, then leave the loop...
    run.finish()

:func:`open_run` does what ``andrea-train`` does to its run directory (docs/contract.md), through
the same code: it takes the run's lock (:class:`~rundir.process.RunLock`), installs the
trainer's flag-only signal handlers (SIGUSR1: checkpoint; SIGTERM, SIGINT: checkpoint and
stop; :mod:`rundir.signals`), writes ``.trainer.json`` (:mod:`rundir.trainer_record`),
holds the run directory open (how the console tells that a process of any name trains it:
:func:`rundir.identity.trainer_directory`), writes ``run.toml`` from the config
(``[config]``: :func:`rundir.config.engine_config_text`) and appends the history's lines and
events (:class:`~rundir.history.LossHistoryWriter`). A ``.checkpoint_request.json`` addressed
to it is taken as a SIGUSR1 is. Checkpoints stay in the trainer's own format; each one
reported is an ``external_checkpoint`` event (:mod:`rundir.external`).

In a job of several processes every rank opens the run (:mod:`rundir.job`): global rank 0
owns it as above; the others join as members once its record of their launch is there, and
write nothing. :meth:`Run.log` agrees the requests any rank received over the job's
process group, every K-th call (:data:`AGREE_EVERY_S`: one small all-reduce, started at one
point and waited for at the next), so every rank reads the same answer at the same step;
:meth:`Run.checkpoint_saved` is called by every rank, and rank 0 reports the
checkpoint once all have written their part.

Handlers only set flags: the loop reads :attr:`Run.checkpoint_requested` and
:attr:`Run.stop_requested` at its step boundary. A second Ctrl-C (SIGINT) while a stop is
pending interrupts at once (``KeyboardInterrupt``), for a loop that does not look.

Bad use is one :class:`RunError` with one line: a directory another trainer holds, a value
that is not a number, a step that goes back without :meth:`Run.resumed`, a checkpoint path
with nothing there, a call after :meth:`Run.finish`.
"""

from __future__ import annotations

import atexit
import dataclasses
import functools
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Mapping, TypeVar, cast

from .agreement import JobAgreement
from .external import saved_size
from .history import LossHistoryWriter, read_history_tail
from .job import (
    JOIN_TIMEOUT_S,
    JobError,
    all_max,
    group_ready,
    job_ranks,
    launch_key,
    torchrun_launcher,
    wait_for_owner,
)
from .layout import (
    CHECKPOINT_SIGNALS,
    EVENT_EXTERNAL_CHECKPOINT,
    EVENT_RESUME,
    EVENT_SIGNAL,
    EVENT_START,
    EVENT_STOP,
    LOSS_JSON,
    RUN_TOML,
    TRAINER_JSON,
    TRAINER_LOG,
    is_error_stop,
)
from .process import RunLock, RunLockedError
from .rank_heartbeat import RankHeartbeat
from .run_inputs import RunError, checked_step, metric_name, number, recorded_path, run_toml_text, text_path
from .run_inputs import shown as _shown
from .safe_read import open_for_append
from .signals import STOP_NAMES as _STOP_NAMES
from .signals import RequestWatch, SharedSignalFlags, SignalRequests
from .trainer_record import (
    REQUESTS_BY_FILE,
    RunDirId,
    SlurmPlacement,
    TrainerRecord,
    remove_trainer_record,
    write_trainer_record,
)

ENGINE = "rundir.open_run"          # the start event's "engine": who wrote the history
_FIELDS = ("loss", "lr", "grad_norm", "tokens")
_UNLOOKED = "signal (the loop did not look at run.stop_requested)"


def open_run(path: str | os.PathLike[str], config: Mapping[str, Any] | None = None,
             join_timeout: float = JOIN_TIMEOUT_S) -> "Run":
    """Start training ``path`` (created if needed) as its one trainer, or as one rank of a job
    of several processes (every rank calls it; rank 0 owns the directory, the others wait up to
    ``join_timeout`` seconds for it); see :class:`Run`."""
    return Run(path, config, join_timeout)


_Method = TypeVar("_Method", bound=Callable[..., Any])


def _serial(method: _Method) -> _Method:
    """One call of the run at a time: a call from another thread waits for the one under way, so
    the run's lines never interleave and its steps stay in order (docs/training.md)."""
    @functools.wraps(method)
    def serial(self: "Run", *args: Any, **kwargs: Any) -> Any:
        with self._mutex:
            return method(self, *args, **kwargs)
    return cast(_Method, serial)


class Run:
    """A run directory trained by this process (see the module's text). Use
    :func:`open_run`; also a context manager (``with rundir.open_run(...) as run:``), whose
    exit is :meth:`finish`.

    In a job of several processes every rank opens it: :attr:`rank` and :attr:`world_size`
    say where this process stands (:mod:`rundir.job`), :attr:`is_owner` whether it is global
    rank 0, the one that writes the run directory."""

    _last_step: int | None          # the history's newest step: set on opening (_start or _join)

    def __init__(self, path: str | os.PathLike[str], config: Mapping[str, Any] | None = None,
                 join_timeout: float = JOIN_TIMEOUT_S):
        if threading.current_thread() is not threading.main_thread():
            raise RunError("open_run: call it from the main thread (signal handlers can only be installed there)")
        try:
            self._ranks = job_ranks()
        except JobError as err:
            raise RunError(f"open_run: {err}") from None
        self.path = text_path("open_run", path)
        self._mutex = threading.RLock()         # one call at a time (_serial), re-entered by finish inside log
        self._pid = os.getpid()                 # the opener: a forked child touches nothing of the run
        self._failed_before = getattr(sys, "last_value", None)     # an interactive session's earlier error
        self._closed = False
        self._lost: str | None = None           # set by the lock's heartbeat when another trainer took the run
        self._requests = self._stop = self._checkpoint = 0      # taken, and taken when last saved
        self._stopping = False
        self._stop_read = False                 # stop_requested answered True since the stop was taken
        self._stop_taken_at = 0                 # the log() count when the stop was taken
        self._declined_at = -1                  # the log() count when checkpoint_requested last said no
        self._logs = 0
        self._loop_step: int | None = None      # the step agree() was told the loop is at
        self._step_record: dict[str, Any] | None = None     # the newest step line this process wrote
        self._beat: RankHeartbeat | None = None     # a job of several processes: this rank's record
        self._agreement = JobAgreement(self._ranks)     # several processes: the job's one decision
        self._dir_fd = self._log_fd = -1
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise RunError(f"open_run: cannot create {self.path}: {err.strerror}") from None
        if not self._ranks.owner:
            self._join(join_timeout)
            atexit.register(self._at_exit)      # the agreement in flight waited for, the handlers put back
            return
        text = run_toml_text(self.path, config)
        self._lock = RunLock(self.path, on_lost=self._lock_lost)
        try:
            self._lock.acquire()
        except RunLockedError as err:
            raise RunError(f"open_run: {err}") from None
        except OSError as err:                  # a full disk (no inode for the lock file), a read-only one
            raise RunError(f"open_run: cannot take the lock of {self.path}: {err.strerror or err}") from None
        self._signals = SharedSignalFlags()
        fresh = [self.path / name for name in (LOSS_JSON, TRAINER_LOG) if not os.path.lexists(self.path / name)]
        self._doing = "starting"
        try:
            self._start(text)
        except OSError as err:                  # a full disk, a read-only one: one line, nothing cut left
            self._release_quietly(fresh)
            raise RunError(f"open_run: cannot start the run in {self.path}: {self._doing}: "
                           f"{err.strerror or err}") from None
        except BaseException:
            self._release(remove_record=True)
            raise
        atexit.register(self._at_exit)
        self._start_beat()
        if self._ranks.distributed and group_ready():
            self._share_history_step()

    def _start_beat(self) -> None:
        """In a job of several processes, every rank's record and stacks watchdog
        (:mod:`rundir.rank_heartbeat`), as andrea-train's workers keep theirs."""
        ranks = self._ranks
        if ranks.distributed:
            self._beat = RankHeartbeat(self.path, ranks.rank, ranks.world_size, ranks.local_rank,
                                       launch_key(ranks)).start()

    def _share_history_step(self) -> None:
        """With the process group there: rank 0's history step at open, on every rank (one
        all-reduce, which is also where the members and rank 0 meet), so every rank refuses a
        step that goes back alike. Without it, a member reads the history's tail at its join,
        before rank 0 can log a step (its first run.log needs the group)."""
        mine = (self._last_step + 1 if self._last_step is not None else 0) if self._ranks.owner else 0
        shared = all_max([mine], self._ranks, "open_run")[0]
        self._last_step = shared - 1 if shared else None

    def _join(self, timeout: float) -> None:
        """A member (rank > 0): once rank 0 of this launch owns the directory, its history's
        step; it writes nothing, and takes signals into the job's agreement."""
        try:
            self.record = wait_for_owner(self.path, self._ranks, timeout)
        except JobError as err:
            raise RunError(f"open_run: {err}") from None
        self._signals = SharedSignalFlags().install()
        self._start_beat()
        if group_ready():
            self._share_history_step()
        else:
            tail = read_history_tail(self.path / LOSS_JSON)
            self._last_step = int(tail.step[-1]) if len(tail.step) else None

    @property
    def rank(self) -> int:
        """This process's global rank (0 with one process)."""
        return self._ranks.rank

    @property
    def world_size(self) -> int:
        """The number of processes of the job (1 with one process)."""
        return self._ranks.world_size

    @property
    def is_owner(self) -> bool:
        """Global rank 0: it holds the lock and writes the history, the events, ``.trainer.json``,
        ``run.toml`` and ``trainer.log``; the other ranks write none of them."""
        return self._ranks.owner

    def _start(self, config_text: str | None) -> None:
        # Held open for the run's lifetime: how the console verifies a trainer (rundir.identity),
        # whatever its command line says.
        self._dir_fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        tail = read_history_tail(self.path / LOSS_JSON)
        self._last_step = int(tail.step[-1]) if len(tail.step) else None
        self._doing = f"opening {LOSS_JSON}"
        self._history = LossHistoryWriter(self.path / LOSS_JSON)
        self._doing = f"opening {TRAINER_LOG}"
        self._log_fd = open_for_append(self.path / TRAINER_LOG)
        if config_text is not None:
            from .atomic import atomic_write_bytes
            self._doing = f"writing {RUN_TOML}"
            atomic_write_bytes(self.path / RUN_TOML, config_text.encode("utf-8"))
        self._signals.install()                 # before the record: a recorded trainer handles signals
        ranks = self._ranks
        job: dict[str, Any] = {"rank": 0, "world_size": ranks.world_size, "launcher_pid": torchrun_launcher(),
                               "launch": launch_key(ranks)} if ranks.distributed else {}
        self.record = TrainerRecord.for_this_process(run_dir=RunDirId.of_fd(self._dir_fd),
                                                     slurm=SlurmPlacement.from_env(), **job)
        self._doing = f"writing {TRAINER_JSON}"
        write_trainer_record(self.path, self.record)
        self._watch = RequestWatch(self.path, self.record, self._say)
        step = self._last_step or 0
        self._doing = f"writing the start event to {LOSS_JSON}"
        self._event(EVENT_START, step, f"start: pid {self.record.pid}, history at step {step}"
                    + (f", {ranks.world_size} processes" if ranks.distributed else ""), engine=ENGINE,
                    pid=self.record.pid, **({"world_size": ranks.world_size} if ranks.distributed else {}))

    # -- what the loop calls ---------------------------------------------------------
    @_serial
    def log(self, step: int, loss: Any = None, lr: Any = None, grad_norm: Any = None, tokens: Any = None,
            **more: Any) -> None:
        """A step line (docs/contract.md#lossjson-the-history): numbers only (``arm`` may be a string), and a
        step that never goes back unless :meth:`resumed` said where training went back to."""
        self._open("run.log")
        step = step if type(step) is int and 0 <= step < 2**63 else checked_step("run.log", step)
        last = self._last_step
        if last is not None and step < last:
            raise RunError(f"run.log: step {step} goes back (the history is at step {last}); call "
                           "run.resumed(step, path) when training resumes from an earlier checkpoint")
        record: dict[str, Any] = {"step": step}
        for key, value in zip(_FIELDS, (loss, lr, grad_norm, tokens)):
            if value is not None:
                record[key] = value if type(value) is float else number(key, value)
        for key, value in more.items():
            metric_name(key)
            if value is not None:
                record[key] = value if type(value) is float or key == "arm" and type(value) is str \
                    else number(key, value)
        tokens_value = record.get("tokens")
        if type(tokens_value) is float:
            if not tokens_value.is_integer():
                raise RunError(f"run.log: tokens = {tokens_value!r} is not a whole number")
            record["tokens"] = int(tokens_value)
        if step == last and self._step_record is not None and self._step_record["step"] == step:
            record = {**self._step_record, **record}        # the step's values in several calls: one line
        record["time"] = time.time()
        if self._ranks.owner:
            self._history.append(record)
        self._last_step, self._step_record = step, record
        self._logs += 1
        if self._beat is not None:
            self._beat.step_done(step)
        self._agree()

    @_serial
    def agree(self, step: int | None = None) -> None:
        """What :meth:`log` does after its line: take the job's decision (one process: what
        arrived; several: see the module's text), and end a run whose loop did not look at a
        stop. For a loop that decides at another point than its ``run.log``, every rank alike.
        ``step``: the step the loop is at, where it is past the one logged (a framework whose
        step ends before its log line): a request taken now is said at that step, the one its
        checkpoint will have."""
        self._open("run.agree")
        if step is not None:
            self._loop_step = checked_step("run.agree", step)
        self._agree()

    def _agree(self) -> None:
        ignored = self._stopping and not self._stop_read and self._logs > self._stop_taken_at
        if not self._ranks.distributed:
            if ignored:
                self._end_unlooked_stop()
            self._poll()
            return
        if not self._agreement.due():
            return
        answer = self._agreement.answer()
        if answer is not None:
            taken, unlooked = answer
            if unlooked:
                self._end_unlooked_stop()
            self._taken(taken)
        if self._ranks.owner:
            self._watch.poll(self._signals)
        try:
            self._agreement.send(self._signals.take(), ignored, self._logs)
        except JobError as err:
            raise RunError(str(err)) from None

    @property
    @_serial
    def checkpoint_requested(self) -> bool:
        """A checkpoint was asked for (SIGUSR1, the request file, or a stop) and not saved yet.
        With several processes: the job's decision at the last :meth:`log`, the same on every rank."""
        self._poll()
        wanted = self._requests > self._checkpoint
        if not wanted:
            self._declined_at = self._logs
        return wanted

    @property
    @_serial
    def stop_requested(self) -> bool:
        """SIGTERM or SIGINT arrived: save a checkpoint (:attr:`checkpoint_requested` says so
        until one is reported), then stop. With several processes: the job's decision at the
        last :meth:`log`, the same on every rank. One process: a stop taken by this read after
        :attr:`checkpoint_requested` said no at this step is said at the next step, with its
        checkpoint (a final look reads :attr:`checkpoint_requested` first)."""
        was_stopping = self._stopping
        self._poll()
        if self._stopping and not was_stopping and self._declined_at == self._logs:
            # The loop looked for a checkpoint at this step and was told no: a stop said now
            # would end it without the checkpoint a stop asks for (a SIGTERM between the two
            # reads did so). Its next step answers both, as the next log() would have taken it.
            self._stop_taken_at = self._logs + 1
            return False
        self._stop_read = self._stop_read or self._stopping
        return self._stopping

    @_serial
    def checkpoint_saved(self, step: int, path: str | os.PathLike[str], checksum: str | None = None) -> None:
        """A checkpoint in this trainer's own format (a file or a directory) is complete at
        ``path``: its ``external_checkpoint`` event, fsynced; it answers the requests taken so far.
        With several processes every rank calls it, at the same step, once its part is written:
        rank 0 reports the checkpoint once every rank has (one all-reduce)."""
        self._open("run.checkpoint_saved")
        step = checked_step("run.checkpoint_saved", step)
        if checksum is not None and not isinstance(checksum, str):
            raise RunError(f"run.checkpoint_saved: checksum {_shown(checksum)} is not a string")
        if self._ranks.distributed:
            try:
                high, low = all_max([step, -step], self._ranks, "run.checkpoint_saved")
            except JobError as err:
                raise RunError(str(err)) from None
            if high != -low:
                raise RunError(f"run.checkpoint_saved: the ranks report steps {-low} to {high}: call it at the same "
                               "step on every rank")
        answers = self._requests > self._checkpoint
        self._checkpoint = self._requests
        if not self._ranks.owner:
            return
        target = text_path("run.checkpoint_saved", path)
        try:
            size = saved_size(target)
        except OSError as err:
            raise RunError(f"run.checkpoint_saved: {target}: {err.strerror}") from None
        shown = recorded_path(self.path, target)
        fields: dict[str, Any] = {"path": shown, "size": size, "reason": "signal" if answers else "schedule"}
        if checksum is not None:
            fields["checksum"] = checksum
        if self._ranks.distributed:
            fields["world_size"] = self._ranks.world_size
        self._event(EVENT_EXTERNAL_CHECKPOINT, step, f"checkpoint {shown} at step {step} ({size:,} bytes)"
                    + (f", written by {self._ranks.world_size} processes" if self._ranks.distributed else "")
                    + (", as requested" if answers else ""), **fields)
        self._history.fsync()

    @_serial
    def resumed(self, step: int, path: str | os.PathLike[str] | None = None) -> None:
        """Training continues after ``step`` (restored from the checkpoint at ``path``): the
        ``resume`` event; the steps after it are logged again."""
        self._open("run.resumed")
        step = checked_step("run.resumed", step)
        if self._ranks.owner:
            shown = recorded_path(self.path, Path(path)) if path is not None else None
            rerun = {"from": step + 1, "to": self._last_step} if self._last_step is not None and \
                self._last_step > step else None
            self._event(EVENT_RESUME, step, f"resume from step {step}" + (f" ({shown})" if shown else ""),
                        from_step=step, checkpoint=shown, exact=False, rerun=rerun, engine=ENGINE)
        self._last_step, self._step_record, self._loop_step = step, None, None

    @_serial
    def leave_checkpoint_signal(self) -> None:
        """SIGUSR1 is another handler's from now on (a framework's: Lightning's SLURM
        save-and-requeue): this run's handler is taken away, the previous one put back, and
        ``.trainer.json`` says that the console asks for a checkpoint through the request
        file (``checkpoint_requests``: ``"file"``), which :attr:`checkpoint_requested` still
        takes. Call it before the framework installs its handler (on every rank: each gives
        the signal up; rank 0 rewrites the record)."""
        self._open("run.leave_checkpoint_signal")
        for sig in CHECKPOINT_SIGNALS:
            self._signals.release(sig)
        if self._ranks.owner and self.record.checkpoint_requests != REQUESTS_BY_FILE:      # a member writes nothing
            self.record = dataclasses.replace(self.record, checkpoint_requests=REQUESTS_BY_FILE)
            write_trainer_record(self.path, self.record)

    @property
    def last_step(self) -> int | None:
        """The newest step logged (or the history's, when it was opened)."""
        return self._last_step

    @_serial
    def finish(self, reason: str | None = None) -> None:
        """The ``stop`` event; the record removed, the lock released, the handlers put back.
        Safe to call twice; in a forked child of the process that opened the run, nothing."""
        if self._closed or os.getpid() != self._pid:
            return
        self._agreement.settle()
        if self._beat is not None:              # its last record, with how this rank ended
            self._beat.close(1 if is_error_stop(reason) else 0)
            self._beat = None
        if not self._ranks.owner:
            self._closed = True
            self._signals.restore(exiting_on_stop=reason == _UNLOOKED)
            atexit.unregister(self._at_exit)
            return
        if self._lost is not None:              # the record and the history are the new holder's now
            self._release(remove_record=False)
            atexit.unregister(self._at_exit)
            return
        if reason is None:
            self._poll()
            reason = "signal" if self._stopping else "finished"
        try:
            self._event(EVENT_STOP, self._last_step or 0, f"stop ({reason}) at step {self._last_step or 0}",
                        reason="signal" if reason == _UNLOOKED else reason)
            self._history.fsync()
        except OSError as err:                  # a full disk: the run let go all the same, said in one line
            try:
                self._release(remove_record=True, exiting_on_stop=reason == _UNLOOKED)
            except OSError:
                pass
            raise RunError(f"run.finish: the stop event was not written to {self.path / LOSS_JSON}: "
                           f"{err.strerror or err} (the run is released)") from None
        finally:
            atexit.unregister(self._at_exit)
        try:
            self._release(remove_record=True, exiting_on_stop=reason == _UNLOOKED)
        except OSError as err:
            raise RunError(f"run.finish: releasing {self.path}: {err.strerror or err}") from None

    def __enter__(self) -> "Run":
        return self

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None, tb: Any) -> None:
        if kind is None or (issubclass(kind, SystemExit) and isinstance(err, SystemExit) and err.code in (None, 0)):
            self.finish()
        else:
            self.finish("interrupted" if issubclass(kind, KeyboardInterrupt) else f"error: {kind.__name__}")

    # -- inside ------------------------------------------------------------------------
    def _open(self, where: str) -> None:
        if self._closed:
            raise RunError(f"{where}: the run is finished (run.finish() was called)")
        if os.getpid() != self._pid:
            raise RunError(f"{where}: this process (pid {os.getpid()}) is a fork of pid {self._pid}, which opened "
                           "the run: only that process writes it")
        if self._lost is not None:
            raise RunError(f"{where}: {self._lost}: another trainer took this run over, and this one writes "
                           "nothing more")

    def _lock_lost(self, why: str) -> None:
        """The lock's heartbeat found its lock file another trainer's (this process was frozen past
        the bound): from now on every call refuses, as andrea-train exits at once (status 4)."""
        self._lost = why

    def _poll(self) -> None:
        """One process: what arrived, taken now. Several: nothing (the decision is :meth:`agree`'s)."""
        if self._closed or self._ranks.distributed or os.getpid() != self._pid:
            return
        self._watch.poll(self._signals)
        if self._signals.pending:
            self._taken(self._signals.take())

    def _taken(self, taken: SignalRequests) -> None:
        """Requests taken (on every rank the same, with several processes): rank 0's events."""
        if not taken:
            return
        step = max(self._last_step or 0, self._loop_step or 0)
        for name in taken.names if self._ranks.owner else ():
            action = "stop" if name in _STOP_NAMES else "checkpoint"
            self._event(EVENT_SIGNAL, step, f"{name} received: {action} at step {step}", signal=name, action=action)
        if taken.checkpoint or (taken.stop and not self._stopping):
            self._requests += 1
        if taken.stop and not self._stopping:
            self._stopping, self._stop_taken_at = True, self._logs

    def _end_unlooked_stop(self) -> None:
        """A stop the loop did not look at by the next :meth:`log`: the run ends here, exit 0."""
        if self._ranks.owner:
            self._say("the loop did not look at run.stop_requested after the stop: run.log ends the process "
                      "(exit 0)")
        self.finish(_UNLOOKED)
        raise SystemExit(0)

    def _event(self, name: str, step: int, message: str, **fields: Any) -> None:
        self._history.append({"event": name, "step": step, "time": time.time(), **fields})
        self._say(message)

    def _say(self, text: str) -> None:
        """A line in trainer.log (the console's log pane); a full disk loses the line only."""
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        line = f"{stamp} {text}\n".encode("utf-8", "replace")
        try:
            written = os.write(self._log_fd, line)
            if written < len(line):             # cut short: taken back, no half line for the next to join
                os.ftruncate(self._log_fd, os.fstat(self._log_fd).st_size - written)
        except OSError:
            pass

    def _release(self, remove_record: bool, exiting_on_stop: bool = False) -> None:
        """Everything this run holds let go, each step whatever the others did (an NFS close can
        report a writeback error): the first error is raised after the lock is released."""
        self._closed = True
        history = getattr(self, "_history", None)
        steps = [history.close] if history is not None else []
        if remove_record and getattr(self, "record", None) is not None:
            steps.append(lambda: remove_trainer_record(self.path, self.record.pid))
        steps += [lambda fd=fd: os.close(fd) for fd in (self._dir_fd, self._log_fd) if fd >= 0]
        steps += [lambda: self._signals.restore(exiting_on_stop), self._lock.release]
        self._dir_fd = self._log_fd = -1
        errors: list[BaseException] = []
        for step in steps:
            try:
                step()
            except Exception as err:            # noqa: BLE001  (the rest is released first)
                errors.append(err)
        if errors:
            raise errors[0]

    def _release_quietly(self, created: list[Path]) -> None:
        """An open that failed part way: everything let go, and the files it created still empty
        (``created``: a fresh run's history and log) removed, so nothing of it is left behind."""
        try:
            self._release(remove_record=True)
        except OSError:
            pass
        for path in created:
            try:
                if os.lstat(path).st_size == 0:
                    os.unlink(path)
            except OSError:
                pass

    def _at_exit(self) -> None:
        """A script that returns without :meth:`finish`: finished for it (not in a forked child),
        a stop taken being a stop on a signal still, and one ended by an uncaught exception (a
        framework's error: the interpreter printed it and set ``sys.last_value``) an error."""
        failed = getattr(sys, "last_value", None)
        try:
            if failed is not None and failed is not self._failed_before:
                self.finish("interrupted" if isinstance(failed, KeyboardInterrupt) else
                            f"error: {type(failed).__name__}")
            self.finish("signal" if self._stopping else "exit without run.finish()")
        except RunError as err:                 # the exit hook's one line, not a traceback
            print(f"rundir: at exit: {err}", file=sys.stderr)


__all__ = ["ENGINE", "Run", "RunError", "open_run"]
