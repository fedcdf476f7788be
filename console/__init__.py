"""andrea-console, the operator console of a training run (README.md)."""

import os

# How the console's own numpy is tuned: set by the command line's entry (console/cli.py:main),
# before numpy is imported, and only where the environment says nothing (then it wins).
# Importing the package changes nothing. The processes the console launches (the trainer, an
# sbatch job) get the environment as it was, without these (console/actions/supervise.py).
# - NUMPY_MADVISE_HUGEPAGE: numpy asks the kernel for transparent huge pages for each large
#   array; on a VM the first touch of one may then wait for 2 MiB pages to be zeroed or
#   compacted: a 5M-step history's first frame waited 0.1-0.4 s on it (python -m bench
#   mirror). The console makes its large arrays once and keeps them: ordinary pages.
# - OPENBLAS_NUM_THREADS: numpy's OpenBLAS starts a thread per CPU at import, and they spin
#   for a while: on a 2-CPU login node, 40 ms of CPU taken from the start-up's two processes
#   (the UI's imports, the history's parse; a first open took 1.15x as long with two). The
#   console's numpy work is no BLAS work.
CONSOLE_TUNING = (("NUMPY_MADVISE_HUGEPAGE", "0"), ("OPENBLAS_NUM_THREADS", "1"))
CONSOLE_ONLY_ENV: dict[str, str] = {}           # what tune_environment set (none until it runs)


def tune_environment() -> None:
    """Set the console's own tuning where the environment says nothing; the command line's
    entry calls it before anything imports numpy."""
    for name, value in CONSOLE_TUNING:
        if name not in os.environ and name not in CONSOLE_ONLY_ENV:
            CONSOLE_ONLY_ENV[name] = value
    os.environ.update(CONSOLE_ONLY_ENV)


# The allocator: glibc serves a block of 128 KiB or more by mmap, given back to the system
# when freed, but raises that threshold to the size of any such block freed (up to 32 MiB):
# after the first read, the arrays each refresh makes and drops (as long as the run) come from
# the heap, which keeps them, and the console grows with the run it watches. A fixed
# threshold keeps them mapped and given back: the dashboard on a 200,000-step run paints its
# first frame at about 69 MB instead of 79-112 MB, and the grid of plots adds 10.5 MB instead
# of 13-19 MB (python -m bench plots).
M_MMAP_THRESHOLD = -3                   # glibc's mallopt parameter (malloc.h)
MMAP_THRESHOLD = 128 * 1024             # glibc's default, kept fixed


def tune_allocator() -> bool:
    """Fix glibc's mmap threshold for this process (see above); the command line's entry calls
    it. False where the C library is not glibc (nothing to tune, or no such call)."""
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt       # the process's own symbols: its C library's
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD))


def launch_environment() -> dict[str, str]:
    """The environment for a process the console launches: its own, less the console's tuning."""
    return {name: value for name, value in os.environ.items() if name not in CONSOLE_ONLY_ENV}
