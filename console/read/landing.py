"""The one detector of a requested checkpoint's landing, and the one wording of a landing.

A checkpoint is asked for with SIGUSR1: the dashboard's key, the overview's, ``--checkpoint``.
It has landed when the trainer's history names the checkpoint that answered it
(:func:`answer_to`: the ``signal`` event it logged when it took the request, and the
checkpoint that answered it), and that checkpoint is complete; never a scheduled one that
merely landed meanwhile, as a network mount's late listing can make it seem. A trainer that
says no checkpoint in its history (another engine): when a complete checkpoint's file is not
as it was when the signal was sent (:func:`lands`: its stamp differs from the request's
baseline, as :func:`rundir.newest_complete_since` finds it). Or when the trainer reports one
in its own format at or after the signal (:func:`answers`, :class:`ExternalSince`).

- The dashboard's reader keeps its requests in a :class:`AwaitedCheckpoints` and settles
  them at each read (it looks at the checkpoints anyway).
- The overview's job for another run and the command line poll for the landing
  (:func:`console.actions.supervise.wait_for_checkpoint`) with the same tests.

Each says a landing with :func:`landing_text`; how a wait ended otherwise is a
:class:`~console.model.checkpoint_wait.CheckpointWait`, said by its ``why``.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Sequence

from rundir import CheckpointStamp
from rundir.external import ExternalCheckpoint, external_checkpoints
from rundir.filesystems import fresh_stamp
from rundir.history import HistoryTail, read_history_tail
from rundir.history.limits import TAIL_BYTES
from rundir.history.records import HistoryEvent
from rundir.layout import EVENT_CHECKPOINT, EVENT_SIGNAL, LOSS_JSON

from ..model.checkpoint_wait import CheckpointWait, WaitEnd
from ..model.format import format_size, printable
from ..model.snapshot import RunSnapshot

# A checkpoint request that no read has seen answered after this long is said unanswered
# (a 1.46 GB checkpoint written in the background takes tens of seconds on a slow disk).
REQUEST_TIMEOUT_S = 600.0


@dataclass(frozen=True, eq=False)
class AwaitedCheckpoint:
    """A checkpoint the console asked for and awaits (not the contract's request file,
    :class:`rundir.checkpoint_request.CheckpointRequest`): a SIGUSR1 sent at ``sent_at``, when
    the checkpoints were ``baseline``, to trainer ``pid`` (set once it was sent); unanswered
    after ``timeout`` seconds it is said so."""

    sent_at: float
    baseline: dict[str, CheckpointStamp] = field(default_factory=dict)
    pid: int | None = None
    timeout: float = REQUEST_TIMEOUT_S


def lands(request: AwaitedCheckpoint, name: str, stamp: CheckpointStamp | None) -> bool:
    """Whether complete checkpoint ``name``, now at ``stamp``, answers ``request``: it was
    written or completed since the signal."""
    return request.baseline.get(name) != stamp


def answer_to(events: Sequence[HistoryEvent], sent_at: float) -> str | None:
    """The checkpoint (its ``.bin`` name) that the trainer's own history says answered a
    request sent at ``sent_at`` (this host's clock; the trainer's, on its host): the history's
    first ``signal`` event asking a checkpoint at or after it, answered by the checkpoint whose
    write it came during (the event before it) or else by the next ``checkpoint`` event. None:
    not answered yet. A scheduled checkpoint that merely landed meanwhile answers nothing."""
    asked = next((i for i, ev in enumerate(events) if ev.event == EVENT_SIGNAL and ev.time is not None and
                  ev.time >= sent_at and ev.data.get("action") in ("checkpoint", "stop")), None)
    if asked is None:
        return None
    if events[asked].data.get("during_checkpoint") is True:
        before = (ev for ev in reversed(events[:asked]) if ev.event == EVENT_CHECKPOINT)
        found = next(before, None)
    else:
        found = next((ev for ev in events[asked + 1:] if ev.event == EVENT_CHECKPOINT), None)
    path = found.data.get("path") if found is not None else None
    return Path(path).name if isinstance(path, str) else None


def reports_checkpoints(events: Sequence[HistoryEvent]) -> bool:
    """Whether the trainer says its checkpoints in its history (ours does; another engine may
    only write the files, and its landing is then told by the files alone)."""
    return any(ev.event == EVENT_CHECKPOINT for ev in events)


def answers(request_sent_at: float, external: ExternalCheckpoint) -> bool:
    """Whether the trainer's own checkpoint ``external`` answers a signal sent at ``request_sent_at``."""
    return external.time is not None and external.time >= request_sent_at


def landing_text(where: str, step: int, details: str, waited: float | None = None) -> str:
    """``checkpoint landed: step_000200.bin (step 200, 11.7 KiB, complete)``; with ``waited``
    (seconds since the signal, where the landing is told from any other):
    ``requested checkpoint landed, 1.5 s after the signal: ...``."""
    what = "checkpoint landed" if waited is None else f"requested checkpoint landed, {waited:.1f} s after the signal"
    return f"{what}: {where} (step {step:,}{details})"


def external_details(size: int | None) -> str:
    """:func:`landing_text`'s details of a checkpoint in the trainer's own format."""
    return (f", {format_size(size)}" if size is not None else "") + ", external: the trainer's own format"


def landed_text(wait: CheckpointWait) -> str:
    """What a poll's landed wait (the overview's, ``--checkpoint``'s) says: :func:`landing_text`."""
    if wait.info is not None:
        return landing_text(wait.info.path.name, wait.info.step, f", {format_size(wait.info.size)}, {wait.info.status}")
    assert wait.external is not None
    return landing_text(printable(wait.external.path), wait.external.step, external_details(wait.external.size))


class _NewLines:
    """The history's tail, wide enough for every line written since the last read: a fast loop
    (a step a millisecond) writes more than a tail's worth between two looks of a busy console,
    and a checkpoint's event that scrolled out of a fixed tail was never seen."""

    def __init__(self, path: Path):
        self.path = path
        first = fresh_stamp(path)
        self._seen = first[1] if first is not None else 0
        self._stamp: tuple[int, int] | None = None

    def read(self) -> HistoryTail | None:
        """The tail, or None when the file is as it was at the last read (or unreadable). Its size
        from a fresh open: a stat by path may answer from a mount's attribute cache (sshfs: 20 s)."""
        st = fresh_stamp(self.path)
        if st is None:
            return None
        size, mtime = st[1], st[2]
        if (size, mtime) == self._stamp:
            return None
        self._stamp = (size, mtime)
        grown, self._seen = max(0, size - self._seen), size
        return read_history_tail(self.path, grown + TAIL_BYTES)


class ExternalSince:
    """The newest checkpoint in the trainer's own format (an ``external_checkpoint`` event of
    the history, :mod:`rundir.external`) reported at or after ``since`` (the trainer's clock,
    this host's); the history's tail is read again only when the file changed."""

    def __init__(self, run_dir: Path, since: float):
        self.since, self._lines = since, _NewLines(Path(run_dir) / LOSS_JSON)
        self._found: ExternalCheckpoint | None = None

    def __call__(self) -> ExternalCheckpoint | None:
        tail = self._lines.read()
        if tail is not None:
            found = [e for e in external_checkpoints(tail.events) if answers(self.since, e)]
            self._found = found[-1] if found else self._found
        return self._found


class AnswerSince:
    """The checkpoint the trainer's history names as the answer to a request sent at ``since``
    (:func:`answer_to`), the history's tail read again only when the file changed. ``None``
    from :meth:`name` while unanswered; :attr:`reports` whether the history says checkpoints at all."""

    def __init__(self, run_dir: Path, since: float):
        self.since, self._lines = since, _NewLines(Path(run_dir) / LOSS_JSON)
        self.reports, self._name = False, None

    def name(self) -> str | None:
        tail = self._lines.read()
        if tail is not None:
            events = tail.events
            self.reports = self.reports or reports_checkpoints(events)
            self._name = answer_to(events, self.since) or self._name
        return self._name


class AwaitedCheckpoints:
    """The dashboard's requests waiting for their checkpoint. Safe to change from any thread
    (the signal's job) while one thread reads (:meth:`settle`)."""

    def __init__(self) -> None:
        self._requests: list[AwaitedCheckpoint] = []
        self._lock = threading.Lock()

    def __bool__(self) -> bool:
        return bool(self._requests)

    def expect(self, request: AwaitedCheckpoint) -> None:
        with self._lock:
            self._requests.append(request)

    def forget(self, request: AwaitedCheckpoint) -> None:
        with self._lock:
            self._requests = [r for r in self._requests if r is not request]

    def sent(self, request: AwaitedCheckpoint, pid: int | None) -> None:
        with self._lock:
            self._requests = [replace(r, pid=pid) if r is request else r for r in self._requests]

    def settle(self, prev: RunSnapshot | None, snap: RunSnapshot, now: float,
               stamp_of: Callable[[str], CheckpointStamp | None]) -> tuple[dict[str, AwaitedCheckpoint],
                                                                            list[CheckpointWait]]:
        """Which requested checkpoints ``snap`` shows landed (``{file name or recorded path:
        request}``), and the requests that ended unanswered: their trainer gone, or past
        their timeout. ``stamp_of``: a checkpoint file's stamp as this read saw it."""
        with self._lock:                    # held throughout: a request is sent (given its pid) meanwhile
            if not self._requests:          # the common read: nothing asked, no checkpoint looked at
                return {}, []
            answered: dict[str, AwaitedCheckpoint] = {}
            settled: set[int] = set()        # every request a landing answers (several c within a step: one file)

            def land(name: str, requests: list[AwaitedCheckpoint]) -> None:
                if requests:
                    answered[name] = requests[0]
                    settled.update(id(r) for r in requests)

            events = snap.history.events
            if reports_checkpoints(events):          # the trainer's word names the answer
                complete = {c.path.name for c in snap.checkpoints if c.status == "complete"}
                for r in self._requests:
                    name = answer_to(events, r.sent_at)
                    if name is not None and name in complete:
                        land(name, [r])
            elif prev is not None and snap.checkpoints is not prev.checkpoints:
                for c in snap.checkpoints:
                    if c.status == "complete":
                        stamp = stamp_of(c.path.name)
                        land(c.path.name, [r for r in self._requests if lands(r, c.path.name, stamp)])
            if prev is not None and snap.external_checkpoints is not prev.external_checkpoints:
                seen = set(prev.external_checkpoints)
                for e in snap.external_checkpoints:
                    if e not in seen:
                        land(e.path, [r for r in self._requests if answers(r.sent_at, e)])
            trainer = snap.trainer
            ended: list[CheckpointWait] = []
            waiting = []
            for r in self._requests:
                if id(r) in settled:
                    continue
                # Gone: the record names another process, or the one asked cannot be signalled any
                # more. A trainer on another host is never signallable here: it was asked through
                # the request file, and is waited for.
                gone = trainer.pid != r.pid or (not trainer.signallable and trainer.state != "remote")
                if r.pid is not None and gone:
                    ended.append(CheckpointWait(WaitEnd.TRAINER_EXITED, pid=r.pid))
                elif now - r.sent_at >= r.timeout:
                    ended.append(CheckpointWait(WaitEnd.TIMED_OUT, timeout=r.timeout, pid=r.pid))
                else:
                    waiting.append(r)
            self._requests = waiting
        return answered, ended
