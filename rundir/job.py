"""The job a run API process belongs to (:mod:`rundir.run`): its rank among the job's
processes, the launch they share, and the one collective by which they agree.

**Rank.** From the initialized ``torch.distributed`` process group when there is one (looked
up in ``sys.modules``: importing this module never imports torch), else from the launcher's
environment: ``RANK``/``WORLD_SIZE``/``LOCAL_RANK`` (torchrun, accelerate, Lightning's
launchers), else, in an ``srun`` step, ``SLURM_PROCID``/``SLURM_STEP_NUM_TASKS``
(``SLURM_NTASKS``)/``SLURM_LOCALID``. A batch script's own process (no ``SLURM_STEP_ID``) is
one process, whatever ``--ntasks`` says: it is the script that runs ``srun`` or a launcher.

**Launch.** Global rank 0 owns the run directory; every other rank joins it as a member once
``.trainer.json`` names a live rank 0 of the same launch: its :func:`launch_key`, a digest of
what every process of one launch shares (the rendezvous address and id, the restart count,
the SLURM job and step, the world size).

**Agreement.** :func:`all_max` all-reduces (MAX) a few integers over the default process
group: a CPU tensor, or one on the current CUDA device where the group's only backend is
NCCL; :class:`PendingMax` starts one and waits for it later, so that its round trip overlaps
the step. Every rank calls them at the same points, or the job waits in them.
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from .trainer_record import TrainerRecord, process_start, read_trainer_record

JOIN_TIMEOUT_S = 120.0          # how long a member waits for rank 0's record of its launch
JOIN_POLL_S = 0.05
_LAUNCH_ENV = ("MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT", "SLURM_JOB_ID",
               "SLURM_STEP_ID")


# The newest collectives' tensors, kept referenced from Python: gloo's worker thread lets go of a
# finished collective's tensor after waking the caller, and where Python had already let go, that
# release needs the GIL; at the interpreter's exit, right after the run's last all-reduce, that
# aborted the process ("terminate called without an active exception", SIGABRT; see
# trainer/distributed.py's close()). Kept here, gloo's release is only a count going down.
_KEPT: deque[Any] = deque(maxlen=8)


class JobError(RuntimeError):
    """This process cannot act as a rank of its job (one line)."""


@dataclass(frozen=True)
class JobRanks:
    """Where this process stands in its job; ``source`` says where that was read."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    source: str = "one process"

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @property
    def owner(self) -> bool:
        """Global rank 0: the process that owns the run directory."""
        return self.rank == 0

    def describe(self) -> str:
        return f"rank {self.rank} of {self.world_size} ({self.source})"


def _dist() -> Any:
    """``torch.distributed`` when it is imported, available and its default group initialized."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    return dist


def group_ready() -> bool:
    """Whether torch.distributed's default process group is initialized (torch never imported here)."""
    return _dist() is not None


def _int(env: Mapping[str, str], name: str) -> int | None:
    text = env.get(name, "").strip()
    return int(text) if text.isdigit() else None


def job_ranks(env: Mapping[str, str] | None = None) -> JobRanks:
    """This process's rank (see the module's text); raises :class:`JobError` for a launcher
    environment that contradicts itself."""
    env = os.environ if env is None else env
    dist = _dist()
    local = _int(env, "LOCAL_RANK")
    if dist is not None:
        return JobRanks(dist.get_rank(), dist.get_world_size(), local or 0, "torch.distributed")
    for rank_var, world_var, local_var in (("RANK", "WORLD_SIZE", "LOCAL_RANK"),
                                           ("SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID")):
        if rank_var.startswith("SLURM") and not env.get("SLURM_STEP_ID"):
            continue                    # the batch script's process: one process
        world = _int(env, world_var) or (_int(env, "SLURM_NTASKS") if rank_var.startswith("SLURM") else None)
        if world is None or world <= 1:
            continue
        rank = _int(env, rank_var)
        if rank_var not in env:
            raise JobError(f"{world_var}={world} but {rank_var} is not set: initialize torch.distributed's process "
                           "group first (its rank is then used), or launch with torchrun")
        if rank is None or rank >= world:
            raise JobError(f"{rank_var}={env.get(rank_var, '')!r} is not a rank of {world_var}={world}")
        return JobRanks(rank, world, _int(env, local_var) or 0, f"{rank_var}/{world_var}")
    return JobRanks()


def launch_key(ranks: JobRanks, env: Mapping[str, str] | None = None) -> str:
    """What every process of one launch shares, digested (the owner's record carries it)."""
    env = os.environ if env is None else env
    text = "\0".join([str(ranks.world_size), *(env.get(name, "") for name in _LAUNCH_ENV)])
    return hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()[:16]


def torchrun_launcher() -> int | None:
    """The launcher's pid where torchrun's agent started this process (its parent)."""
    return os.getppid() if os.environ.get("TORCHELASTIC_RUN_ID") else None


def _owner_problem(record: TrainerRecord | None, why: str | None, ranks: JobRanks, key: str) -> str | None:
    """None when ``record`` is the live rank 0 of this launch, else what it is instead."""
    if record is None:
        return why or "it has no .trainer.json"
    if record.rank != 0 or record.world_size != ranks.world_size or record.launch != key:
        return f"its .trainer.json names pid {record.pid} on {record.host}, not rank 0 of this launch"
    if record.on_this_host():
        import psutil
        try:
            if not record.is_process(process_start(psutil.Process(record.pid))):
                return f"its .trainer.json names pid {record.pid}, which has exited"
        except psutil.Error:
            return f"its .trainer.json names pid {record.pid}, which has exited"
    return None


def wait_for_owner(path: Path, ranks: JobRanks, timeout: float) -> TrainerRecord:
    """Rank 0's record of this launch, once it is there (a member's join); :class:`JobError`
    when none is there after ``timeout`` seconds."""
    key = launch_key(ranks)
    deadline = time.monotonic() + timeout
    while True:
        record, why = read_trainer_record(path)
        problem = _owner_problem(record, why, ranks, key)
        if problem is None:
            assert record is not None
            return record
        if time.monotonic() >= deadline:
            raise JobError(f"{ranks.describe()} joins {path}, but no rank 0 of this launch owns it after "
                           f"{timeout:.0f} s ({problem}): call open_run on every rank, rank 0 included")
        time.sleep(JOIN_POLL_S)


def _reduce_max(values: Sequence[int], ranks: JobRanks, where: str, async_op: bool) -> tuple[Any, Any]:
    dist = _dist()
    if dist is None:
        raise JobError(f"{where}: this process is {ranks.describe()}, but torch.distributed's process group is not "
                       "initialized: call torch.distributed.init_process_group() before the loop's first step")
    import torch
    backend = str(dist.get_backend())
    device = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu")
    tensor = torch.tensor(list(values), dtype=torch.int64, device=device)
    _KEPT.append(tensor)
    return tensor, dist.all_reduce(tensor, op=dist.ReduceOp.MAX, async_op=async_op)


def all_max(values: Sequence[int], ranks: JobRanks, where: str) -> list[int]:
    """The elementwise MAX of ``values`` over every rank (a collective: every rank calls it
    at the same point); ``values`` itself with one process."""
    if not ranks.distributed:
        return list(values)
    tensor, _ = _reduce_max(values, ranks, where, async_op=False)
    return [int(v) for v in tensor.tolist()]


class PendingMax:
    """An all-reduce (MAX) started and not waited for: :meth:`result` waits (every rank
    started it at the same point, so every rank waits for the same one)."""

    def __init__(self, values: Sequence[int], ranks: JobRanks, where: str):
        self._tensor, self._work = _reduce_max(values, ranks, where, async_op=True)

    def result(self) -> list[int]:
        self._work.wait()
        return [int(v) for v in self._tensor.tolist()]


__all__ = ["JOIN_TIMEOUT_S", "JobError", "JobRanks", "PendingMax", "all_max", "group_ready", "job_ranks", "launch_key",
           "torchrun_launcher", "wait_for_owner"]
