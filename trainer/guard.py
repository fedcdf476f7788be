"""The trainer's safety policies: a checkpoint write that fails, and a run that diverges.

**A checkpoint write that fails** (a full disk, an I/O error): the library's atomic
write has already removed its temporary file, so the previous checkpoint is untouched
and still the newest complete one. The failure is logged (``trainer.log``) and recorded
as a ``checkpoint_failed`` event in ``.loss.json`` (history lines are appends of a few
hundred bytes and keep going). Training continues and the next cadence tries again. A
checkpoint the trainer cannot continue without (the one a SIGTERM/SIGINT asked for,
or the final one at ``--max-steps``) that fails stops the trainer with exit status 3
and a message naming the checkpoint it can resume from. A live sidecar (``.state.json``,
``.samples.json``) that cannot be written is logged as a ``write_failed`` event and
retried at its next write (:mod:`trainer.outputs`). A history line that cannot be
appended stops the trainer with exit status 3 (it would otherwise train unrecorded): on a
disk so full that a few hundred bytes do not fit, nothing can be recorded, and the
newest checkpoint is still intact.

**Divergence**: a step whose loss or gradient norm is not finite is recorded (loss
``null`` with ``"nonfinite": "nan"|"inf"``, docs/contract.md#lossjson-the-history) and its update is
skipped, so weights, m and v stay those of the last good step. After
``run.max_nonfinite`` such steps in a row (0: never) the trainer writes a checkpoint
(its weights, m and v are the last good state), logs a ``stop`` event with reason
``nonfinite`` and exits with status 3.
"""

from __future__ import annotations

import errno
import math
from dataclasses import dataclass

EXIT_SAFETY_STOP = 3


class SafetyStop(RuntimeError):
    """The trainer stopped for a safety policy; the message says why and what to do."""


@dataclass
class NonfiniteGuard:
    """Counts non-finite steps in a row; ``limit`` 0 never trips."""

    limit: int
    in_a_row: int = 0
    total: int = 0
    last_good_step: int | None = None

    def observe(self, step: int, loss: float, grad_norm: float) -> str | None:
        """After a step: None when it was finite, else what was not (``"loss"``/``"grad_norm"``)."""
        if math.isfinite(loss) and math.isfinite(grad_norm):
            self.in_a_row = 0
            self.last_good_step = step
            return None
        self.in_a_row += 1
        self.total += 1
        return "loss" if not math.isfinite(loss) else "grad_norm"

    @property
    def tripped(self) -> bool:
        return bool(self.limit) and self.in_a_row >= self.limit


def describe_os_error(err: OSError) -> str:
    """``ENOSPC (No space left on device)``: the errno's name and the system's words."""
    name = errno.errorcode.get(err.errno or 0, "error")
    text = err.strerror or str(err)
    hint = "; free space on the run directory's disk" if err.errno == errno.ENOSPC else ""
    return f"{name} ({text}){hint}"
