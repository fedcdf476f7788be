"""AdamW over flat buffers: the checkpoint's three arrays *are* the optimizer's state.

Every parameter of the model becomes a view into one flat float32 ``weights`` buffer,
in ``parameters()`` order; ``m`` and ``v`` are flat buffers of the same length. So a
checkpoint writes the three buffers as they are (no gathering copy) and a resume loads
them with one copy each. The update is seed 003's, element for element the same
arithmetic as ``torch.optim.AdamW`` (a test checks bit equality)::

    w <- w * (1 - lr * wd)                            decoupled weight decay, on all parameters
    m <- lerp(m, g, 1 - beta1)                        first moment
    v <- beta2 * v + (1 - beta2) * g * g              second moment
    w <- w - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)

Written here rather than taken from ``torch.optim`` because that one imports
``torch._dynamo`` on its first step (three seconds of start-up on a small machine),
and because flat state makes the checkpoint contract literal.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from rundir.config import OptimizerConfig

CLIP_EPS = 1e-6       # as torch.nn.utils.clip_grad_norm_: no division by zero at a zero norm


class FlatAdamW:
    """AdamW whose parameters, first and second moments are three flat buffers."""

    def __init__(self, model: nn.Module, config: OptimizerConfig):
        self.config = config
        self.params = list(model.parameters())
        first = self.params[0]
        n = sum(p.numel() for p in self.params)
        self.weights = torch.empty(n, dtype=torch.float32, device=first.device)
        offset = 0
        for p in self.params:
            k = p.numel()
            self.weights[offset:offset + k].copy_(p.detach().reshape(-1))
            p.data = self.weights[offset:offset + k].view_as(p)    # the parameter now lives in the buffer
            offset += k
        self.m = torch.zeros_like(self.weights)
        self.v = torch.zeros_like(self.weights)
        self.step_count = 0

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    def gather_grad(self) -> torch.Tensor:
        """The gradient as one flat vector in ``parameters()`` order (zeros where none)."""
        return torch.cat([p.grad.reshape(-1) if p.grad is not None else torch.zeros(p.numel(), device=p.device)
                          for p in self.params])

    @staticmethod
    def clip_(grad: torch.Tensor, norm: float, max_norm: float) -> None:
        """Scale ``grad`` by ``max_norm / norm`` when its global norm exceeds ``max_norm``."""
        coef = max_norm / (norm + CLIP_EPS)
        if coef < 1.0:
            grad.mul_(coef)

    @torch.no_grad()
    def step(self, grad: torch.Tensor) -> None:
        """One AdamW update of the flat weights with the flat (clipped) gradient."""
        c = self.config
        self.step_count += 1
        t = self.step_count
        self.weights.mul_(1 - c.lr * c.weight_decay)
        self.m.lerp_(grad, 1 - c.beta1)
        self.v.mul_(c.beta2).addcmul_(grad, grad, value=1 - c.beta2)
        step_size = c.lr / (1 - c.beta1 ** t)
        denom = (self.v.sqrt() / math.sqrt(1 - c.beta2 ** t)).add_(c.eps)
        self.weights.addcdiv_(self.m, denom, value=-step_size)

    @torch.no_grad()
    def load(self, weights: torch.Tensor, m: torch.Tensor, v: torch.Tensor, step_count: int) -> None:
        """Set the three buffers (flat, float32, ``parameters()`` order) and the step count."""
        for buffer, values in ((self.weights, weights), (self.m, m), (self.v, v)):
            if values.numel() != buffer.numel():
                raise ValueError(f"{values.numel()} values for a buffer of {buffer.numel()}")
            buffer.copy_(values.reshape(-1))
        self.step_count = step_count
