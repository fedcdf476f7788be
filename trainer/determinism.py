"""Process settings that make a resume bit-exact: threads and deterministic kernels.

On CPU, with the same software, thread count and these settings, every kernel the
trainer uses is deterministic, so a resumed run reproduces a never-stopped one bit for
bit. On CUDA, deterministic cuBLAS needs its workspace setting before CUDA starts, and
kernels without a deterministic variant warn instead of failing, unless
``run.strict_determinism`` is true: then they raise, and flash and memory-efficient
attention use their deterministic backward, which a warning-only setting leaves
non-deterministic (``python -m bench gpu`` measures both: which kernels warned, whether a
resume was exact, and what strictness costs). float32 matmuls may use TF32 on CUDA.
"""

from __future__ import annotations

import os

import torch

from trainer.precision import allow_tf32


def configure(threads: int = 1, device: str = "cpu", strict: bool = False) -> None:
    """Set the torch thread count and deterministic algorithms for this process (``strict``:
    on CUDA too, a kernel without a deterministic implementation raises)."""
    cuda = device.startswith("cuda")
    warn_only = cuda and not strict
    if cuda:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.set_num_threads(threads)
    setter = getattr(torch._C, "_set_deterministic_algorithms", None)
    if setter is not None:
        # torch.use_deterministic_algorithms also sets the compiler's flag, importing
        # torch._inductor (seconds of start-up); the eager flag, which is what that
        # function sets for eager kernels, is enough here, and a compiled run sets the
        # compiler's from it when it compiles (trainer.precision.compile_model).
        setter(True, warn_only=warn_only)
    else:   # pragma: no cover - a torch without the private setter
        torch.use_deterministic_algorithms(True, warn_only=warn_only)
    assert torch.are_deterministic_algorithms_enabled()
    allow_tf32(device)
