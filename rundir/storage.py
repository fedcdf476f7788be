"""How much a run directory holds, how much room its filesystem has, and how long that lasts.

The console shows it so that a disk never fills unseen: the directory's size, the free space,
"full in ~X" from the growth rate, and a problem when fewer than three checkpoints fit. The
growth rate is the steady state of the run's own policy, not a guess from two sizes: the
history's bytes per step, plus one checkpoint per ``keep_every`` steps (those are kept for
good), or one per ``checkpoint_every`` steps when ``keep_last`` is 0 (everything is kept);
the rolling ``keep_last`` window does not grow.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

# Entries counted at most (a directory holding millions of files is sized approximately).
MAX_ENTRIES = 100_000
FIT_AT_LEAST = 3


@dataclass(frozen=True)
class Storage:
    """The run directory's footprint and its filesystem's room."""

    used: int                           # bytes in the run directory (archive/ included)
    free: int | None                    # bytes free for this user on its filesystem
    checkpoint_size: int | None         # one checkpoint (.bin + .json), from the newest
    growth_per_s: float | None          # bytes per second at the current speed and policy
    approximate: bool = False           # more entries than MAX_ENTRIES: the size is a lower bound

    @property
    def checkpoints_that_fit(self) -> int | None:
        if self.free is None or not self.checkpoint_size:
            return None
        return self.free // self.checkpoint_size

    @property
    def full_in_s(self) -> float | None:
        """Seconds until the filesystem is full at this growth rate (None: not growing)."""
        if self.free is None or not self.growth_per_s or self.growth_per_s <= 0:
            return None
        return self.free / self.growth_per_s

    @property
    def too_full(self) -> bool:
        """Fewer than three checkpoints fit: the next writes may fail."""
        fit = self.checkpoints_that_fit
        return fit is not None and fit < FIT_AT_LEAST


def directory_size(run_dir: str | os.PathLike[str]) -> tuple[int, bool]:
    """``(bytes, approximate)``: the files of the run directory and of its subdirectories
    (archive/), without following links; at most :data:`MAX_ENTRIES` entries are counted."""
    total, seen, stack = 0, 0, [Path(run_dir)]
    while stack:
        try:
            entries = os.scandir(stack.pop())
        except OSError:
            continue
        with entries:
            for entry in entries:
                seen += 1
                if seen > MAX_ENTRIES:
                    return total, True
                try:
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(Path(entry.path))
                    elif entry.is_file(follow_symlinks=False):
                        total += entry.stat(follow_symlinks=False).st_size
                except OSError:
                    continue
    return total, False


def growth_per_step(history_bytes: int, last_step: int | None, checkpoint_size: int | None, checkpoint_every: int,
                    keep_last: int, keep_every: int) -> float | None:
    """Bytes the run directory gains per training step in the steady state of its policy."""
    if not last_step or last_step <= 0:
        return None
    per_step = history_bytes / last_step
    if checkpoint_size:
        if keep_last == 0:
            per_step += checkpoint_size / checkpoint_every
        elif keep_every:
            per_step += checkpoint_size / max(keep_every, checkpoint_every)
    return per_step


def free_bytes(path: str | os.PathLike[str]) -> int | None:
    """Free bytes for this user on the filesystem of ``path`` (None: it cannot be asked)."""
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return None


def measure(run_dir: str | os.PathLike[str], checkpoint_size: int | None, growth_per_step_bytes: float | None,
            steps_per_s: float | None, free: int | None = None) -> Storage:
    """The run directory's :class:`Storage` (a directory walk, and one statvfs unless ``free``
    is given)."""
    used, approximate = directory_size(run_dir)
    free = free_bytes(run_dir) if free is None else free
    growth = growth_per_step_bytes * steps_per_s if growth_per_step_bytes and steps_per_s else None
    return Storage(used, free, checkpoint_size, growth, approximate)
