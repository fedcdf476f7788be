"""andrea-console, the operator console of a training run (README.md)."""

import os

# numpy asks the kernel for transparent huge pages for each large array; on a VM the first
# touch of one may then wait for 2 MiB pages to be zeroed or compacted: a 5M-step history's
# first frame waited 0.1-0.4 s on it (python -m bench mirror). The console makes its large
# arrays once and keeps them, so it asks for ordinary pages. Set before numpy is imported;
# NUMPY_MADVISE_HUGEPAGE=1 in the environment keeps numpy's default.
os.environ.setdefault("NUMPY_MADVISE_HUGEPAGE", "0")
