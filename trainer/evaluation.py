"""The held-out eval loss: the model's loss on a fixed slice of each arm it never trains on.

Every ``run.eval_every`` steps (default: the checkpoint cadence; 0 turns it off) the
trainer reads at most :data:`~trainer.data.EVAL_WINDOWS` held-out windows per arm
(:meth:`~trainer.data.ArmSampler.eval_windows`: the same windows every time, spread over
the last 1% of the arm's source) and appends an ``eval`` line to ``.loss.json``::

    {"event": "eval", "step": S, "eval_loss": L, "per_arm": {arm: loss}, "windows": N}

``eval_loss`` is the mean over all ``N`` windows read (each window weighs the same);
``per_arm`` the mean over each arm's. A non-finite loss is written as null.

It changes nothing in training: no generator is drawn from (the windows are fixed, and
dropout is 0), gradients are off (``torch.no_grad``), the model is put in eval mode and
back, and it runs on the eager model (not DDP's wrapper, which could start a collective,
nor the compiled one). Under torchrun rank 0 alone evaluates: the others go on to the
next step and wait for it in the gradient all-reduce, as they do for its checkpoints.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from trainer.data import EVAL_WINDOWS, ArmSampler
from trainer.precision import autocast


@dataclass(frozen=True)
class EvalResult:
    """One eval's figures, as written to the ``eval`` line."""

    step: int
    eval_loss: float | None
    per_arm: dict[str, float | None]
    windows: int

    def fields(self) -> dict[str, Any]:
        """The ``eval`` event's fields (besides ``event``, ``step`` and ``time``)."""
        return {"eval_loss": self.eval_loss, "per_arm": self.per_arm, "windows": self.windows}


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


class HeldOutEval:
    """Each arm's eval batch, read once (the windows are fixed) and kept on the device."""

    def __init__(self, samplers: dict[str, ArmSampler], device: torch.device, limit: int = EVAL_WINDOWS):
        self.batches: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        for name, sampler in samplers.items():
            windows = sampler.eval_windows(limit)
            if len(windows):                     # a one-window source has nothing held out
                self.batches[name] = sampler.read_windows(windows, device)

    @property
    def windows(self) -> int:
        return sum(len(x) for x, _ in self.batches.values())

    def run(self, model: torch.nn.Module, step: int, device: torch.device, precision: str) -> EvalResult | None:
        """The loss of ``model`` on every arm's eval windows; None when no arm holds any out."""
        if not self.batches:
            return None
        was_training = model.training
        model.eval()
        per_arm: dict[str, float] = {}
        try:
            with torch.no_grad(), autocast(device, precision):
                for name, (x, y) in self.batches.items():
                    _, loss = model(x, y)
                    per_arm[name] = float(loss)
        finally:
            model.train(was_training)
        total = sum(per_arm[name] * len(x) for name, (x, _) in self.batches.items())
        return EvalResult(step, _finite(total / self.windows), {n: _finite(v) for n, v in per_arm.items()},
                          self.windows)
