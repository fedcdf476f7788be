"""The one detector of a requested checkpoint's landing, the one rule of waiting for it, and
the one wording of a landing.

A checkpoint is asked for with SIGUSR1: the dashboard's key, the overview's, ``--checkpoint``.
It has landed when the trainer's history names the checkpoint that answered it
(:func:`answer_to`: the ``signal`` event it logged when it took the request, and the
checkpoint that answered it), and that checkpoint is complete, or the history says it was
pruned since (a fast cadence, a loaded machine or a mount's late listing can let the retention
policy remove it before any look finds its file); never a scheduled one that merely landed
meanwhile, as a network mount's late listing can make it seem. A trainer that
says no checkpoint in its history (another engine): when a complete checkpoint's file is not
as it was when the signal was sent (:func:`lands`: its stamp differs from the request's
baseline, as :func:`rundir.newest_complete_since` finds it). Or when the trainer reports one
in its own format at or after the signal (:func:`answers`, :class:`ExternalSince`).

One :class:`RequestWait` waits for one request: handed a :class:`Look` at a time, it says
whether the request landed, or ended unanswered (the trainer it went to gone:
:func:`trainer_gone`; or past its timeout), as a
:class:`~console.model.checkpoint_wait.CheckpointWait`. Two drivers hand it their looks:

- the dashboard's reads: its reader keeps its requests in a :class:`AwaitedCheckpoints`,
  whose :meth:`~AwaitedCheckpoints.settle` hands each the look of the read's snapshot (it
  looks at the checkpoints anyway);
- the poll of the overview's job for another run, of the command line and of the guided
  pivot (:func:`console.actions.supervise.wait_for_checkpoint`), which makes a look from the
  files (:class:`FilesLook`) every ``POLL_S``.

A look sees the trainer before the files, the way the dashboard's reader reads them: the look
that finds the trainer gone has read whatever it wrote before it went, and is the last look
for a landing. Each driver says a landing with :func:`landing_text`; how a wait ended otherwise
is said by the wait's ``why``.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Sequence

from rundir import CheckpointInfo, CheckpointStamp, checkpoint_stamps, checkpoints_since, inspect_checkpoint
from rundir.checkpoint import said_checkpoints
from rundir.external import ExternalCheckpoint, external_checkpoints
from rundir.filesystems import fresh_stamp
from rundir.history import HistoryTail, read_history_tail
from rundir.history.limits import TAIL_BYTES
from rundir.history.records import HistoryEvent
from rundir.layout import EVENT_CHECKPOINT, EVENT_SIGNAL, LOSS_JSON, checkpoint_step

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


def pruned_since(events: Sequence[HistoryEvent], name: str | None) -> bool | None:
    """Whether the trainer's history says checkpoint ``name`` was pruned after it was written
    (True), or names it written (False); None: these events say nothing of it."""
    said = said_checkpoints(events).get(name) if name is not None else None
    return None if said is None else not said


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


# A landing whose file the retention policy removed before any look found it: the trainer's
# history says it was complete (its ``checkpoint`` event), then pruned (its ``prune`` event).
PRUNED_DETAILS = ", complete by the trainer's history, pruned since by the retention policy"


def landed_text(wait: CheckpointWait, waited: float | None = None) -> str:
    """What a landed wait says: :func:`landing_text` (``waited``: the dashboard's words)."""
    if wait.pruned is not None:
        return landing_text(printable(wait.pruned), checkpoint_step(wait.pruned) or 0, PRUNED_DETAILS, waited)
    if wait.info is not None:
        return landing_text(wait.info.path.name, wait.info.step, f", {format_size(wait.info.size)}, {wait.info.status}",
                            waited)
    assert wait.external is not None
    return landing_text(printable(wait.external.path), wait.external.step, external_details(wait.external.size),
                        waited)


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
    from :meth:`name` while unanswered; :attr:`reports` whether the history says checkpoints at
    all, :attr:`pruned` whether it says the answer pruned since (:func:`pruned_since`)."""

    def __init__(self, run_dir: Path, since: float):
        self.since, self._lines = since, _NewLines(Path(run_dir) / LOSS_JSON)
        self.reports, self.pruned, self._name = False, False, None

    def name(self) -> str | None:
        tail = self._lines.read()
        if tail is not None:
            events = tail.events
            self.reports = self.reports or reports_checkpoints(events)
            self._name = answer_to(events, self.since) or self._name
            said = pruned_since(events, self._name)
            self.pruned = self.pruned if said is None else said
        return self._name


# The trainer states a request is waited through (rundir.process.TrainerState): the verified
# trainer, and one on another host with no scheduler to ask, which nothing here can examine
# (it was asked through the request file; its record stands while it runs).
_WAITED_FOR = ("running", "remote")


def trainer_gone(asked: int | None, pid: int | None, state: str) -> bool:
    """Whether the trainer a request went to (pid ``asked``; None: not sent yet, nothing to be
    gone) is gone, by the trainer a look saw: the run names another process (``pid``), or the
    one asked is neither running nor on another host with no scheduler to ask (``state``, in
    :data:`rundir.process.TrainerState`'s words). The dashboard feeds it its snapshot's
    :class:`~console.model.snapshot.TrainerView`; the poll, its liveness of the verified trainer."""
    return asked is not None and (pid != asked or state not in _WAITED_FOR)


@dataclass(frozen=True)
class Look:
    """One look at a run for one request: the trainer (seen before the files), the seconds
    waited (on the driver's clock), and the candidates the files showed: the checkpoint the
    history names as the request's answer (:func:`answer_to`), whether the history says
    checkpoints at all, complete checkpoints with ``stamp_of`` their stamps, and the
    trainer's own checkpoints; and whether the history says the answer pruned since it was
    written (:func:`pruned_since`)."""

    pid: int | None
    state: str
    waited: float
    answer: str | None = None
    reports: bool = False
    pruned: bool = False
    checkpoints: Sequence[CheckpointInfo] = ()
    stamp_of: Callable[[str], CheckpointStamp | None] = lambda name: None
    external: Sequence[ExternalCheckpoint] = ()


class RequestWait:
    """The waiting of one checkpoint request, whichever loop drives it (the dashboard's reads,
    the poll): what counts as its landing, when it ends unanswered, and what it ends as."""

    def __init__(self, request: AwaitedCheckpoint):
        self.request = request

    def landings(self, look: Look) -> tuple[list[CheckpointInfo], list[ExternalCheckpoint]]:
        """The look's checkpoints that answer the request, and the trainer's own ones: the one
        the history names (it says checkpoints), else every complete file changed since the
        signal; and every checkpoint in the trainer's format reported at or after it."""
        r = self.request
        if look.reports:
            found = [c for c in look.checkpoints if c.path.name == look.answer]
        else:
            found = [c for c in look.checkpoints if lands(r, c.path.name, look.stamp_of(c.path.name))]
        return found, [e for e in look.external if answers(r.sent_at, e)]

    def see(self, look: Look) -> CheckpointWait | None:
        """How the wait ended at ``look``, or None while it goes on: landed (the newest
        checkpoint that answers it; ``answered_by`` names each; or the history's answer, which
        it says was pruned since, when no look found its file), else the trainer it went to
        gone (the look saw the trainer before the files: it was the last look for a landing),
        else past the request's timeout."""
        r = self.request
        found, external = self.landings(look)
        if found or external:
            names = tuple(c.path.name for c in found) + tuple(e.path for e in external)
            return CheckpointWait(WaitEnd.LANDED, max(found, key=lambda c: c.step) if found else None, pid=r.pid,
                                  external=external[-1] if external else None, answered_by=names, waited=look.waited)
        if look.reports and look.answer is not None and look.pruned:
            return CheckpointWait(WaitEnd.LANDED, pid=r.pid, answered_by=(look.answer,), pruned=look.answer,
                                  waited=look.waited)
        if trainer_gone(r.pid, look.pid, look.state):
            return CheckpointWait(WaitEnd.TRAINER_EXITED, pid=r.pid, waited=look.waited)
        if look.waited >= r.timeout:
            return CheckpointWait(WaitEnd.TIMED_OUT, timeout=r.timeout, pid=r.pid, waited=look.waited)
        return None


class FilesLook:
    """The poll's looks at a run for one request, read from its files: the history's tail
    (read again only when it changed), and the checkpoints' stamps."""

    def __init__(self, run_dir: Path, request: AwaitedCheckpoint):
        self.run_dir, self.request = Path(run_dir), request
        self._own, self._answer = ExternalSince(run_dir, request.sent_at), AnswerSince(run_dir, request.sent_at)

    def __call__(self, pid: int | None, state: str, waited: float) -> Look:
        """A look with the trainer as the caller saw it just before (``pid``, ``state``)."""
        name, own = self._answer.name(), self._own()
        external = (own,) if own is not None else ()
        if self._answer.reports:
            info = inspect_checkpoint(self.run_dir / name) if name is not None else None
            found = (info,) if info is not None and info.status == "complete" else ()
            return Look(pid, state, waited, name, True, self._answer.pruned, found, external=external)
        stamps = checkpoint_stamps(self.run_dir)
        found = tuple(c for c in checkpoints_since(self.run_dir, self.request.baseline, stamps)
                      if c.status == "complete")
        return Look(pid, state, waited, None, False, False, found, stamps.get, external)


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
        request}``, the first request each answers), and the requests that ended otherwise
        (unanswered, or landed in a checkpoint pruned before a read listed it): each request's
        :class:`RequestWait` handed the snapshot's look. ``stamp_of``: a
        checkpoint file's stamp as this read saw it."""
        with self._lock:                    # held throughout: a request is sent (given its pid) meanwhile
            if not self._requests:          # the common read: nothing asked, no checkpoint looked at
                return {}, []
            events = snap.history.events
            reports = reports_checkpoints(events)
            # Only what this read found new is a candidate (the history's answer aside, looked up
            # whenever): the reads before it looked at the rest.
            changed = prev is not None and snap.checkpoints is not prev.checkpoints
            complete = [c for c in snap.checkpoints if c.status == "complete"] if reports or changed else []
            external: list[ExternalCheckpoint] = []
            if prev is not None and snap.external_checkpoints is not prev.external_checkpoints:
                seen = set(prev.external_checkpoints)
                external = [e for e in snap.external_checkpoints if e not in seen]
            # The reader reads the trainer before the files: the snapshot is a look of the rule's.
            trainer = snap.trainer
            answered: dict[str, AwaitedCheckpoint] = {}
            ended: list[CheckpointWait] = []
            waiting = []
            for r in self._requests:
                answer = answer_to(events, r.sent_at) if reports else None
                look = Look(trainer.pid, trainer.state, now - r.sent_at, answer, reports,
                            pruned_since(events, answer) is True, complete, stamp_of, external)
                end = RequestWait(r).see(look)
                if end is None:
                    waiting.append(r)
                elif end.end is WaitEnd.LANDED and end.pruned is None:  # said with its file's change
                    for name in end.answered_by:    # several c within a step: one file answers them all
                        answered.setdefault(name, r)
                else:                               # unanswered, or landed with no file left to say it by
                    ended.append(end)
            self._requests = waiting
        return answered, ended
