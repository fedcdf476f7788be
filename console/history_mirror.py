"""The console's use of the history's mirror (:mod:`rundir.history.mirror`): open a history
through it, say what happened to it, and keep it up as the history grows.

The policy, :class:`HistoryMirror`:

- **Opening** (the first read of a run, the prefetch's child, the overview's compare): a
  valid mirror is mapped and only the bytes appended since its offset are parsed; one that
  does not match the history is removed, the history is parsed, and a note
  (:data:`~console.model.snapshot.MIRROR_REBUILT`) says why, once.
- **Writing** it (atomically, replacing the old one): when the history is at least
  :data:`~rundir.history.mirror.MIN_MIRROR_BYTES` long and it had no mirror, the mirror was
  refused, the history was replaced or shrank, or it has grown
  :data:`~rundir.history.mirror.REWRITE_AFTER_BYTES` past what the mirror holds. Never at
  every read: writing a long run's mirror writes all of its columns.
- **A cache that cannot be written** (read-only, full): the history is read as without a
  mirror, a note (:data:`~console.model.snapshot.MIRROR_NOT_SAVED`) says so once, and the
  write is tried again only after another ``REWRITE_AFTER_BYTES``.
"""

from __future__ import annotations

import os
from pathlib import Path

from rundir.history import HistoryUpdate, LossHistory
from rundir.history.mirror import (MIN_MIRROR_BYTES, REWRITE_AFTER_BYTES, as_read, forget_mirror, open_mirror,
                                   save_mirror)

from .model.mirror_note import MIRROR_NOT_SAVED, MIRROR_REBUILT, MirrorNote


# Histories shorter than this get no mirror (read at use: tests mirror small histories).
MIN_BYTES = MIN_MIRROR_BYTES


class HistoryMirror:
    """The mirror of one history: :meth:`open` it once, then :meth:`keep_up` after each read."""

    def __init__(self, path: str | os.PathLike[str], min_bytes: int | None = None):
        self.path = Path(path)
        self.min_bytes = MIN_BYTES if min_bytes is None else min_bytes
        self.mirrored_to: int | None = None      # the history's size the mirror holds (None: no good mirror)
        self.failed_at: int | None = None        # the history's size when the cache could not be written

    def open(self) -> tuple[LossHistory, HistoryUpdate, MirrorNote | None]:
        """The history read to its end, from its mirror when that is valid; the update of the
        whole read (as if parsed), and the note when a mirror was there and refused. The
        mirror is not written here (:meth:`keep_up` does). Never raises."""
        history, why = open_mirror(self.path)
        if history is None:
            history = LossHistory(self.path)
            if why is not None:
                forget_mirror(history.path)        # refused once: not checked (and said) again
            return history, history.refresh(), MirrorNote(MIRROR_REBUILT, why) if why is not None else None
        self.mirrored_to = history._offset        # what it holds; the rest is parsed now
        return history, as_read(history).then(history.refresh()), None

    def _position(self, history: LossHistory) -> int:
        try:
            return os.stat(history.path).st_size
        except OSError:
            return 0

    def due(self, history: LossHistory, update: HistoryUpdate) -> bool:
        """Whether the mirror should be written after this read (see the module's policy)."""
        if update.reset:
            self.mirrored_to = None                # the history was replaced or shrank: its mirror is not it
        if history.error is not None or history.format is None:
            return False
        size = self._position(history)
        if size < self.min_bytes:
            return False
        if self.failed_at is not None and size - self.failed_at < REWRITE_AFTER_BYTES:
            return False
        return self.mirrored_to is None or size - self.mirrored_to >= REWRITE_AFTER_BYTES

    def save(self, history: LossHistory) -> MirrorNote | None:
        """Write the mirror now; the note when the cache could not be written."""
        size = self._position(history)
        why = save_mirror(history)
        if why is None:
            self.mirrored_to, self.failed_at = size, None
            return None
        if why.cache_failed:
            self.failed_at = size
            return MirrorNote(MIRROR_NOT_SAVED, why)
        return None                                # the history moved while it was read: the next read tries

    def keep_up(self, history: LossHistory, update: HistoryUpdate) -> MirrorNote | None:
        """After a read: write the mirror when it is due; the note when that failed."""
        return self.save(history) if self.due(history, update) else None
