"""Checkpoints for the training loop: a copy at the step boundary, the write in the background.

A 121M-parameter checkpoint is 1.46 GB: written and fsynced inside the loop it stalls a
GPU step of ~0.1 s for ~1.5 s. Here the loop only copies weights, m and v into reused host
buffers (on CUDA: pinned memory, non-blocking copies, one synchronisation) and takes the
resume contract's state (samplers, bandit, RNG) at that boundary; a thread then writes the
``.bin``, fsyncs, renames and writes the ``.json`` exactly as a synchronous write does, so
a checkpoint is complete at the same moment for every reader.

- At most one write in flight: a checkpoint due while one is being written waits for it
  (the event says how long).
- A finished write is collected by the loop at a step boundary (:meth:`Checkpointer.collect`):
  the ``checkpoint`` or ``checkpoint_failed`` event, the history's fsync and the prune happen
  there, on the loop's thread, which alone writes ``.loss.json``.
- A write whose failure must stop the run (a stop or the final checkpoint) is written and
  waited for (``wait=True``): the loop never exits with a write in flight.
- Before a write, the filesystem's free space is compared with the checkpoint's size: if it
  does not fit, the retention policy prunes first; if it still does not fit, the write is
  skipped as a failed checkpoint naming the bytes needed and free, instead of failing half-way.

Under torchrun the write is synchronous: rank 0 alone writes, and every rank must take the
same path through the step boundary's collectives.
"""

from __future__ import annotations

import errno
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from rundir import CheckpointInfo, ResumeState, latest_resumable, list_checkpoints, write_checkpoint
from rundir.checkpoint import expected_size
from rundir.layout import EVENT_PRUNE, sidecar_name
from rundir.retention import RetentionPolicy, plan_retention, protected_steps, prune
from rundir.storage import free_bytes
from rundir.text import counted
from trainer.guard import describe_os_error
from trainer.resume import checkpoint_payload
from trainer.state import TrainingState, flat_moments, flat_weights

# Room left for the resume .json (~25 KB with the built-in arms) and the filesystem's own blocks.
JSON_ALLOWANCE = 128 << 10


@dataclass
class CheckpointDone:
    """One checkpoint write, finished."""

    step: int
    reason: str
    info: CheckpointInfo | None = None       # None: failed (``error``) or not this rank's to write
    error: OSError | None = None
    mark: int | None = None                  # the signals' arrival mark just before its .json
    waited_s: float = 0.0                    # the loop waited this long for the write before it
    stall_s: float = 0.0                     # the loop was held this long by this checkpoint
    write_s: float = 0.0                     # writing, fsyncing and renaming both files
    background: bool = False
    continues: bool = True                   # training goes on after it (not a stop or the final one)

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass
class _Buffers:
    """Reused host copies of weights, m and v (pinned on CUDA)."""

    arrays: list[np.ndarray] = field(default_factory=list)
    tensors: list[torch.Tensor] = field(default_factory=list)


class Checkpointer:
    """Writes the loop's checkpoints; ``asynchronous`` puts the write in a background thread.

    ``signals_mark`` is called just before a checkpoint's ``.json`` makes it complete;
    ``out`` is the run's outputs (events, log); ``policy`` the retention policy, applied
    after every checkpoint that became durable; ``resumed_step`` the checkpoint this
    process resumed from (kept until a newer one is complete).
    """

    def __init__(self, state: TrainingState, out: Any, signals_mark: Callable[[], int], asynchronous: bool,
                 policy: RetentionPolicy, resumed_step: int | None = None):
        self.state = state
        self.out = out
        self.run_dir = Path(out.run_dir)
        self.signals_mark = signals_mark
        self.asynchronous = asynchronous and not state.ranks.distributed
        self.policy = policy
        self.resumed_step = resumed_step
        self._thread: threading.Thread | None = None
        self._done: CheckpointDone | None = None
        self._buffers = _Buffers()
        self._waited = 0.0
        self.last: CheckpointDone | None = None     # the newest finished write
        if self.asynchronous and state.optimizer.weights.is_cuda:
            self._host_buffers()        # pinning 1.46 GB takes a while: at start, not in the first checkpoint's stall

    @property
    def busy(self) -> bool:
        """A write is in flight, or finished and not collected yet."""
        return self._thread is not None or self._done is not None

    # -- the loop's side ------------------------------------------------------
    def save(self, reason: str, wait: bool) -> CheckpointDone | None:
        """A checkpoint of the current step boundary. In the background unless ``wait`` (the
        loop waits exactly when it will not go on: a stop, the final or a divergence
        checkpoint) or synchronous: then the finished write is collected and returned."""
        t0 = time.monotonic()
        self.out.note_move()
        if self.busy:                                   # at most one in flight
            self.collect(wait=True)
            self._waited = time.monotonic() - t0
        state, step = self.state, self.state.step
        background = self.asynchronous and not wait
        problem = self._no_room(step)
        if problem is not None or not state.ranks.writer:   # nothing to write: done at once
            self._done = CheckpointDone(step, reason, error=problem, waited_s=self._waited, continues=not wait)
            return self.collect(wait=True)
        payload = checkpoint_payload(state)             # this boundary's samplers, bandit and RNG
        arrays = self._copy() if background else (flat_weights(state.optimizer), *flat_moments(state.optimizer))
        copied = time.monotonic()
        if not background:
            self._write(step, reason, arrays, payload, copied - t0, False, not wait)
            return self.collect(wait=True)
        self._thread = threading.Thread(target=self._write,
                                        args=(step, reason, arrays, payload, copied - t0, True, True),
                                        name=f"checkpoint-{step}", daemon=True)
        self._thread.start()
        return None

    def collect(self, wait: bool) -> CheckpointDone | None:
        """The finished write, logged, made durable in the history and pruned after; None
        while it is still being written (``wait`` False) or when there is none."""
        if self._thread is not None:
            if self._thread.is_alive() and not wait:
                return None
            self._thread.join()
            self._thread = None
        done, self._done, self._waited = self._done, None, 0.0
        if done is None:
            return None
        self.last = done
        if done.info is not None:
            self.out.checkpoint_written(done.info, done.reason, **self._timing(done))
            self.out.write_state(self.state.bandit, self.state.step, durable=True)
            self.prune(done.step)
        elif done.error is not None:
            self.out.checkpoint_failed(done.step, done.reason, done.error, self._failure_text(done),
                                       **self._timing(done))
        return done

    def close(self) -> None:
        """Finish a write in flight (the loop is leaving)."""
        if self.busy:
            self.collect(wait=True)

    # -- the writer thread's side ----------------------------------------------
    def _write(self, step: int, reason: str, arrays: tuple[np.ndarray, np.ndarray, np.ndarray],
               payload: ResumeState, stall: float, background: bool, continues: bool) -> None:
        marks: list[int] = []
        t0 = time.monotonic()
        done = CheckpointDone(step, reason, waited_s=self._waited, background=background, continues=continues)
        try:
            done.info = write_checkpoint(self.run_dir, step, *arrays, resume=payload,
                                         before_complete=lambda: marks.append(self.signals_mark()))
        except OSError as err:
            done.error = err
        done.write_s = time.monotonic() - t0
        done.stall_s = stall if background else stall + done.write_s
        done.mark = marks[0] if marks else None
        self._done = done

    def _copy(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Weights, m and v copied into the reused host buffers: what the thread writes while
        the next steps change the originals."""
        opt = self.state.optimizer
        sources = (opt.weights.detach(), opt.m, opt.v)
        buf = self._host_buffers()
        for dst, src in zip(buf.tensors, sources):
            dst.copy_(src.reshape(-1), non_blocking=src.is_cuda)
        if sources[0].is_cuda:
            torch.cuda.synchronize(sources[0].device)       # one synchronisation for the three copies
        return buf.arrays[0], buf.arrays[1], buf.arrays[2]

    def _host_buffers(self) -> _Buffers:
        """The three reused host buffers, allocated on first use (pinned when training on CUDA)."""
        buf = self._buffers
        if not buf.arrays:
            weights = self.state.optimizer.weights
            buf.tensors = [torch.empty(weights.numel(), dtype=torch.float32, pin_memory=weights.is_cuda)
                           for _ in range(3)]
            buf.arrays = [t.numpy() for t in buf.tensors]
        return buf

    # -- room and retention -----------------------------------------------------
    def _no_room(self, step: int) -> OSError | None:
        """ENOSPC, before any byte is written, when the checkpoint cannot fit even after a prune."""
        need = expected_size(self.state.optimizer.weights.numel()) + JSON_ALLOWANCE
        free = free_bytes(self.run_dir)
        if free is None or free >= need:
            return None
        self.prune(None)
        free = free_bytes(self.run_dir) or 0
        if free >= need:
            return None
        return OSError(errno.ENOSPC, f"{os.strerror(errno.ENOSPC)}: the checkpoint needs {need:,} bytes, "
                                     f"{free:,} are free after pruning by the retention policy; not started")

    def prune(self, just_written: int | None) -> None:
        """Apply the retention policy: after a checkpoint became durable (or, with None,
        to make room before a write). Only complete checkpoints this policy does not keep
        are removed; the ``prune`` event lists them before the first removal."""
        if not self.state.ranks.writer:
            return
        verdicts = plan_retention(list_checkpoints(self.run_dir), self.policy, protected_steps(self.run_dir),
                                  self.resumed_step)
        doomed = [v for v in verdicts if v.removed_next]
        if not doomed:
            return
        at = self.state.step if just_written is None else just_written

        def record(fields: dict[str, Any]) -> None:
            self.out.event(EVENT_PRUNE, at, f"prune: removing {counted(len(doomed), 'checkpoint')} "
                                            f"({_mib(fields['bytes'])}) "
                                            f"by the retention policy ({self.policy.describe()}): "
                                            + ", ".join(v.info.path.name for v in doomed), **fields)
            self.out.history.fsync()

        result = prune(self.run_dir, doomed, self.policy, record)
        for verdict in doomed:
            if verdict.info.step in result.steps:
                self.out.progress.message(f"prune: removed {sidecar_name(verdict.info.path.name)} and "
                                          f"{verdict.info.path.name} ({_mib(verdict.bytes)})")
        for error in result.errors:
            self.out.progress.message(f"prune: could not remove {error}")

    @staticmethod
    def _timing(done: CheckpointDone) -> dict[str, Any]:
        return {"waited_s": round(done.waited_s, 4), "stall_s": round(done.stall_s, 4),
                "write_s": round(done.write_s, 4), "background": done.background}

    def _failure_text(self, done: CheckpointDone) -> str:
        assert done.error is not None
        return (f"checkpoint at step {done.step} ({done.reason}) FAILED: {describe_os_error(done.error)}; "
                f"{resume_hint(self.run_dir)}"
                + ("; training continues and the next checkpoint retries" if done.continues else ""))


def resume_hint(run_dir: Path) -> str:
    """Which checkpoint a run would resume from now, for a message about a failure."""
    newest = latest_resumable(run_dir)
    return f"the newest checkpoint is {newest.path.name}, intact" if newest else "there is no earlier checkpoint"


def _mib(n: int) -> str:
    return f"{n / (1 << 20):,.1f} MiB"
