"""Signals (docs/contract.md#signals-and-the-checkpoint-request): handlers only set flags; the
loop acts at the step boundary.

- SIGUSR1: write a checkpoint and continue. Several within one step give one checkpoint.
  A SIGUSR1 is answered by a checkpoint that became complete after it arrived: one that
  lands while the step's checkpoint is already complete waits for the next step's, so a
  console that saw the old checkpoint before signalling always gets a new one.
- SIGTERM, SIGINT: write a checkpoint and exit 0.
- A ``.checkpoint_request.json`` addressed to this trainer (:mod:`rundir.checkpoint_request`),
  looked for at step boundaries by the process that writes checkpoints: taken once, and
  then exactly a SIGUSR1 that arrived at that moment.

Nothing is done inside a handler, so a signal that lands during a checkpoint write
only sets a flag that the loop reads after the write has finished: the write is never
abandoned.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, Callable

from .checkpoint_request import POLL_S, take_request
from .layout import CHECKPOINT_REQUESTED, CHECKPOINT_SIGNALS, STOP_SIGNALS
from .trainer_record import TrainerRecord

STOP_NAMES = frozenset(sig.name for sig in STOP_SIGNALS)


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
        # The handler only appends; take() only reads up to an index and remembers it,
        # so a signal landing inside take() is never lost.
        self._names: list[str] = []
        self._seen = 0
        self._previous: dict[signal.Signals, Any] = {}

    def install(self) -> "SignalFlags":
        for sig in (*CHECKPOINT_SIGNALS, *STOP_SIGNALS):
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def restore(self, exiting_on_stop: bool = False) -> None:
        """Put the previous handlers back. ``exiting_on_stop``: the process stopped on a signal
        and is exiting; SIGTERM and SIGINT are ignored instead. A stop reaches a process more
        than once (a scheduler signals every process of a job step while the launcher passes
        its own on; SIGINT twice), and one that lands once the handlers are gone must not turn
        a clean exit, the final checkpoint written, into a kill."""
        for sig, handler in self._previous.items():
            signal.signal(sig, signal.SIG_IGN if exiting_on_stop and sig in STOP_SIGNALS else handler)
        self._previous.clear()

    def release(self, sig: signal.Signals) -> None:
        """Stop handling ``sig``: its previous handler is put back now (another handler, a
        framework's, takes it from then on)."""
        if sig in self._previous:
            signal.signal(sig, self._previous.pop(sig))

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        # Only a flag: the work happens at the next step boundary.
        self._names.append(signal.Signals(signum).name)

    def note(self, name: str) -> None:
        """A request that arrived another way than a signal (at a step boundary)."""
        self._names.append(name)

    @property
    def pending(self) -> bool:
        """Whether any signal arrived that :meth:`take` has not returned yet."""
        return len(self._names) > self._seen

    @property
    def stop_pending(self) -> bool:
        """Whether a SIGTERM/SIGINT arrived that :meth:`take` has not returned yet."""
        return any(name in STOP_NAMES for name in self._names[self._seen:])

    def mark(self) -> int:
        """A point in the arrival order, for :meth:`take`'s ``until``."""
        return len(self._names)

    def take(self, until: int | None = None) -> SignalRequests:
        """What arrived since the last call (several SIGUSR1 collapse into one request);
        with ``until`` (from :meth:`mark`), only what had arrived by then."""
        end = len(self._names) if until is None else max(self._seen, until)
        names = self._names[self._seen:end]
        self._seen = end
        return SignalRequests(checkpoint=any(n not in STOP_NAMES for n in names),
                              stop=any(n in STOP_NAMES for n in names), names=names)

    def __enter__(self) -> "SignalFlags":
        return self.install()

    def __exit__(self, *exc: object) -> None:
        self.restore()


class _ProcessHandlers:
    """The process's SIGUSR1/SIGTERM/SIGINT handlers, shared by every run open in it: installed
    by the first, put back by the last to finish; a signal is noted in every open run's flags."""

    def __init__(self) -> None:
        self.runs: list[Any] = []
        self.previous: dict[signal.Signals, Any] = {}

    def add(self, flags: Any) -> None:
        if not self.runs:
            for sig in (*CHECKPOINT_SIGNALS, *STOP_SIGNALS):
                self.previous[sig] = signal.signal(sig, self.handle)
        self.runs.append(flags)

    def remove(self, flags: Any, exiting_on_stop: bool) -> None:
        if flags in self.runs:
            self.runs.remove(flags)
        if not self.runs:
            for sig, handler in self.previous.items():
                signal.signal(sig, signal.SIG_IGN if exiting_on_stop and sig in STOP_SIGNALS else handler)
            self.previous.clear()

    def release(self, sig: signal.Signals) -> None:
        """Stop handling ``sig`` in this process: its previous handler is put back now (a
        framework's, installed later, takes it from then on)."""
        if sig in self.previous:
            signal.signal(sig, self.previous.pop(sig))

    def handle(self, signum: int, frame: Any) -> None:
        # A second Ctrl-C while a stop is pending interrupts at once, for a loop that never looks.
        if signum == signal.SIGINT and any(signal.SIGINT.name in flags._names for flags in self.runs):
            raise KeyboardInterrupt
        for flags in list(self.runs):
            flags._handle(signum, frame)


_HANDLERS = _ProcessHandlers()


class SharedSignalFlags(SignalFlags):
    """One run API run's flags (rundir/run.py), set through the process's shared handlers: several
    runs open in one process each get every signal, and the handlers from before the first are
    put back when the last is restored."""

    def install(self) -> "SharedSignalFlags":
        _HANDLERS.add(self)
        return self

    def restore(self, exiting_on_stop: bool = False) -> None:
        _HANDLERS.remove(self, exiting_on_stop)

    def release(self, sig: signal.Signals) -> None:
        _HANDLERS.release(sig)


class RequestWatch:
    """Looks for ``.checkpoint_request.json`` (at most every ``every`` seconds, when asked at a
    step boundary) and notes a request addressed to ``record`` in the flags; a stale or
    unreadable one is removed and said through ``say``; one left in place (not a regular
    file, or not removable) is said once, and again only once it has changed."""

    def __init__(self, run_dir: str | os.PathLike[str], record: TrainerRecord, say: Callable[[str], None],
                 every: float = POLL_S):
        self.run_dir, self.record, self.say, self.every = run_dir, record, say, every
        self._looked = float("-inf")
        self._said_left: tuple[int, int, int, int] | None = None

    def poll(self, flags: SignalFlags) -> None:
        now = time.monotonic()
        if now - self._looked < self.every:
            return
        self._looked = now
        taken = take_request(self.run_dir, self.record)
        left, self._said_left = self._said_left, taken.left if taken is not None else None
        if taken is None or (taken.left is not None and taken.left == left):
            return
        if taken.answer:
            assert taken.request is not None
            self.say(f"checkpoint requested by {taken.request.describe()} (.checkpoint_request.json, taken)")
            flags.note(CHECKPOINT_REQUESTED)
        else:
            self.say(taken.note)
