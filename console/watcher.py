"""Watching a run directory with watchfiles, in a worker thread that only posts messages.

:func:`watch_run` blocks until ``stop`` is set; the app runs it in a thread worker. It
maps each batch of changed paths to the kinds of file they are (see
:func:`rundir.layout.kind_of`) and hands them to ``post``; it never touches a widget.
A run directory that does not exist yet (or disappears) is polled for until it does.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Callable

import watchfiles

from rundir.layout import ALL_KINDS, kind_of

# watchfiles batches changes: it yields once no change came for STEP_MS, or after
# DEBOUNCE_MS at the latest. A trainer that writes every 100 ms therefore wakes the
# console about twice a second, not ten times.
DEBOUNCE_MS = 500
STEP_MS = 200
MISSING_POLL_S = 1.0


def kinds_of(changes: set[tuple[watchfiles.Change, str]]) -> frozenset[str]:
    kinds = {kind_of(Path(path).name) for _, path in changes}
    kinds.discard(None)
    return frozenset(kinds)   # type: ignore[arg-type]


def watch_run(run_dir: Path, post: Callable[[frozenset[str]], None], stop: threading.Event) -> None:
    """Post the kinds of every batch of changes in ``run_dir`` until ``stop`` is set."""
    existed = run_dir.is_dir()
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
        try:
            for changes in watchfiles.watch(run_dir, watch_filter=None, stop_event=stop, debounce=DEBOUNCE_MS,
                                            step=STEP_MS, rust_timeout=2000, yield_on_timeout=True,
                                            recursive=False, raise_interrupt=False, ignore_permission_denied=True):
                if not changes:                   # a quiet timeout: is the directory still there?
                    if not run_dir.is_dir():
                        break
                    continue
                kinds = kinds_of(changes)
                if kinds:
                    post(kinds)
        except (OSError, RuntimeError):
            # The directory went away under the watcher (or inotify is exhausted): poll.
            stop.wait(MISSING_POLL_S)
