"""Signals (DESIGN.md section 6): handlers only set flags; the loop acts at the step boundary.

- SIGUSR1: write a checkpoint and continue. Several within one step give one checkpoint.
- SIGTERM, SIGINT: write a checkpoint and exit 0.

Nothing is done inside a handler, so a signal that lands during a checkpoint write
only sets a flag that the loop reads after the write has finished: the write is never
abandoned.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

CHECKPOINT_SIGNALS = (signal.SIGUSR1,)
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@dataclass
class SignalRequests:
    """What arrived since the last :meth:`SignalFlags.take`."""

    checkpoint: bool = False
    stop: bool = False
    names: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return self.checkpoint or self.stop


class SignalFlags:
    """Installs flag-setting handlers for SIGUSR1/SIGTERM/SIGINT; :meth:`restore` undoes it."""

    def __init__(self) -> None:
        # The handler only ever increments and appends; take() only reads and remembers
        # what it has seen, so a signal landing inside take() is never lost.
        self._checkpoints = 0
        self._stops = 0
        self._names: list[str] = []
        self._seen = (0, 0, 0)
        self._previous: dict[signal.Signals, Any] = {}

    def install(self) -> "SignalFlags":
        for sig in (*CHECKPOINT_SIGNALS, *STOP_SIGNALS):
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        # Only flags: the work happens at the next step boundary.
        self._names.append(signal.Signals(signum).name)
        if signum in STOP_SIGNALS:
            self._stops += 1
        else:
            self._checkpoints += 1

    @property
    def pending(self) -> bool:
        return (self._checkpoints, self._stops) != self._seen[:2]

    def take(self) -> SignalRequests:
        """What arrived since the last call (several SIGUSR1 collapse into one request)."""
        checkpoints, stops, n_names = self._checkpoints, self._stops, len(self._names)
        seen_checkpoints, seen_stops, seen_names = self._seen
        self._seen = (checkpoints, stops, n_names)
        return SignalRequests(checkpoints > seen_checkpoints, stops > seen_stops,
                              self._names[seen_names:n_names])

    def __enter__(self) -> "SignalFlags":
        return self.install()

    def __exit__(self, *exc: object) -> None:
        self.restore()
