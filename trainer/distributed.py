"""Training on several processes: ``torchrun --nproc_per_node N -m trainer RUN_DIR ...``.

One process per device, DistributedDataParallel (gloo on CPU, NCCL for CUDA tensors),
and every decision taken once and agreed by every rank:

- **Data.** Every rank runs the *same* samplers and bandit (same seed, same state, the
  same JSON restored from a checkpoint), so their states stay identical without being
  gathered: a checkpoint's sampler, bandit and RNG state is rank-independent. Each step
  every rank draws the global batch's window indices and reads only its own slice
  (``batch_size / world_size`` windows). The bandit's choice is broadcast from rank 0
  (a rank whose own draw differs has lost step with the others: it stops loudly).
- **Reward.** The loss a rank sees is the mean over its slice; the loss written to
  ``.loss.json`` and credited to the bandit is the all-reduced mean over ranks, the same
  number on every rank. DDP averages the gradients, so every rank computes the same
  gradient norm, skips the same non-finite steps and applies the same AdamW update to
  its :class:`~trainer.optim.FlatAdamW` buffers (DDP copies its averaged buckets into
  ``p.grad``; the flat weights stay the parameters' storage). Beyond two ranks the
  gradients are summed in rank order (:func:`_rank_ordered_mean`), so that a resumed
  process rounds exactly as one that never stopped.
- **Signals.** ``.trainer.json`` names rank 0's worker process. A signal reaches one rank
  or all of them at different moments (the launcher, :mod:`trainer.launch`, passes SIGTERM
  and SIGINT to every worker of its node and SIGUSR1 to rank 0; the console signals rank
  0, or writes ``.checkpoint_request.json``, which rank 0 takes); at every step boundary
  the ranks all-reduce (MAX) their flags ``[checkpoint, SIGTERM, SIGINT]``, so they
  checkpoint and stop at the same step (PyTorch Lightning's DDP SIGTERM deadlock, its
  issue 20806, came from ranks acting on a signal alone).
- **Writes.** Rank 0 alone holds the lock and writes: checkpoints, sidecars,
  ``trainer.log``, ``.trainer.json``. Other ranks get :class:`NullOutputs`; while rank 0
  writes a checkpoint they wait in the next flag all-reduce, which is the barrier.

Small collectives run on CPU tensors through gloo, including in a CUDA run
(``cpu:gloo,cuda:nccl``); nothing is ever pickled (no ``*_object`` collectives): JSON
travels as bytes in uint8 tensors.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import orjson
import torch

from rundir.signals import CHECKPOINT_SIGNALS, STOP_SIGNALS, RequestWatch, SignalFlags, SignalRequests

SIGNAL_ORDER = tuple(s.name for s in (*CHECKPOINT_SIGNALS, *STOP_SIGNALS))   # SIGUSR1, SIGTERM, SIGINT


class RankDesync(RuntimeError):
    """This rank's state no longer matches rank 0's (a bug, never an input problem)."""


@dataclass(frozen=True)
class Ranks:
    """Where this process stands among the training processes. ``world_size == 1``: every
    collective is the identity and nothing touches ``torch.distributed``."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @classmethod
    def from_env(cls) -> "Ranks":
        """From torchrun's ``RANK``, ``WORLD_SIZE`` and ``LOCAL_RANK`` (one process when unset)."""
        world = int(os.environ.get("WORLD_SIZE", "1") or 1)
        if world <= 1:
            return cls()
        return cls(int(os.environ.get("RANK", "0")), world, int(os.environ.get("LOCAL_RANK", "0")))

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @property
    def writer(self) -> bool:
        """Rank 0: the one process that holds the lock and writes the run directory."""
        return self.rank == 0

    # ---- process group ----
    def init(self) -> None:
        """Join the process group (rendezvous through torchrun's environment)."""
        if not self.distributed:
            return
        import torch.distributed as dist

        # Imported before the group exists (see close()): its functions take ``group=group.WORLD``
        # as a default argument, bound when the module is first imported (DDP imports it lazily),
        # which would keep the default group alive until the interpreter is torn down.
        import torch.distributed.nn.functional  # noqa: F401
        backend = "cpu:gloo,cuda:nccl" if torch.cuda.is_available() and dist.is_nccl_available() else "gloo"
        dist.init_process_group(backend)
        if dist.get_world_size() != self.world_size or dist.get_rank() != self.rank:
            raise RankDesync(f"process group says rank {dist.get_rank()} of {dist.get_world_size()}, "
                             f"the environment {self.rank} of {self.world_size}")

    def close(self) -> None:
        """Leave the process group and end its worker threads, while the interpreter is whole.

        A gloo worker thread drops its reference to a finished collective after the caller has
        been woken; when the caller's tensor is gone by then, the work's destructor must take the
        GIL to release the tensor's Python object. If that happens once the interpreter has
        begun to finalize, the thread is ended inside a C++ destructor and the process aborts
        ("terminate called without an active exception", SIGABRT, so torchrun fails the run).
        The group's destructor joins its threads, so the group must really be destroyed here:
        nothing may still reference it (``destroy_process_group`` only forgets it). DDP holds it
        through the model's reference cycles (collected first), and torch.distributed.nn's
        default arguments would hold it had they been bound after init (see :meth:`init`)."""
        if self.distributed:
            import gc

            import torch.distributed as dist
            gc.collect()
            if dist.is_initialized():
                dist.destroy_process_group()
            gc.collect()

    def device(self, device: str) -> str:
        """The device of this rank: ``cuda`` becomes ``cuda:LOCAL_RANK`` (one GPU per process)."""
        if self.distributed and device.startswith("cuda"):
            torch.cuda.set_device(self.local_rank)
            return f"cuda:{self.local_rank}"
        return device

    def wrap(self, model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
        """The module to run forward and backward through: DDP around ``model`` when distributed."""
        if not self.distributed:
            return model
        from torch.nn.parallel import DistributedDataParallel
        ids = [device.index] if device.type == "cuda" else None
        ddp = DistributedDataParallel(model, device_ids=ids)
        if self.world_size > 2:
            ddp.register_comm_hook(None, _rank_ordered_mean)
        return ddp

    # ---- collectives (CPU tensors: gloo) ----
    def _all_reduce(self, values: Sequence[float], op: str, dtype: torch.dtype = torch.float64) -> list[float]:
        if not self.distributed:
            return list(values)
        import torch.distributed as dist
        tensor = torch.tensor(list(values), dtype=dtype)
        dist.all_reduce(tensor, op=getattr(dist.ReduceOp, op))
        return tensor.tolist()

    def mean(self, value: float) -> float:
        """The mean of ``value`` over the ranks (float64 sum, divided by the world size)."""
        if not self.distributed:
            return value
        return self._all_reduce([value], "SUM")[0] / self.world_size

    def all_true(self, flag: bool) -> bool:
        return bool(self._all_reduce([1 if flag else 0], "MIN", torch.int64)[0])

    def any_true(self, flag: bool) -> bool:
        return bool(self._all_reduce([1 if flag else 0], "MAX", torch.int64)[0])

    def broadcast_index(self, index: int) -> int:
        """Rank 0's ``index`` on every rank."""
        if not self.distributed:
            return index
        import torch.distributed as dist
        tensor = torch.tensor([index], dtype=torch.int64)
        dist.broadcast(tensor, src=0)
        return int(tensor.item())

    def broadcast_json(self, value: Any) -> Any:
        """Rank 0's JSON value on every rank (``value`` is ignored elsewhere): its length,
        then its bytes as a uint8 tensor. Never pickled."""
        if not self.distributed:
            return value
        import torch.distributed as dist
        data = orjson.dumps(value) if self.writer else b""
        size = torch.tensor([len(data)], dtype=torch.int64)
        dist.broadcast(size, src=0)
        buffer = torch.frombuffer(bytearray(data), dtype=torch.uint8) if self.writer else \
            torch.empty(int(size.item()), dtype=torch.uint8)
        dist.broadcast(buffer, src=0)
        return orjson.loads(buffer.numpy().tobytes())

    def choose_arm(self, bandit: Any) -> str:
        """The bandit's draw for this step, decided by rank 0 and broadcast. Every rank
        draws too, so that every bandit's RNG advances identically; a rank whose own draw
        differs has lost step with rank 0 and stops (:class:`RankDesync`)."""
        arm = bandit.choose()
        if not self.distributed:
            return arm
        arms = bandit.arms
        chosen = arms[self.broadcast_index(arms.index(arm))]
        if chosen != arm:
            raise RankDesync(f"rank {self.rank} drew arm {arm!r}, rank 0 {chosen!r}: the bandits diverged")
        return chosen


SINGLE = Ranks()


def _rank_ordered_mean(process_group, bucket):   # unannotated: DDP checks the annotations it finds
    """DDP comm hook for more than 2 ranks: gather every rank's bucket and add them in
    rank order, ``((g0 + g1) + g2) + ...``, then divide by the world size.

    An all-reduce sums each element in an order set by where the element falls in the
    bucket (a ring reduces each chunk starting at another rank), and DDP lays its
    buckets out afresh after a process's first backward: a resumed process would round
    differently from one that never stopped. With two ranks ``a + b == b + a`` exactly,
    so DDP's own all-reduce is kept there; beyond two, this hook makes the sum
    independent of the layout, at the price of gathering ``world_size`` buckets."""
    import torch.distributed as dist

    buffer = bucket.buffer()
    world = dist.get_world_size(process_group)
    parts = [torch.empty_like(buffer) for _ in range(world)]
    future = dist.all_gather(parts, buffer, group=process_group, async_op=True).get_future()

    def ordered_sum(_: Any) -> torch.Tensor:
        total = parts[0].clone()
        for part in parts[1:]:
            total.add_(part)
        return total.div_(world)

    return future.then(ordered_sum)


class AgreedSignals:
    """A :class:`SignalFlags` whose answers every rank shares: :meth:`take` and
    :attr:`stop_pending` all-reduce (MAX) this rank's flags, so every rank sees a signal that
    reached any of them, at the same step boundary. Both are collectives: every rank
    calls them in the same order (the step boundary's control flow depends only on
    agreed values). With one process they are the plain flags."""

    def __init__(self, flags: SignalFlags, ranks: Ranks):
        self.flags = flags
        self.ranks = ranks
        self.requests: RequestWatch | None = None

    def watch_requests(self, watch: RequestWatch) -> None:
        """Rank 0 (the writer): also take ``.checkpoint_request.json`` at step boundaries; a
        request it takes reaches every rank through the agreement, as a SIGUSR1 does."""
        self.requests = watch

    @property
    def stop_pending(self) -> bool:
        if not self.ranks.distributed:
            return self.flags.stop_pending
        return self.ranks.any_true(self.flags.stop_pending)

    def mark(self) -> int:
        # Local: only rank 0 writes checkpoints, so only its cut is ever taken; the
        # others pass None and take all they have.
        return self.flags.mark()

    def take(self, until: int | None = None) -> SignalRequests:
        if self.requests is not None:
            self.requests.poll(self.flags)
        local = self.flags.take(until)
        if not self.ranks.distributed:
            return local
        # [checkpoint (a SIGUSR1 or a request), SIGTERM, SIGINT]
        seen = [1 if local.checkpoint else 0] + [1 if name in local.names else 0 for name in SIGNAL_ORDER[1:]]
        agreed = self.ranks._all_reduce(seen, "MAX", torch.int64)
        # This rank's own signals in arrival order, then those only other ranks received.
        names = list(local.names) + [n for n, a, mine in zip(SIGNAL_ORDER, agreed, seen) if a and not mine]
        return SignalRequests(checkpoint=bool(agreed[0]), stop=bool(agreed[1] or agreed[2]), names=names)

    def install(self) -> "AgreedSignals":
        self.flags.install()
        return self

    def restore(self, exiting_on_stop: bool = False) -> None:
        self.flags.restore(exiting_on_stop)


class _NullProgress:
    tokens_per_s = 0.0

    def message(self, text: str) -> None:
        pass

    def step(self, *args: Any, **kwargs: Any) -> None:
        pass

    def close(self) -> None:
        pass


class NullOutputs:
    """The outputs of a rank other than 0: the same methods as
    :class:`~trainer.outputs.RunOutputs`, writing nothing (rank 0 writes for all)."""

    def __init__(self, run_dir: str | os.PathLike[str]):
        self.run_dir = Path(run_dir)
        self.progress = _NullProgress()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return lambda *args, **kwargs: None
