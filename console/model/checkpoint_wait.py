"""How a checkpoint request ended, as a record: the one rule of waiting
(:class:`console.read.landing.RequestWait`) ends each wait with one, whether the dashboard's
reads or the poll of the overview and the command line drive it; each says it from the same
record, and the exit code is chosen by its kind, not its words."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from rundir import CheckpointInfo
from rundir.external import ExternalCheckpoint


class WaitEnd(enum.Enum):
    """How a wait for a requested checkpoint ended."""

    LANDED = "landed"
    TIMED_OUT = "timed out"
    TRAINER_EXITED = "trainer exited"
    CANCELLED = "cancelled"


@dataclass(frozen=True)
class CheckpointWait:
    """The outcome of a checkpoint request: the checkpoint when it landed, else how the wait
    ended; :attr:`why` is the text made from it."""

    end: WaitEnd
    info: CheckpointInfo | None = None
    timeout: float = 0.0
    pid: int | None = None
    external: ExternalCheckpoint | None = None      # landed in the trainer's own format (the run API)
    # Every checkpoint that answered it (file names, the trainer's recorded paths): the
    # dashboard says each one's landing; info and external are the newest of them.
    answered_by: tuple[str, ...] = ()
    # Landed, and pruned by the retention policy before a look found its file (a fast cadence,
    # a loaded machine, a mount's late listing): its name, complete by the trainer's history.
    pruned: str | None = None
    waited: float = 0.0                              # seconds from the signal to the look that ended it

    @property
    def why(self) -> str:
        if self.end is WaitEnd.LANDED:
            return ""
        if self.end is WaitEnd.TRAINER_EXITED:
            return f"trainer pid {self.pid} exited without a new checkpoint"
        if self.end is WaitEnd.TIMED_OUT:
            return f"no new checkpoint within {self.timeout:g} s"
        return "the wait was cancelled"
