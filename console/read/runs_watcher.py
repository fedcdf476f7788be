"""Watching a runs directory: every run summarized again and again, in a worker thread that
only posts the result.

The summaries are cheap (:mod:`console.read.run_summary` reads the tail of each history and
the small files), so a scan of every run every :data:`REFRESH_S` seconds keeps new runs
appearing and finished ones updating; ``wake`` asks for a scan at once (after a signal).
"""

from __future__ import annotations

import threading
from typing import Callable

REFRESH_S = 2.0


def watch_runs(scan: Callable[[], object], post: Callable[[object], None], stop: threading.Event,
               wake: threading.Event, interval: float | None = REFRESH_S) -> None:
    """Post ``scan()`` now, then every ``interval`` seconds or when ``wake`` is set, until
    ``stop`` is set (``interval`` None: only when woken)."""
    while not stop.is_set():
        wake.clear()
        post(scan())
        waited = 0.0
        while not stop.is_set() and not wake.is_set() and (interval is None or waited < interval):
            stop.wait(0.1)
            waited += 0.1
