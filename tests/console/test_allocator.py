"""The console's allocator tuning (console.tune_allocator): after the console has dropped a
large array, the arrays its refreshes make are still mapped apart from the heap, and so given
back to the system when dropped, not kept by the heap as glibc's moving threshold would."""

from __future__ import annotations

import subprocess
import sys

# In a process of its own: a 16 MiB array dropped (glibc then raises its mmap threshold to
# 16 MiB unless the threshold is fixed), then a 1 MiB array made: the bytes of the blocks
# mapped apart (glibc's mallinfo2 hblkhd) grow by it only where it is mapped apart.
_MAPPED_APART = """
import ctypes, sys
import numpy as np
if sys.argv[1] == "tuned":
    from console import tune_allocator
    assert tune_allocator()
elif sys.argv[1] != "default":              # a run directory: andrea-console RUN --once, in this process
    import contextlib, io
    from console.cli import main
    with contextlib.redirect_stdout(io.StringIO()):
        assert main([sys.argv[1], "--once"]) == 0
class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                     "fsmblks", "uordblks", "fordblks", "keepcost")]
mallinfo2 = ctypes.CDLL(None).mallinfo2
mallinfo2.restype = MallInfo2
first = np.ones(2 << 20)
del first
before = mallinfo2().hblkhd
second = np.ones(1 << 17)
print(mallinfo2().hblkhd - before)
"""


def mapped_apart(mode: str) -> int:
    """How many bytes of a 1 MiB array, made after a 16 MiB one was dropped, are mapped apart
    (``mode``: ``default``, ``tuned``, or a run directory the command line reads first)."""
    out = subprocess.run([sys.executable, "-c", _MAPPED_APART, mode], capture_output=True, text=True, check=True,
                         timeout=120)
    return int(out.stdout.split()[-1])


def test_arrays_stay_mapped_apart_once_the_allocator_is_tuned():
    assert mapped_apart("default") == 0, "glibc's threshold did not move here: the case shows nothing"
    assert mapped_apart("tuned") >= 1 << 20


def test_the_command_line_tunes_its_process(tmp_path):
    """``andrea-console RUN --once`` leaves its process tuned as the dashboard's is."""
    from tests.rundirs import make_run

    assert mapped_apart(str(make_run(tmp_path / "run", steps=50))) >= 1 << 20
