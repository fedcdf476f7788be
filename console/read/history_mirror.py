"""The console's use of the history's mirror (:mod:`console.read.mirror_file`): open a history
through it, say what happened to it, and keep it up as the history grows.

The policy, :class:`HistoryMirror`:

- **Opening** (the first read of a run, the prefetch's child, the overview's compare): a
  valid mirror is mapped (read, on a filesystem other hosts share) and only the bytes
  appended since its offset are parsed; one that does not match the history is removed, the
  history is parsed, and a note (:data:`~console.model.snapshot.MIRROR_REBUILT`) says why,
  once. A mirror used is then verified whole (:meth:`HistoryMirror.verify`, the CRC-32 of
  every byte it covers: the dashboard does it in the background after its first frame).
- **Writing** it (atomically, replacing the old one): when the history is at least
  :data:`~console.read.mirror_file.MIN_MIRROR_BYTES` long and it had no mirror, the mirror was
  refused, the history was replaced or shrank, or it has grown
  :data:`~console.read.mirror_file.REWRITE_AFTER_BYTES` past what the mirror holds (or by half
  the spare rows its columns have). Never at every read: writing a long run's mirror writes all
  of its columns. A mirror just written is then mapped in place of the history's columns
  (:meth:`HistoryMirror.mapped`): a console on a live run holds as its own memory only the
  rows read since, and the rest are the page cache's.
- **A cache that cannot be written** (read-only, full): the history is read as without a
  mirror, a note (:data:`~console.model.snapshot.MIRROR_NOT_SAVED`) says so once, and the
  write is tried again only after another ``REWRITE_AFTER_BYTES``.
- **The spike detectors** of the loss and the grad-norm (:mod:`console.model.spikes`, a scan of
  every step: about half a second each for 5M) are kept beside the mirror (``.spikes.json``:
  the flags and non-finite steps found) for exactly the rows the mirror holds, and carried on
  at the next open that uses that mirror with the same window and k, so that only the rows
  appended since are scanned.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import orjson

from rundir.atomic import atomic_write_bytes
from rundir.filesystems import filesystem_of
from rundir.history import HistoryUpdate, LossHistory

from ..model.mirror_note import MIRROR_NOT_SAVED, MIRROR_REBUILT, MirrorNote
from ..model.series_blocks import BLOCK_ROWS
from .cache_dir import mirror_path, read_cache_file
from .mirror_file import (
    MIN_MIRROR_BYTES,
    REWRITE_AFTER_BYTES,
    SPARE_ROWS,
    CrcAhead,
    as_read,
    forget_mirror,
    open_mirror,
    save_mirror,
    verify_covered,
)

if TYPE_CHECKING:
    from ..model.series_blocks import SeriesBlocks
    from ..model.spikes import SpikeDetector


# Histories shorter than this get no mirror (read at use: tests mirror small histories).
MIN_BYTES = MIN_MIRROR_BYTES
# A spike detector that found more flags and non-finite steps than this is not kept.
MAX_DETECTOR_ITEMS = 100_000
# A kept scan file larger than this is none of ours (100,000 items of a few dozen bytes).
MAX_DETECTOR_BYTES = 32 << 20
DETECTOR_SUFFIX = ".spikes.json"
# The series table's blocks (console.model.series_blocks) kept beside the mirror.
SUMMARY_SUFFIX = ".series.json"
SUMMARY_VERSION = 1
MAX_SUMMARY_BYTES = 16 << 20
# The history's columns whose spike detectors are kept beside the mirror.
DETECTED_COLUMNS = ("loss", "grad_norm")


class HistoryMirror:
    """The mirror of one history: :meth:`open` it once, then :meth:`keep_up` after each read."""

    def __init__(self, path: str | os.PathLike[str], min_bytes: int | None = None, shared: bool | None = None):
        self.path = Path(path)
        self.min_bytes = MIN_BYTES if min_bytes is None else min_bytes
        self.shared = shared                     # the cache on a filesystem hosts share (None: ask it)
        self.mirrored_to: int | None = None      # the history's size the mirror holds (None: no good mirror)
        self.failed_at: int | None = None        # the history's size when the cache could not be written
        # The rows and byte offset the mirror holds (None: no good mirror), and its header's
        # source (as this open found it or the last save wrote it): what a kept spike
        # detector must have been made with.
        self.mirrored_rows: int | None = None
        self.mirrored_offset: int | None = None
        self.source: dict | None = None
        # The source of the mirror this open used (None: parsed), to verify whole (verify).
        self.opened_from: dict | None = None
        self._ahead: CrcAhead | None = None      # the CRC-32 of a history parsed whole, beside the parse
        self.just_saved = False                  # the last keep_up wrote the mirror
        self._kept: set[str] = set()             # the columns whose detectors are kept for this mirror
        self._summaries_kept: Any = None         # what keep_summaries wrote last (the mirror, its blocks)

    def open(self) -> tuple[LossHistory, HistoryUpdate, MirrorNote | None]:
        """The history read to its end, from its mirror when that is valid; the update of the
        whole read (as if parsed), and the note when a mirror was there and refused. The
        mirror is not written here (:meth:`keep_up` does). Never raises."""
        history, why, source = open_mirror(self.path, self.shared)
        if history is None:
            history = LossHistory(self.path)
            if self._position(history) >= self.min_bytes:
                self._ahead = CrcAhead(self.path)   # for the save that follows the parse
            if why is not None:
                forget_mirror(history.path)        # refused once: not checked (and said) again
                for kept in (self._detector_path(), self._summary_path()):
                    try:
                        kept.unlink()
                    except OSError:
                        pass
            return history, history.refresh(), MirrorNote(MIRROR_REBUILT, why) if why is not None else None
        self.mirrored_to = self.mirrored_offset = history._offset     # what it holds; the rest is parsed now
        self.mirrored_rows, self.source, self.opened_from = len(history), source, source
        return history, as_read(history).then(history.refresh()), None

    def verify(self, should_stop: Callable[[], bool] | None = None) -> bool | None:
        """Whether every byte of the history that the mirror this open used covers is still
        the one it was made of (a full CRC-32: the sampled blocks of the open see no change
        between them); None when no mirror was used or it cannot be told (see
        :func:`~console.read.mirror_file.verify_covered`). Any thread; reads the history only."""
        source = self.opened_from
        return None if source is None else verify_covered(self.path, source, should_stop)

    def forget(self) -> None:
        """The mirror is not the history (a verification failed): remove it and what is kept
        beside it; the next :meth:`keep_up` writes it again from the history parsed anew."""
        forget_mirror(self.path)
        for kept in (self._detector_path(), self._summary_path()):
            try:
                kept.unlink()
            except OSError:
                pass
        self.mirrored_to = self.mirrored_rows = self.mirrored_offset = None
        self.source = self.opened_from = None
        self._kept = set()

    def _base(self, history: LossHistory) -> tuple[int, int] | None:
        """``(covered, crc)`` of bytes the reader's first rows came from: the mirror's, or
        those of the CRC computed beside the parse."""
        source = self.source
        if source is not None and self.mirrored_offset is not None:
            return int(source["covered"]), int(source["crc"])
        ahead, self._ahead = self._ahead, None
        return ahead.base(history._offset, history._identity) if ahead is not None else None

    def _position(self, history: LossHistory) -> int:
        try:
            return os.stat(history.path).st_size
        except OSError:
            return 0

    def due(self, history: LossHistory, update: HistoryUpdate) -> bool:
        """Whether the mirror should be written after this read (see the module's policy)."""
        if update.reset:                           # the history was replaced or shrank: its mirror is not it
            self.mirrored_to = self.mirrored_rows = self.mirrored_offset = None
            self.source = self._ahead = None
        if history.error is not None or history.format is None:
            return False
        size = self._position(history)
        if size < self.min_bytes:
            return False
        if self.failed_at is not None and size - self.failed_at < REWRITE_AFTER_BYTES:
            return False
        # Or before the rows read since outgrow the room the mapped columns have for them
        # (:meth:`mapped`): past it they would be copied whole into this process's memory.
        rows_since = len(history) - self.mirrored_rows if self.mirrored_rows is not None else 0
        return self.mirrored_to is None or size - self.mirrored_to >= REWRITE_AFTER_BYTES \
            or rows_since >= SPARE_ROWS // 2

    def save(self, history: LossHistory) -> MirrorNote | None:
        """Write the mirror now; the note when the cache could not be written."""
        size = self._position(history)
        written: dict[str, Any] = {}
        why = save_mirror(history, self._base(history), written)
        if why is None:
            self.mirrored_to, self.failed_at = size, None
            self.mirrored_rows, self.mirrored_offset = len(history), history._offset
            self.source = written
            return None
        if why.cache_failed:
            self.failed_at = size
            return MirrorNote(MIRROR_NOT_SAVED, why)
        return None                                # the history moved while it was read: the next read tries

    def keep_up(self, history: LossHistory, update: HistoryUpdate) -> MirrorNote | None:
        """After a read: write the mirror when it is due; the note when that failed."""
        self.just_saved = False
        if not self.due(history, update):
            return None
        note = self.save(history)
        self.just_saved = self.mirrored_offset == history._offset and note is None
        return note

    def mapped(self, history: LossHistory) -> LossHistory:
        """``history`` as the mirror :meth:`keep_up` has just written holds it, its columns mapped
        from that file instead of held in this process's memory: a console on a live run then
        keeps as its own only the rows read since the last mirror, and the rest are the page
        cache's, read where a view needs them. ``history`` itself when the mirror was not just
        written, is read rather than mapped (a cache other hosts share), or does not hold
        exactly its rows (a torn last line or bytes not yet arrived are read again from it)."""
        if not self.just_saved or history.torn_tail or history.awaiting_late_bytes:
            return history
        shared = self.shared if self.shared is not None else filesystem_of(mirror_path(self.path)).shared
        if shared:
            return history
        remapped, _, _ = open_mirror(self.path, shared=False)
        if remapped is None or remapped._offset != history._offset or len(remapped) != len(history) \
                or remapped.rows_read != history.rows_read:
            return history
        return remapped

    # -- the spike detectors kept beside the mirror -------------------------------------
    def _detector_path(self) -> Path:
        mirror = mirror_path(self.path)
        return mirror.with_name(mirror.name + DETECTOR_SUFFIX)

    def load_detectors(self, history: LossHistory, window: int, k: float) -> "dict[str, SpikeDetector]":
        """The spike detectors kept with the mirror this open used (``loss``, ``grad_norm``),
        each carried on from the rows the mirror holds; those there are for this mirror,
        window and k."""
        self._kept = set()
        if self.mirrored_rows is None or self.source is None:
            return {}
        from ..model.spikes import SpikeDetector

        try:
            # Never through a symlink, never blocking on a FIFO, bounded; orjson caps nesting.
            kept = orjson.loads(read_cache_file(self._detector_path(), MAX_DETECTOR_BYTES))
            if kept["source"] != self.source:
                return {}
            states = kept["states"]
        except (OSError, ValueError, KeyError, TypeError):
            return {}
        found = {}
        for column in DETECTED_COLUMNS:
            state = states.get(column) if isinstance(states, dict) else None
            try:
                if state is None or state["rows"] != self.mirrored_rows or \
                        (state["window"], state["k"]) != (window, float(k)):
                    continue
                detector = SpikeDetector.from_state_dict(state, history.step, getattr(history, column))
            except (ValueError, KeyError, TypeError, OverflowError, IndexError):
                continue
            if detector is not None:
                found[column] = detector
                self._kept.add(column)
        return found

    # -- the series table's blocks kept beside the mirror ---------------------------------------
    def _summary_path(self) -> Path:
        mirror = mirror_path(self.path)
        return mirror.with_name(mirror.name + SUMMARY_SUFFIX)

    def load_summaries(self, history: LossHistory, blocks: "SeriesBlocks") -> bool:
        """Hand ``blocks`` the series table's blocks kept with the mirror this open used, for
        the rows nothing changed since (:meth:`SeriesBlocks.good_rows`); whether there were any."""
        if self.mirrored_rows is None or self.source is None:
            return False
        try:
            kept = orjson.loads(read_cache_file(self._summary_path(), MAX_SUMMARY_BYTES))
            if kept["source"] != self.source or kept["version"] != SUMMARY_VERSION or \
                    kept["block_rows"] != BLOCK_ROWS or int(kept["rows"]) > self.mirrored_rows:
                return False
            blocks.adopt(history, blocks.blocks_of(kept), blocks.good_rows(history, kept))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return False
        return True

    def keep_summaries(self, blocks: "SeriesBlocks") -> None:
        """Keep ``blocks``' blocks of the rows the mirror holds beside it, when it holds more of
        them than are kept; nothing is said when they cannot be written (the mirror's note is)."""
        rows, source = self.mirrored_rows, self.source
        if rows is None or source is None:
            return
        state = blocks.state(rows)
        kept = (source.get("crc"), state["rows"], sorted((name, len(b)) for name, b in state["series"].items()))
        if kept == self._summaries_kept or not state["rows"]:
            return
        self._summaries_kept = kept             # tried once per mirror and blocks
        try:
            atomic_write_bytes(self._summary_path(), orjson.dumps({"source": source, "version": SUMMARY_VERSION,
                                                                   **state}), durable=False)
        except (OSError, ValueError, TypeError):
            pass

    def keep_detectors(self, history: LossHistory, detectors: "dict[str, SpikeDetector | None]") -> None:
        """Keep the detectors beside the mirror when one that read exactly what the mirror holds
        (no byte of the history past it) is not kept yet: at the open that scanned them, and
        after the mirror was written again. Nothing is said when they cannot be written: the
        mirror's own note says what is wrong with the cache."""
        if self.just_saved:
            self._kept = set()
        if self.mirrored_rows is None or history._offset != self.mirrored_offset or len(history) != self.mirrored_rows:
            return
        ready = {column: d for column, d in detectors.items() if d is not None and d.rows == self.mirrored_rows}
        if not ready or set(ready) <= self._kept:
            return
        self._kept |= set(ready)                 # tried once per mirror, written or not
        states = {column: d.state_dict() for column, d in ready.items()}
        states = {column: state for column, state in states.items()
                  if sum(len(v) for v in state.values() if isinstance(v, list)) <= MAX_DETECTOR_ITEMS}
        if not states or self.source is None:
            return
        try:
            atomic_write_bytes(self._detector_path(), json.dumps({"source": self.source, "states": states}).encode(),
                               durable=False)         # a torn one fails to parse, and is not used
        except (OSError, ValueError):
            pass
