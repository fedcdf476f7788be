"""The C extension only; everything else is in pyproject.toml (setuptools' table for
extensions there is still experimental)."""

from setuptools import Extension, setup

setup(ext_modules=[
    # The checkpoint inspector's fused passes over a chunk (see the file's comment).
    # Optional: without a C compiler the install goes on, and the inspector sums with
    # numpy instead, about twice as slowly.
    Extension("console.read._tensor_sums", ["console/read/_tensor_sums.c"],
              extra_compile_args=["-O3", "-fopenmp-simd", "-fno-math-errno"], optional=True),
    # The history reader's fast path for step lines (see the file's comment). Optional too:
    # without it, every batch is decoded by msgspec, as when it gives up on one.
    Extension("rundir._line_scan", ["rundir/_line_scan.c"], extra_compile_args=["-O2"], optional=True),
])
