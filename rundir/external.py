"""Checkpoints in another trainer's own format: the ``external_checkpoint`` event.

A trainer of its own that reports through the run API (:mod:`rundir.run`) saves its
checkpoints as it always has (``torch.save``, a framework's ``.ckpt``, a Hugging Face
``checkpoint-N/`` directory, torch.distributed.checkpoint). Each one saved is recorded as an
event line of the history: ``{"event": "external_checkpoint", "step", "time", "path",
"size", "checksum"?, "reason"}``, ``path`` relative to the run directory when it lies inside
it. The console lists them as ``external`` (size and age) and says when a requested one
lands; it never resumes or rolls back from one: their format is their trainer's.
"""

from __future__ import annotations

import errno
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from .history.records import HistoryEvent, is_int
from .layout import EVENT_EXTERNAL_CHECKPOINT

STATUS = "external"


@dataclass(frozen=True)
class ExternalCheckpoint:
    """One ``external_checkpoint`` event, as the console shows it."""

    step: int
    path: str                   # as recorded: relative to the run directory, or absolute
    size: int | None
    time: float | None          # when it was reported saved (the trainer's clock)
    checksum: str | None = None
    reason: str = ""            # "signal": it answered a request (SIGUSR1, a stop, the request file)
    status: str = STATUS

    @property
    def mtime(self) -> float | None:
        """When it was saved, as the checkpoints pane dates every row (ours by the file's mtime)."""
        return self.time

    @property
    def name(self) -> str:
        """Its last path component, as a listing names it."""
        return Path(self.path).name or self.path


def external_checkpoints(events: Iterable[HistoryEvent]) -> tuple[ExternalCheckpoint, ...]:
    """The trainer's own checkpoints, one per path, oldest first: a path saved over (nanoGPT's
    one ``ckpt.pt``) is one checkpoint, its newest event's (the file holds that step now, not
    the ones before it). From every well-formed ``external_checkpoint`` event (one without a
    step or a path is not listed)."""
    found: dict[str, ExternalCheckpoint] = {}
    for ev in events:
        if ev.event != EVENT_EXTERNAL_CHECKPOINT or ev.step is None:
            continue
        data = ev.data
        path, size, checksum, reason = data.get("path"), data.get("size"), data.get("checksum"), data.get("reason")
        if not isinstance(path, str) or not path:
            continue
        when = ev.time if ev.time is not None and math.isfinite(ev.time) else None
        found.pop(path, None)                   # saved over: listed where its newest save falls
        found[path] = ExternalCheckpoint(ev.step, path, size if is_int(size) and size >= 0 else None, when,
                                         checksum if isinstance(checksum, str) else None,
                                         reason if isinstance(reason, str) else "")
    return tuple(found.values())


def reported_files(checkpoints: Iterable[ExternalCheckpoint]) -> frozenset[str]:
    """The names of the run directory's own files that the trainer reported as its checkpoints
    (a path of one component): such a file is that trainer's checkpoint, whatever its name,
    and a listing of this repository's checkpoints (``step_NNNNNN.bin``) leaves it out, so
    that a ``step_000010.bin`` of another format is one checkpoint, judged once, never also
    an invalid one of ours."""
    return frozenset(c.path for c in checkpoints if c.path and os.sep not in c.path and c.path not in (".", ".."))


# A checkpoint directory holds at most this many entries: past it the path is not one
# checkpoint (a checkpoint_saved(s, "/") must not walk the whole filesystem).
MAX_CHECKPOINT_ENTRIES = 100_000


def saved_size(path: str | os.PathLike[str]) -> int:
    """The bytes of a checkpoint: a file's size, or every regular file's under a directory
    (symbolic links not followed, no other filesystem entered). Raises OSError when there is
    nothing there, or a directory holds more than :data:`MAX_CHECKPOINT_ENTRIES` entries."""
    st = os.stat(path)
    if not os.path.isdir(path):
        return st.st_size
    total = seen = 0
    for root, dirs, files in os.walk(path):
        seen += len(dirs) + len(files)
        if seen > MAX_CHECKPOINT_ENTRIES:
            raise OSError(errno.EFBIG, f"holds more than {MAX_CHECKPOINT_ENTRIES:,} entries: not one checkpoint")
        dirs[:] = [d for d in dirs if not os.path.ismount(os.path.join(root, d))]
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                continue            # removed while walked
    return total
