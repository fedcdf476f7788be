"""One open run of the console: what following it is made of, in one object.

A :class:`RunSession` owns its reader, the paced reads the watcher feeds (and the read loop
drains), the watcher's stop event, the checkpoints asked for and not landed yet, the newest
snapshot and the trainer this console started for it. The app runs the session's workers
(Textual's workers are the app's); the session holds the state, so opening a run is a new
session, and closing it (:meth:`close`) stops everything it follows at once: a read still
under way ends with a snapshot no view takes.
"""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path
from typing import Callable

from textual.message import Message

from ..model.snapshot import RunSnapshot
from ..read.landing import AwaitedCheckpoints
from ..read.reader import RunReader
from ..read.watcher import PacedReads
from .messages import ConsoleNotice, SnapshotReady


class RunSession:
    def __init__(self, run_dir: Path, reader: RunReader, post: Callable[[Message], object],
                 now: Callable[[], float], start_reads: Callable[[PacedReads], object],
                 child: subprocess.Popen | None = None):
        self.run_dir = run_dir
        self.reader = reader
        self.child = child                      # the trainer this console started (--start), if any
        self.child_reported = False             # its exit said (once)
        self.snapshot: RunSnapshot | None = None
        self.stop_watch = threading.Event()     # the watcher's: set, it ends
        self.reads = PacedReads(reader.read, post, SnapshotReady, ConsoleNotice, now, start=start_reads)
        self.closed = False

    @property
    def awaited(self) -> AwaitedCheckpoints:
        """The checkpoints asked of this run's trainer and not landed yet: the signal job adds
        to them, the session's reads settle them (its reader's, where the checkpoints are read)."""
        return self.reader.awaited

    def request_read(self, kinds: set[str] | frozenset[str]) -> None:
        """Queue kinds to re-read (a burst of changes becomes one read)."""
        self.reads.request(kinds)

    def takes(self, snapshot: RunSnapshot) -> bool:
        """Whether ``snapshot`` is this open session's run (a read of a run closed since, or of
        another run, is dropped)."""
        return not self.closed and snapshot.run_dir == self.run_dir

    def close(self) -> None:
        """The watcher stops and the run's reads with it: nothing more is read."""
        self.closed = True
        self.stop_watch.set()
        self.reads.close()
