"""Following a run directory: its changes seen, and read, paced, in worker threads that only
post messages.

:func:`watch_run` blocks until ``stop`` is set; the app runs it in a thread worker. It
hands ``post`` the kinds of file that changed (see :func:`rundir.layout.kind_of`) and
never touches a widget: the dashboard hands them straight to its :class:`PacedReads`,
whose loop (another thread worker) reads them and posts the snapshot. How a run is
followed depends on the filesystem under it (:mod:`rundir.filesystems`):

- **Where change events can be trusted** (a local disk), inotify through watchfiles, plus
  a poll of the run's files every :data:`SAFETY_POLL_S`: a missed event (an exhausted
  inotify, a write through a bind mount's other side) is never permanent.
- **Where they cannot** (NFS, Lustre, GPFS, BeeGFS, CephFS, SMB, 9p, FUSE, overlay; or
  ``--poll``): a poll every :data:`POLL_S`. inotify only reports writes made through this
  host's kernel, and the trainer writes from a compute node.

A poll (:class:`RunFingerprint`) reopens each file of the contract and looks at it with
``fstat``: on NFS, close-to-open consistency revalidates a file's attributes when it is
opened, not when a long-open descriptor is looked at. It also lists the directory, which
is how a checkpoint renamed into place is seen. A run directory that does not exist yet
(or disappears) is waited for until it does.
"""

from __future__ import annotations

import math
import os
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Callable

import watchfiles

from rundir.filesystems import Filesystem, Stamp, filesystem_of, forced_polling, fresh_stamp, listing_cache
from rundir.layout import ALL_KINDS, CHECKPOINTS, CONFIG, DIRECTORY, KNOWN_NAMES, TRAINER, is_temporary, kind_of

from ..model.levels import Level
from ..model.snapshot import Notice, RunSnapshot

# watchfiles batches changes: it yields once no change came for STEP_MS, or after
# DEBOUNCE_MS at the latest. A trainer that writes every 100 ms therefore wakes the
# console about twice a second, not ten times.
DEBOUNCE_MS = 500
STEP_MS = 200
MISSING_POLL_S = 1.0
# A poll of the run's files where events cannot be trusted (the step shown lags the file by
# at most this plus one read), and where they can, as a safety net.
POLL_S = 0.5
SAFETY_POLL_S = 5.0
# Reads are coalesced: at most one every MIN_READ_INTERVAL_S when a checkpoint, the
# trainer record, run.toml or the directory changed, and one every STEADY_READ_INTERVAL_S
# when only the files a trainer rewrites at every step did (history, state, samples, log);
# where the run is polled, one every POLL_S (PacedReads.steady_s), which paces the changes already.
MIN_READ_INTERVAL_S = 0.25
STEADY_READ_INTERVAL_S = 1.0
URGENT_KINDS = frozenset({CHECKPOINTS, TRAINER, CONFIG, DIRECTORY})
# How often a read loop waiting for its time looks whether it was cancelled.
CANCEL_CHECK_S = 0.05


def kinds_of(changes: set[tuple[watchfiles.Change, str]]) -> frozenset[str]:
    kinds = {kind_of(Path(path).name) for _, path in changes}
    kinds.discard(None)
    return frozenset(kinds)   # type: ignore[arg-type]


class RunFingerprint:
    """What a poll compares from one look to the next: each contract file's stamp (from a
    fresh open) and the directory's names. :meth:`changed` says which kinds of file differ
    since the last look. ``list_always``: list the directory at every look (where its own
    mtime may be a cached one), else only when its stamp changed."""

    def __init__(self, run_dir: Path, list_always: bool):
        self.run_dir = run_dir
        self.list_always = list_always
        self._paths = {name: os.path.join(run_dir, name) for name in KNOWN_NAMES}
        self._stamps: dict[str, Stamp | None] = {}
        self._dir: Stamp | None = None
        self._names: frozenset[str] = frozenset()
        self.changed()                      # the baseline: the first read reads everything anyway

    def changed(self) -> frozenset[str]:
        kinds: set[str] = set()
        for name, path in self._paths.items():
            stamp = fresh_stamp(path)
            if stamp != self._stamps.get(name):
                self._stamps[name] = stamp
                kinds.add(KNOWN_NAMES[name])
        dir_stamp = fresh_stamp(self.run_dir)
        if self.list_always or dir_stamp != self._dir:
            self._dir = dir_stamp
            names = self._list()
            for name in names ^ self._names:
                kind = kind_of(name)
                if kind is not None:
                    kinds.add(kind)
            self._names = names
        return frozenset(kinds)

    def _list(self) -> frozenset[str]:
        try:
            return frozenset(name for name in os.listdir(self.run_dir) if not is_temporary(name))
        except OSError:
            return frozenset()


def watch_run(run_dir: Path, post: Callable[[frozenset[str]], None], stop: threading.Event, *,
              poll: bool = False, announce: Callable[[Filesystem], None] = lambda fs: None) -> None:
    """Post the kinds of every batch of changes in ``run_dir`` until ``stop`` is set.
    ``announce`` is told how the run is followed (the filesystem under it) when that is known
    or changes; ``poll`` polls whatever the filesystem promises (``--poll``)."""
    existed = run_dir.is_dir()
    said: Filesystem | None = None
    while not stop.is_set():
        if not run_dir.is_dir():
            if existed:
                post(ALL_KINDS)
                existed = False
            stop.wait(MISSING_POLL_S)
            continue
        if not existed:
            post(ALL_KINDS)           # it appeared: read everything
            existed = True
        fs = filesystem_of(run_dir)
        fs = forced_polling(fs) if poll else fs
        fs = replace(fs, listing=listing_cache(run_dir)) if fs.shared else fs
        # Taken before the announcement: a change made once the run is said to be followed
        # differs from it, so the poll (or the safety poll) sees it even before inotify watches.
        fingerprint = RunFingerprint(run_dir, list_always=not fs.events)
        if fs != said:
            announce(fs)
            said = fs
        if fs.events:
            _follow_events(run_dir, post, stop, fingerprint)
        else:
            _follow_polling(run_dir, post, stop, fingerprint)


def _follow_polling(run_dir: Path, post: Callable[[frozenset[str]], None], stop: threading.Event,
                    fingerprint: RunFingerprint) -> None:
    """Poll until ``stop`` is set or the directory is gone."""
    while not stop.wait(POLL_S):
        if not run_dir.is_dir():
            return
        kinds = fingerprint.changed()
        if kinds:
            post(kinds)


def _follow_events(run_dir: Path, post: Callable[[frozenset[str]], None], stop: threading.Event,
                   fingerprint: RunFingerprint) -> None:
    """inotify until ``stop`` is set or the directory is gone, with a poll now and then."""
    polled = time.monotonic()
    try:
        for changes in watchfiles.watch(run_dir, watch_filter=None, stop_event=stop, debounce=DEBOUNCE_MS,
                                        step=STEP_MS, rust_timeout=int(POLL_S * 1000), yield_on_timeout=True,
                                        recursive=False, raise_interrupt=False, ignore_permission_denied=True):
            if changes:
                kinds = kinds_of(changes)
                if kinds:
                    post(kinds)
            elif not run_dir.is_dir():          # a quiet timeout: is the directory still there?
                return
            if time.monotonic() - polled >= SAFETY_POLL_S:
                polled = time.monotonic()
                kinds = fingerprint.changed()
                if kinds:
                    post(kinds)
    except (OSError, RuntimeError):
        # The directory went away under the watcher, or inotify is exhausted: poll instead.
        _follow_polling(run_dir, post, stop, fingerprint)


class PacedReads:
    """The kinds asked for (by the watcher, the tick, a signal's answer) read one read at a
    time, a burst of changes as one read, so reads never overlap and keys never wait for the
    disk. :meth:`request` may be called from any thread: when no read loop runs, it asks
    ``start(self)`` for one (a thread worker that calls :meth:`drain`, which returns as soon
    as nothing is left, so quitting never waits for it). ``read`` is the run reader's; each
    snapshot goes to ``post`` as ``message(snapshot, notices)``, a read that raised as
    ``failed(notice)`` (a reader bug must not take the dashboard down)."""

    def __init__(self, read: Callable[[frozenset[str]], tuple[RunSnapshot, list[Notice]]],
                 post: Callable[[object], object], message: Callable[[RunSnapshot, list[Notice]], object],
                 failed: Callable[[Notice], object], now: Callable[[], float],
                 start: Callable[["PacedReads"], object]):
        self.read, self.post, self.message, self.failed, self.now = read, post, message, failed, now
        self.start = start
        self.steady_s = STEADY_READ_INTERVAL_S
        self._pending: set[str] = set()
        self._running = False
        self._closed = False
        self._wake = threading.Condition()
        self._last_read = -math.inf

    def request(self, kinds: set[str] | frozenset[str]) -> None:
        with self._wake:
            if self._closed:
                return
            self._pending |= kinds
            self._wake.notify()                 # an urgent kind may end the loop's wait sooner
            if self._running:
                return
            self._running = True
        if not self.start(self):                # the app is closing: no loop
            with self._wake:
                self._running = False

    def close(self) -> None:
        """Nothing more is read: what is asked for now and later is dropped (the run was closed)."""
        with self._wake:
            self._closed = True
            self._pending.clear()
            self._wake.notify()

    def drain(self, cancelled: Callable[[], bool]) -> None:
        """Read what is asked for, paced, until nothing is left (or ``cancelled()``)."""
        while (kinds := self._next(cancelled)) is not None:
            self._last_read = time.monotonic()
            try:
                snapshot, notices = self.read(kinds)
            except Exception as err:          # noqa: BLE001  (said, and the next read comes)
                self.post(self.failed(Notice(self.now(), f"read failed: {err!r}", Level.ERROR)))
                continue
            self.post(self.message(snapshot, notices))

    def _next(self, cancelled: Callable[[], bool]) -> frozenset[str] | None:
        """The kinds of the next read, once its time has come; None (the loop ends) when
        nothing is asked for or the loop is cancelled."""
        with self._wake:
            while self._pending and not cancelled():
                every = MIN_READ_INTERVAL_S if self._pending & URGENT_KINDS else self.steady_s
                wait = self._last_read + every - time.monotonic()
                if wait <= 0:
                    kinds = frozenset(self._pending)
                    self._pending.clear()
                    return kinds
                self._wake.wait(min(wait, CANCEL_CHECK_S))
            self._running = False
            return None
