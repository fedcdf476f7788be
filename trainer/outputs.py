"""The trainer's writes to its run directory, all through :mod:`rundir`.

``.loss.json`` (a line per step and per event, fsynced at every checkpoint),
``.state.json`` (the bandit, every ``state_every`` steps: atomically; durably at
checkpoints), ``.samples.json`` (bounded, newest last) and ``trainer.log`` (via
:class:`~trainer.progress.Progress`).

A live sidecar (``.state.json``, ``.samples.json``) that cannot be written (a full disk)
is logged once per streak as a ``write_failed`` event and training goes on: the old file
stays whole (atomic replacement), the next write retries, and the checkpoint's ``.json``
holds the bandit durably anyway.
"""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path
from typing import Any, Callable

from rundir import CheckpointInfo, LossHistoryWriter, read_samples, write_samples, write_state
from rundir.layout import (
    EVENT_CHECKPOINT,
    EVENT_CHECKPOINT_FAILED,
    EVENT_WRITE_FAILED,
    LOSS_JSON,
    SAMPLES_JSON,
    STATE_JSON,
)
from trainer.bandit import OnlineDataMixer
from trainer.guard import SafetyStop, describe_os_error
from trainer.held_dir import REMOVED, HeldRunDir
from trainer.progress import Progress


def _describe(fields: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in fields.items() if v not in (None, [], {}))


class RunOutputs:
    """Open for the trainer's lifetime (under the run's lock)."""

    def __init__(self, run_dir: str | os.PathLike[str], progress: Progress, samples_keep: int, resume_step: int,
                 held: HeldRunDir | None = None):
        self.run_dir = Path(run_dir)
        self.held = held
        self.progress = progress
        self.history = LossHistoryWriter(self.run_dir / LOSS_JSON)
        self.samples_keep = samples_keep
        # Samples from steps after the checkpoint we resume from belong to an abandoned
        # stretch of the run; they are dropped (and will be regenerated identically).
        previous = read_samples(self.run_dir).value or []
        self.samples = [dataclasses.asdict(s) for s in previous if s.step <= resume_step][-samples_keep:]
        self._failing: set[str] = set()          # live files whose last write failed

    def note_move(self) -> None:
        """Say once in the log where the run directory went, when it was moved or renamed
        (training goes on in it: its files are reached through the open directory)."""
        moved = self.held.moved_to() if self.held is not None else None
        if moved == REMOVED:
            self.progress.message("the run directory was removed: no file can be made in it any more (a "
                                  "checkpoint fails), and no path reaches what it held")
        elif moved is not None:
            self.progress.message(f"the run directory was moved: it is now {moved}; training goes on there")

    def event(self, name: str, step: int, message: str | None = None, **fields: Any) -> None:
        """An event line in ``.loss.json`` and a line in the log."""
        self._append(lambda: self.history.event(name, step=step, time=time.time(), **fields))
        self.progress.message(message or f"{name} at step {step}: {_describe(fields)}")

    def step(self, step: int, loss: float, lr: float, grad_norm: float, arm: str, tokens: int, **extra: Any) -> None:
        self._append(lambda: self.history.step(step, loss, lr, grad_norm, arm, tokens, time.time(), **extra))

    def _append(self, write: Callable[[], None]) -> None:
        """A history line that cannot be appended stops the trainer: it would train unrecorded."""
        try:
            write()
        except OSError as err:
            raise SafetyStop(f"cannot append to {LOSS_JSON}: {describe_os_error(err)}; the history up to its last "
                             "whole line and the checkpoints are intact; free space, then restart to resume") from None

    def checkpoint_written(self, info: CheckpointInfo, reason: str, **timing: Any) -> None:
        """A checkpoint is complete: its event (with how long it held the loop), fsynced."""
        held = f"; held training {timing['stall_s']:.2f} s" if "stall_s" in timing else ""
        waited = f", after waiting {timing['waited_s']:.2f} s for the previous write" if timing.get("waited_s") else ""
        self.event(EVENT_CHECKPOINT, info.step, f"checkpoint {info.path.name} ({reason}){held}{waited}",
                   path=info.path.name, reason=reason, **timing)
        self.history.fsync()

    def checkpoint_failed(self, step: int, reason: str, err: OSError, message: str, **timing: Any) -> None:
        """A checkpoint write failed (the library removed its temporary): event, log, fsync."""
        self.event(EVENT_CHECKPOINT_FAILED, step, message, reason=reason, error=describe_os_error(err), errno=err.errno,
                   **timing)
        self.history.fsync()

    def _live_write(self, name: str, step: int, write: Callable[[], None]) -> None:
        try:
            write()
        except OSError as err:
            if name not in self._failing:
                self._failing.add(name)
                self.event(EVENT_WRITE_FAILED, step, f"could not write {name} at step {step}: "
                                                     f"{describe_os_error(err)}; "
                                                     "the previous one is intact; retried at the next update",
                           file=name, error=describe_os_error(err), errno=err.errno)
            return
        self._failing.discard(name)

    def write_state(self, bandit: OnlineDataMixer, step: int, durable: bool = False) -> None:
        self._live_write(STATE_JSON, step, lambda: write_state(self.run_dir, bandit.sidecar(step), durable=durable))

    def add_samples(self, samples: list[dict[str, Any]]) -> None:
        self.samples = (self.samples + samples)[-self.samples_keep:]
        step = samples[-1]["step"] if samples else 0
        self._live_write(SAMPLES_JSON, step, lambda: write_samples(self.run_dir, self.samples))

    def close(self) -> None:
        try:
            self.history.fsync()
        except OSError:             # a full disk: the lines are in the page cache all the same
            pass
        self.history.close()
