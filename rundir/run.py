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
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any, Mapping

from .config import ConfigError, RunConfig, engine_config_text, load_run_config
from .external import saved_size
from .history import LossHistoryWriter, read_history_tail
from .layout import (CHECKPOINT_SIGNALS, EVENT_EXTERNAL_CHECKPOINT, EVENT_RESUME, EVENT_SIGNAL, EVENT_START, EVENT_STOP,
                     LOSS_JSON, RUN_TOML, STOP_SIGNALS, TRAINER_LOG)
from .process import RunLock, RunLockedError
from .safe_read import open_for_append
from .trainer_record import (REQUESTS_BY_FILE, RunDirId, SlurmPlacement, TrainerRecord, remove_trainer_record,
                             write_trainer_record)

ENGINE = "rundir.open_run"          # the start event's "engine": who wrote the history
_FIELDS = ("loss", "lr", "grad_norm", "tokens")


class RunError(RuntimeError):
    """A bad use of the run API; the message is one line saying what and why."""


def open_run(path: str | os.PathLike[str], config: Mapping[str, Any] | None = None) -> "Run":
    """Start training ``path`` (created if needed) as its one trainer; see :class:`Run`."""
    return Run(path, config)


def _number(key: str, value: Any) -> float | int:
    """A step line's value: an int or float as it is, a numpy or torch scalar by ``item()``."""
    kind = type(value)
    if kind is float or kind is int:
        return value
    if kind is not bool:
        item = getattr(value, "item", None)
        if callable(item):
            try:
                value = item()
            except (TypeError, ValueError, RuntimeError):       # a tensor of several elements
                raise RunError(f"run.log: {key} is {_shown(value)}, not a single number") from None
            if type(value) in (int, float):
                return value
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value) if isinstance(value, float) else int(value)
    raise RunError(f"run.log: {key} = {_shown(value)} is not a number")


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _step(where: str, step: Any) -> int:
    if type(step) is not int:
        item = getattr(step, "item", None)
        try:
            step = item() if callable(item) and not isinstance(step, bool) else step
        except (TypeError, ValueError, RuntimeError):       # a tensor of several elements
            pass
    if type(step) is not int or step < 0:
        raise RunError(f"{where}: step {_shown(step)} is not a non-negative integer")
    return step


def _signal_flags() -> Any:
    """The trainer's flag-only handlers (:class:`rundir.signals.SignalFlags`, torch-free), and
    a second SIGINT that interrupts at once, for a loop that never looks at the flags."""
    from .signals import SignalFlags

    class RunSignalFlags(SignalFlags):
        def _handle(self, signum: int, frame: Any) -> None:
            if signum == signal.SIGINT and signal.SIGINT.name in self._names:
                raise KeyboardInterrupt
            super()._handle(signum, frame)

    return RunSignalFlags()


class Run:
    """A run directory trained by this process (see the module's text). Use
    :func:`open_run`; also a context manager (``with rundir.open_run(...) as run:``), whose
    exit is :meth:`finish`."""

    def __init__(self, path: str | os.PathLike[str], config: Mapping[str, Any] | None = None):
        if threading.current_thread() is not threading.main_thread():
            raise RunError("open_run: call it from the main thread (signal handlers can only be installed there)")
        self.path = Path(path)
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise RunError(f"open_run: cannot create {self.path}: {err.strerror}") from None
        text = self._config_text(config)
        self._lost: str | None = None           # set by the lock's heartbeat when another trainer took the run
        self._lock = RunLock(self.path, on_lost=self._lock_lost)
        try:
            self._lock.acquire()
        except RunLockedError as err:
            raise RunError(f"open_run: {err}") from None
        self._closed = False
        self._requests = self._stop = self._checkpoint = 0      # taken, and taken when last saved
        self._stopping = False
        self._dir_fd = self._log_fd = -1
        self._signals = _signal_flags()
        try:
            self._start(text)
        except BaseException:
            self._release(remove_record=True)
            raise
        atexit.register(self._at_exit)

    def _config_text(self, config: Mapping[str, Any] | None) -> str | None:
        """The run.toml to write (None: keep the one there); refuses andrea-train's own run."""
        existing: RunConfig | None = None
        if (self.path / RUN_TOML).exists():
            try:
                existing = load_run_config(self.path)
            except ConfigError:
                existing = None                 # unreadable: replaced
        if existing is not None and existing.config is None:
            raise RunError(f"open_run: {self.path} is andrea-train's run (its {RUN_TOML} has data arms and no "
                           "[config]): train another directory")
        if config is None and existing is not None:
            return None
        if config is not None and not isinstance(config, Mapping):
            raise RunError(f"open_run: config is {type(config).__name__}, not a dict")
        try:
            return engine_config_text(self.path.resolve().name, dict(config or {}))
        except ConfigError as err:
            raise RunError(f"open_run: {err}") from None

    def _start(self, config_text: str | None) -> None:
        from .signals import RequestWatch

        # Held open for the run's lifetime: how the console verifies a trainer (rundir.identity),
        # whatever its command line says.
        self._dir_fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        tail = read_history_tail(self.path / LOSS_JSON)
        self._last_step: int | None = int(tail.step[-1]) if len(tail.step) else None
        self._history = LossHistoryWriter(self.path / LOSS_JSON)
        self._log_fd = open_for_append(self.path / TRAINER_LOG)
        if config_text is not None:
            from .atomic import atomic_write_bytes
            atomic_write_bytes(self.path / RUN_TOML, config_text.encode("utf-8"))
        self._signals.install()                 # before the record: a recorded trainer handles signals
        self.record = TrainerRecord.for_this_process(slurm=SlurmPlacement.from_env(), run_dir=RunDirId.of_fd(self._dir_fd))
        write_trainer_record(self.path, self.record)
        self._watch = RequestWatch(self.path, self.record, self._say)
        step = self._last_step or 0
        self._event(EVENT_START, step, f"start: pid {self.record.pid}, history at step {step}", engine=ENGINE,
                    pid=self.record.pid)

    # -- what the loop calls ---------------------------------------------------------
    def log(self, step: int, loss: Any = None, lr: Any = None, grad_norm: Any = None, tokens: Any = None,
            **more: Any) -> None:
        """A step line (docs/contract.md#lossjson-the-history): numbers only (``arm`` may be a string), and a
        step that never goes back unless :meth:`resumed` said where training went back to."""
        self._open("run.log")
        step = step if type(step) is int and step >= 0 else _step("run.log", step)
        last = self._last_step
        if last is not None and step < last:
            raise RunError(f"run.log: step {step} goes back (the history is at step {last}); call "
                           "run.resumed(step, path) when training resumes from an earlier checkpoint")
        record: dict[str, Any] = {"step": step}
        for key, value in zip(_FIELDS, (loss, lr, grad_norm, tokens)):
            if value is not None:
                record[key] = value if type(value) is float else _number(key, value)
        for key, value in more.items():
            if value is not None:
                record[key] = value if type(value) is float or key == "arm" and type(value) is str \
                    else _number(key, value)
        tokens_value = record.get("tokens")
        if type(tokens_value) is float:
            if not tokens_value.is_integer():
                raise RunError(f"run.log: tokens = {tokens_value!r} is not a whole number")
            record["tokens"] = int(tokens_value)
        record["time"] = time.time()
        self._history.append(record)
        self._last_step = step

    @property
    def checkpoint_requested(self) -> bool:
        """A checkpoint was asked for (SIGUSR1, the request file, or a stop) and not saved yet."""
        self._poll()
        return self._requests > self._checkpoint

    @property
    def stop_requested(self) -> bool:
        """SIGTERM or SIGINT arrived: save a checkpoint (:attr:`checkpoint_requested` says so
        until one is reported), then stop."""
        self._poll()
        return self._stopping

    def checkpoint_saved(self, step: int, path: str | os.PathLike[str], checksum: str | None = None) -> None:
        """A checkpoint in this trainer's own format (a file or a directory) is complete at
        ``path``: its ``external_checkpoint`` event, fsynced; it answers the requests taken so far."""
        self._open("run.checkpoint_saved")
        step = _step("run.checkpoint_saved", step)
        target = Path(path)
        try:
            size = saved_size(target)
        except OSError as err:
            raise RunError(f"run.checkpoint_saved: {target}: {err.strerror}") from None
        if checksum is not None and not isinstance(checksum, str):
            raise RunError(f"run.checkpoint_saved: checksum {_shown(checksum)} is not a string")
        answers = self._requests > self._checkpoint
        shown = self._recorded_path(target)
        fields: dict[str, Any] = {"path": shown, "size": size, "reason": "signal" if answers else "schedule"}
        if checksum is not None:
            fields["checksum"] = checksum
        self._event(EVENT_EXTERNAL_CHECKPOINT, step, f"checkpoint {shown} at step {step} ({size:,} bytes)"
                    + (", as requested" if answers else ""), **fields)
        self._history.fsync()
        self._checkpoint = self._requests

    def resumed(self, step: int, path: str | os.PathLike[str] | None = None) -> None:
        """Training continues after ``step`` (restored from the checkpoint at ``path``): the
        ``resume`` event; the steps after it are logged again."""
        self._open("run.resumed")
        step = _step("run.resumed", step)
        shown = self._recorded_path(Path(path)) if path is not None else None
        rerun = {"from": step + 1, "to": self._last_step} if self._last_step is not None and \
            self._last_step > step else None
        self._event(EVENT_RESUME, step, f"resume from step {step}" + (f" ({shown})" if shown else ""),
                    from_step=step, checkpoint=shown, exact=False, rerun=rerun, engine=ENGINE)
        self._last_step = step

    def leave_checkpoint_signal(self) -> None:
        """SIGUSR1 is another handler's from now on (a framework's: Lightning's SLURM
        save-and-requeue): this run's handler is taken away, the previous one put back, and
        ``.trainer.json`` says that the console asks for a checkpoint through the request
        file (``checkpoint_requests``: ``"file"``), which :attr:`checkpoint_requested` still
        takes. Call it before the framework installs its handler."""
        self._open("run.leave_checkpoint_signal")
        for sig in CHECKPOINT_SIGNALS:
            self._signals.release(sig)
        if self.record.checkpoint_requests != REQUESTS_BY_FILE:
            self.record = dataclasses.replace(self.record, checkpoint_requests=REQUESTS_BY_FILE)
            write_trainer_record(self.path, self.record)

    @property
    def last_step(self) -> int | None:
        """The newest step logged (or the history's, when it was opened)."""
        return self._last_step

    def finish(self, reason: str | None = None) -> None:
        """The ``stop`` event; the record removed, the lock released, the handlers put back.
        Safe to call twice."""
        if self._closed:
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
                        reason=reason)
            self._history.fsync()
        finally:
            self._release(remove_record=True)
            atexit.unregister(self._at_exit)

    def __enter__(self) -> "Run":
        return self

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None, tb: Any) -> None:
        if kind is None or (issubclass(kind, SystemExit) and err is not None and err.code in (None, 0)):
            self.finish()
        else:
            self.finish("interrupted" if issubclass(kind, KeyboardInterrupt) else f"error: {kind.__name__}")

    # -- inside ------------------------------------------------------------------------
    def _open(self, where: str) -> None:
        if self._closed:
            raise RunError(f"{where}: the run is finished (run.finish() was called)")
        if self._lost is not None:
            raise RunError(f"{where}: {self._lost}: another trainer took this run over, and this one writes "
                           "nothing more")

    def _lock_lost(self, why: str) -> None:
        """The lock's heartbeat found its lock file another trainer's (this process was frozen past
        the bound): from now on every call refuses, as andrea-train exits at once (status 4)."""
        self._lost = why

    def _poll(self) -> None:
        if self._closed:
            return
        self._watch.poll(self._signals)
        if not self._signals.pending:
            return
        taken = self._signals.take()
        stop_names = {sig.name for sig in STOP_SIGNALS}
        step = self._last_step or 0
        for name in taken.names:
            action = "stop" if name in stop_names else "checkpoint"
            self._event(EVENT_SIGNAL, step, f"{name} received: {action} at step {step}", signal=name, action=action)
        if taken.checkpoint or (taken.stop and not self._stopping):
            self._requests += 1
        self._stopping = self._stopping or taken.stop

    def _recorded_path(self, target: Path) -> str:
        """Relative to the run directory when it lies inside it, else absolute."""
        absolute = Path(os.path.abspath(target))
        try:
            return str(absolute.relative_to(Path(os.path.abspath(self.path))))
        except ValueError:
            return str(absolute)

    def _event(self, name: str, step: int, message: str, **fields: Any) -> None:
        self._history.append({"event": name, "step": step, "time": time.time(), **fields})
        self._say(message)

    def _say(self, text: str) -> None:
        """A line in trainer.log (the console's log pane); a full disk loses the line only."""
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        try:
            os.write(self._log_fd, f"{stamp} {text}\n".encode("utf-8", "replace"))
        except OSError:
            pass

    def _release(self, remove_record: bool) -> None:
        """Everything this run holds let go, each step whatever the others did (an NFS close can
        report a writeback error): the first error is raised after the lock is released."""
        self._closed = True
        history = getattr(self, "_history", None)
        steps = [history.close] if history is not None else []
        if remove_record and getattr(self, "record", None) is not None:
            steps.append(lambda: remove_trainer_record(self.path, self.record.pid))
        steps += [lambda fd=fd: os.close(fd) for fd in (self._dir_fd, self._log_fd) if fd >= 0]
        steps += [self._signals.restore, self._lock.release]
        self._dir_fd = self._log_fd = -1
        errors: list[BaseException] = []
        for step in steps:
            try:
                step()
            except Exception as err:            # noqa: BLE001  (the rest is released first)
                errors.append(err)
        if errors:
            raise errors[0]

    def _at_exit(self) -> None:
        """A script that returns without :meth:`finish`: finished for it."""
        self.finish("exit without run.finish()")


__all__ = ["ENGINE", "Run", "RunError", "open_run"]
