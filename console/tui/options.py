"""What the console was asked for, in one record: the app takes ``(root, options)``.

The command line fills it from its flags (:mod:`console.commands`); tests and benchmarks fix
the clock, the probe and the pace with it (``watch=False, tick=None``: nothing read but what
a test asks for).
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from rundir import Verification, verify_trainer
from rundir.storage import free_bytes

from ..actions.alerts import NOTIFY_TIMEOUT_S
from ..model.snapshot import TrainerView
from ..plot.canvas import PlotOptions
from ..read.reader import RunReader
from ..read.runs_watcher import REFRESH_S

# The trainer's liveness, CPU and uptime are re-read this often even when no file changes.
TICK_S = 2.0


@dataclass(frozen=True)
class ConsoleOptions:
    # What the operator sees and may do.
    plot: PlotOptions = field(default_factory=PlotOptions)
    window: int = 2000                          # the plot's window in steps (w toggles it)
    read_only: bool = False                     # --read-only (--serve's): every key that signals is refused
    poll: bool = False                          # --poll: follow the run by polling whatever its filesystem
    bell: bool = True                           # an alert rings the terminal's bell (--no-bell)
    notify: list[str] | None = None             # --notify CMD: run for each alert, its JSON on stdin
    notify_timeout: float = NOTIFY_TIMEOUT_S
    stall_after: float | None = None            # --stall-after: a trainer silent this long is stalled
    # How the console follows the run (tests and benchmarks fix these).
    watch: bool = True                          # a watcher reads what changes (False: only what is asked)
    tick: float | None = TICK_S                 # the trainer's liveness re-read this often; None: never
    refresh: float | None = REFRESH_S           # the overview scans the runs this often; None: once
    now: Callable[[], float] = time.time
    probe: Callable[[Path], TrainerView] | None = None     # the trainer's view (None: the real probe)
    verify: Callable[[Path], Verification] = verify_trainer  # the overview's verification of each trainer
    free_space: Callable[[Path], int | None] = free_bytes
    # What the command line hands the run it opens.
    child: subprocess.Popen | None = None       # the trainer --start launched
    reader: RunReader | None = None             # a reader already reading it (the history's prefetch)

    def reader_for(self, run_dir: Path) -> RunReader:
        """A reader of ``run_dir`` with these options' clock, probe, stall rule and free space."""
        return RunReader(run_dir, now=self.now, probe=self.probe, stall_after=self.stall_after,
                         free_space=self.free_space)
