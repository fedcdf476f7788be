"""Process settings that make a resume bit-exact: threads and deterministic kernels.

On CPU, with the same software, thread count and these settings, every kernel the
trainer uses is deterministic, so a resumed run reproduces a never-stopped one bit for
bit. On CUDA, deterministic cuBLAS needs its workspace setting before CUDA starts, and
kernels without a deterministic variant warn instead of failing (``python -m bench gpu``
says which warned, and whether a resume there was exact). float32 matmuls may use TF32
on CUDA (deterministic too).
"""

from __future__ import annotations

import os

import torch

from trainer.precision import allow_tf32


def configure(threads: int = 1, device: str = "cpu") -> None:
    """Set the torch thread count and deterministic algorithms for this process."""
    cuda = device.startswith("cuda")
    if cuda:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.set_num_threads(threads)
    setter = getattr(torch._C, "_set_deterministic_algorithms", None)
    if setter is not None:
        # torch.use_deterministic_algorithms also sets the compiler's flag, importing
        # torch._inductor (seconds of start-up); the eager flag, which is what that
        # function sets for eager kernels, is enough here, and a compiled run sets the
        # compiler's from it when it compiles (trainer.precision.compile_model).
        setter(True, warn_only=cuda)
    else:   # pragma: no cover - a torch without the private setter
        torch.use_deterministic_algorithms(True, warn_only=cuda)
    assert torch.are_deterministic_algorithms_enabled()
    allow_tf32(device)
