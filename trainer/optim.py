"""AdamW over flat buffers: the checkpoint's three arrays *are* the optimizer's state.

Every parameter of the model becomes a view into one flat float32 ``weights`` buffer,
in ``parameters()`` order; ``m`` and ``v`` are flat buffers of the same length. So a
checkpoint writes the three buffers as they are (no gathering copy) and a resume loads
them with one copy each. The update is seed 003's, in its order, per element::

    w <- w * (1 - lr * wd)                            decoupled weight decay, on all parameters
    m <- m + (1 - beta1) * (g - m)                    first moment
    v <- beta2 * v + (1 - beta2) * g * g              second moment
    w <- w - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)

Two kernels compute it, each bit for bit what ``torch.optim.AdamW`` computes with the same
kernel (tests compare them):

- ``fused`` (the default wherever torch has it, CPU and CUDA): ``torch._fused_adamw_``, one
  pass that reads w, g, m, v once and writes w, m, v once: ``AdamW(fused=True)``'s kernel.
  On a GPU the update is memory-bound, so one pass instead of about twenty matters
  (andrea-120m's three buffers are 1.46 GB); on CPU it is 3-14x faster too.
- ``foreach``: ``torch._foreach_*`` ops, one per line above, the calls of
  ``AdamW(foreach=True)``; on CPU also the arithmetic of ``AdamW(foreach=False)`` and of
  this trainer before the fused kernel. The fused kernel rounds differently (its lerp and
  its products are fused multiply-adds), so the two give different last bits: a resume
  across them is recorded as inexact, like a resume under another torch version.

Written here rather than taken from ``torch.optim`` because that one imports
``torch._dynamo`` on its first step (three seconds of start-up on a small machine),
and because flat state makes the checkpoint contract literal.
"""

from __future__ import annotations

import torch
from torch import nn

from rundir.config import OptimizerConfig

CLIP_EPS = 1e-6       # as torch.nn.utils.clip_grad_norm_: no division by zero at a zero norm
FUSED, FOREACH = "fused", "foreach"
KERNELS = (FUSED, FOREACH)
KERNEL_OF_OLDER_CHECKPOINTS = FOREACH     # what wrote checkpoints before the kernel was recorded


def default_kernel(device: torch.device) -> str:
    """``fused`` where this torch has the fused AdamW kernel for ``device``, else ``foreach``."""
    return FUSED if hasattr(torch, "_fused_adamw_") and device.type in ("cpu", "cuda") else FOREACH


class FlatAdamW:
    """AdamW whose parameters, first and second moments are three flat buffers."""

    def __init__(self, model: nn.Module, config: OptimizerConfig, kernel: str | None = None):
        self.config = config
        self.params = list(model.parameters())
        first = self.params[0]
        self.kernel = kernel or default_kernel(first.device)
        if self.kernel not in KERNELS:
            raise ValueError(f"AdamW kernel {self.kernel!r}: one of {', '.join(KERNELS)}")
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
        # The fused kernel reads Adam's step from a tensor on the buffers' device (as
        # torch.optim keeps it); ``step_count`` stays the source of truth.
        self._step_tensor = torch.zeros((), dtype=torch.float32, device=first.device)

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
        if self.kernel == FUSED:
            self._step_tensor.fill_(self.step_count)
            torch._fused_adamw_([self.weights], [grad], [self.m], [self.v], [], [self._step_tensor], lr=c.lr,
                                beta1=c.beta1, beta2=c.beta2, weight_decay=c.weight_decay, eps=c.eps,
                                amsgrad=False, maximize=False)
            return
        # The calls and scalars of torch.optim.AdamW(foreach=True), overloads included (a list of
        # one scalar where it passes one per tensor), so that CUDA's foreach kernels match too.
        t = float(self.step_count)
        weights, m, v, g = [self.weights], [self.m], [self.v], [grad]
        torch._foreach_mul_(weights, 1 - c.lr * c.weight_decay)
        torch._foreach_lerp_(m, g, 1 - c.beta1)
        torch._foreach_mul_(v, c.beta2)
        torch._foreach_addcmul_(v, g, g, 1 - c.beta2)
        denom = torch._foreach_sqrt(v)
        torch._foreach_div_(denom, [(1 - c.beta2 ** t) ** 0.5])
        torch._foreach_add_(denom, c.eps)
        torch._foreach_addcdiv_(weights, m, denom, [(c.lr / (1 - c.beta1 ** t)) * -1])

    @torch.no_grad()
    def load(self, weights: torch.Tensor, m: torch.Tensor, v: torch.Tensor, step_count: int) -> None:
        """Set the three buffers (flat, float32, ``parameters()`` order) and the step count."""
        for buffer, values in ((self.weights, weights), (self.m, m), (self.v, v)):
            if values.numel() != buffer.numel():
                raise ValueError(f"{values.numel()} values for a buffer of {buffer.numel()}")
            buffer.copy_(values.reshape(-1))
        self.step_count = step_count
