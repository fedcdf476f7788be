"""The job's one decision on the requests its ranks received (:mod:`rundir.run` with several
processes).

Each rank counts its ``run.log`` calls; at every K-th (an agreement point) it sends what it
received since the last point (a checkpoint asked for, SIGTERM, SIGINT, a stop its loop did
not look at) in one all-reduce (MAX) over the job's process group, started at this point and
waited for at the next, so the loop never waits for it. Every rank applies the same answer
at the same point. K is rank 0's proposal, agreed with the rest: about
:data:`AGREE_EVERY_S` of its steps, so the agreement costs a fast loop nothing.
"""

from __future__ import annotations

import time

from .job import JobRanks, PendingMax
from .layout import STOP_SIGNALS
from .signals import SignalRequests

# The points are about this far apart: a request reaches the loop within two points, and the
# all-reduce, started at one point and waited for at the next, has finished meanwhile.
AGREE_EVERY_S = 0.1
AGREE_MAX_EVERY = 1000
STOP_ORDER = tuple(sig.name for sig in STOP_SIGNALS)     # SIGTERM, SIGINT: the agreement's slots
ANOTHER_RANK = "SIGUSR1 (another rank)"      # a checkpoint only other ranks received


class JobAgreement:
    """One rank's side of the agreement: :meth:`due` at each log, then at a point
    :meth:`answer` (the last point's decision) and :meth:`send` (this point's requests)."""

    def __init__(self, ranks: JobRanks):
        self.ranks = ranks
        self._pending: PendingMax | None = None     # the agreement in flight, and what this rank sent in it
        self._sent: tuple[list[int], list[str]] = ([], [])
        self._every = self._until = 1           # logs between points (agreed), and left to the next
        self._point = (time.monotonic(), 0)     # the last point: when, at which log count

    def due(self) -> bool:
        """Counts one log; whether it is an agreement point."""
        self._until -= 1
        return self._until <= 0

    def answer(self) -> tuple[SignalRequests, bool] | None:
        """The last point's decision, the same on every rank: the requests taken, and whether a
        stop went unlooked at on some rank (the run ends). None at the first point."""
        pending, self._pending = self._pending, None
        if pending is None:
            return None
        agreed, (mine, names) = pending.result(), self._sent
        names = list(names) + [n for n, a, m in zip(STOP_ORDER, agreed[1:3], mine[1:3]) if a and not m]
        taken = SignalRequests(checkpoint=bool(agreed[0]), stop=bool(agreed[1] or agreed[2]), names=names)
        if agreed[0] and not mine[0] and not taken.stop:
            taken.names.append(ANOTHER_RANK)
        self._every = max(1, agreed[4])
        return taken, bool(agreed[3])

    def send(self, local: SignalRequests, ignored_stop: bool, logs: int) -> None:
        """This rank's requests since the last point (and whether its loop ignored a stop),
        sent in the all-reduce the next point waits for. Raises JobError (the group is gone)."""
        mine = [int(local.checkpoint)] + [int(name in local.names) for name in STOP_ORDER] + \
            [int(ignored_stop), self._next_every(logs)]
        self._pending, self._sent = PendingMax(mine, self.ranks, "run.log"), (mine, local.names)
        self._until = self._every

    def _next_every(self, logs: int) -> int:
        """Rank 0's proposal (the others send 0) of the logs between points."""
        now = time.monotonic()
        (then, before), self._point = self._point, (now, logs)
        if not self.ranks.owner or logs <= before:
            return 0
        return max(1, min(AGREE_MAX_EVERY, int(AGREE_EVERY_S * (logs - before) / max(now - then, 1e-9))))

    def settle(self) -> None:
        """The agreement still in flight waited for (every rank ends with the same one), its answer dropped."""
        pending, self._pending = self._pending, None
        if pending is not None:
            try:
                pending.result()
            except Exception:                   # noqa: BLE001  (a group already destroyed: nothing to wait for)
                pass
