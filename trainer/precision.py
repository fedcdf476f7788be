"""The arithmetic of training: ``run.precision`` and ``run.compile``.

- ``fp32``: every op in float32; on CUDA, matmuls and convolutions may use TF32 tensor
  cores (10-bit mantissa inputs, float32 accumulation), as they do in most production runs.
- ``bf16``: the forward and the loss under ``torch.autocast(dtype=bfloat16)``. The weights,
  their gradients, m and v stay float32 (autocast casts a weight to bfloat16 for each op and
  the gradient flows back to the float32 master), so the checkpoint format is unchanged and
  no loss scaling is needed (bfloat16 has float32's exponent range).
- ``auto`` resolves to ``bf16`` on a CUDA device that computes bfloat16 natively (compute
  capability 8.0 or newer) and ``fp32`` elsewhere; the trainer resolves it once, before
  the run directory is touched, and a new run.toml records the resolved value.

Both are deterministic on CPU: a resume in either precision is bit-exact there (a test).
A checkpoint records its precision; resuming it in another one is refused unless forced
(:func:`check_precision`), since every number after it would differ.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, ContextManager

import torch

from rundir.resume_record import ResumeRecord

FP32 = "fp32"
BF16 = "bf16"
FP32_OF_OLDER_CHECKPOINTS = FP32     # checkpoints written before precision was recorded trained in float32


def resolve(requested: str, device: str) -> str:
    """``run.precision`` for ``device``: ``auto`` made concrete."""
    if requested != "auto":
        return requested
    if device.startswith("cuda") and torch.cuda.is_available():
        # This process's own GPU (under torchrun, "cuda" means LOCAL_RANK's): asking about
        # device 0 from every rank would put a CUDA context on it for each of them.
        index = torch.device(device).index
        own = index if index is not None else int(os.environ.get("LOCAL_RANK", 0))
        major, _ = torch.cuda.get_device_capability(own)
        return BF16 if major >= 8 else FP32
    return FP32


def autocast(device: torch.device, precision: str) -> ContextManager[Any]:
    """The context the forward and the loss run in."""
    if precision == BF16:
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def allow_tf32(device: str) -> None:
    """On CUDA, float32 matmuls and convolutions on TF32 tensor cores (deterministic, like the rest)."""
    if device.startswith("cuda"):
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True


def saved_precision(sidecar: ResumeRecord | None) -> str:
    """The precision a checkpoint's ``.json`` says it was trained in."""
    return sidecar.precision if sidecar is not None and sidecar.precision is not None else FP32_OF_OLDER_CHECKPOINTS


def precision_mismatch(checkpoint_name: str, sidecar: ResumeRecord | None, precision: str) -> str | None:
    """Why ``checkpoint_name`` must not be resumed in ``precision`` (None: it may)."""
    if sidecar is None:
        return None                      # a foreign .bin: nothing recorded, nothing to keep exact
    saved = saved_precision(sidecar)
    if saved == precision:
        return None
    return (f"{checkpoint_name} was trained in {saved}, this run would train in {precision} (run.precision or "
            f"--precision): every step after it would compute other numbers; set run.precision = \"{saved}\" to "
            f"resume exactly, or pass --force-precision to continue in {precision}")


def compile_model(module: torch.nn.Module) -> torch.nn.Module:
    """``torch.compile`` of the training forward, with Inductor's deterministic mode (no
    benchmark-chosen kernels), so that two compiled runs of the same steps agree."""
    import torch._inductor.config as inductor_config  # seconds of import: only when compiling

    inductor_config.deterministic = torch.are_deterministic_algorithms_enabled()
    return torch.compile(module)
