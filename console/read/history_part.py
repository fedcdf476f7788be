"""The history's part of a run's snapshot: ``.loss.json`` read as it grows, and its view.

:class:`HistoryPart` holds the incremental reader (:class:`rundir.LossHistory`: opened
through the history's mirror in the user's cache, or handed over by the start-up prefetch
when there is one, :mod:`console.read.history_mirror`), keeps the mirror (and the spike scan
beside it) up as the history grows and says, once, when the mirror was rebuilt or could
not be written; it says what each read found (skipped lines, a torn tail, non-finite
steps, new events) as notices, feeds the history findings (spikes,
resume checks, ETA) and makes the :class:`~console.model.snapshot.HistoryView` the panes
show: where the run is (its head), its speed over the current segment, its columns.
"""

from __future__ import annotations

import math
import os
import threading
from pathlib import Path
from typing import Callable

import numpy as np

from rundir import HistoryUpdate, LossHistory, RunConfig
from rundir.abandoned import head_rows, run_head
from rundir.layout import EVENT_RESUME, EVENT_START, LOSS_JSON
from rundir.step_rows import search_steps
from rundir.text import counted

from ..model.findings import LISTED
from ..model.history_series import series_data
from ..model.levels import Level
from ..model.mirror_note import MIRROR_NOT_SAVED, MIRROR_STALE, MirrorNote
from ..model.run_facts import RATE_STEPS, eta_seconds, rate_per_s, stopped
from ..model.series_blocks import SeriesBlocks
from ..model.snapshot import HistoryView, Notice
from .changes import event_notice
from .detectors import HistoryFindings
from .history_mirror import HistoryMirror
from .prefetch import HistoryPrefetch


def _last_finite(x: np.ndarray) -> float | None:
    """The last finite value, looking back in growing chunks (not a mask of the whole column)."""
    end, chunk = len(x), 64
    while end > 0:
        part = x[max(0, end - chunk):end]
        idx = np.flatnonzero(np.isfinite(part))
        if len(idx):
            return float(part[idx[-1]])
        end -= chunk
        chunk *= 4
    return None


def _frozen(column: np.ndarray) -> np.ndarray:
    """A read-only view of a column the reader shares (:meth:`LossHistory.share_rows`)."""
    view = column.view()
    view.flags.writeable = False
    return view


def current_segment(h: LossHistory) -> tuple[slice, float]:
    """The rows of the run's current segment, and when it began: the steps since the newest
    ``start``/``resume`` event or rewind (another engine's restart), up to the newest step
    written. Rates are measured over it alone, never across the pause before a resume."""
    start_step, since = 0, -math.inf
    for ev in reversed(h.events):
        if ev.event in (EVENT_RESUME, EVENT_START):
            start_step = (ev.step if ev.step is not None else 0) + 1
            since = ev.time if ev.time is not None and math.isfinite(ev.time) else -math.inf
            break
    if h.rewinds:
        step, t = h.rewinds[-1]
        if not math.isfinite(since) or (math.isfinite(t) and t >= since):
            start_step, since = step, (t if math.isfinite(t) else -math.inf)
    steps = h.step
    lo = int(search_steps(steps, start_step))
    hi = head_rows(steps, h.head_step)
    return slice(max(lo, hi - 2 * RATE_STEPS), max(lo, hi)), since


def silent_rewinds(h: LossHistory) -> list[int]:
    """The steps the history went back to with no ``resume`` (or ``start``) event just
    before them: another engine's restart, otherwise invisible."""
    if not h.rewinds:
        return []
    announced = set()
    for ev in h.events:
        if ev.event in (EVENT_RESUME, EVENT_START):
            for step in (ev.step, ev.data.get("from_step")):
                if isinstance(step, int) and not isinstance(step, bool):
                    announced.add(step + 1)
    return [step for step, _ in h.rewinds if step not in announced]



def _lower_priority() -> None:
    """This thread at the lowest CPU priority (and so, with the default I/O scheduling, the
    lowest I/O priority of its class): Linux takes a thread id for PRIO_PROCESS."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
    except (OSError, AttributeError):
        pass


class HistoryPart:
    """Reads ``.loss.json`` for one run's snapshots (one thread at a time)."""

    def __init__(self, path: Path, prefetch: HistoryPrefetch | None, findings: HistoryFindings,
                 mirror: HistoryMirror | None = None):
        self.history = LossHistory(path)
        self.findings = findings
        self.mirror = mirror or HistoryMirror(path)
        self._opened = False
        self._prefetch = prefetch               # the first history read, done by a forked child
        self._mirror_note: MirrorNote | None = None     # the view's: the newest said
        self._mirror_said: set[str] = set()     # each kind of note is said once
        self._version = 0
        self._rewinds = 0
        self._torn_seen = 0
        self._torn_reported = 0
        self._verifier: threading.Thread | None = None  # the mirror's full check (verify_mirror)
        self._stale = False                     # it found the mirror stale: the next read re-reads
        self.verified: bool | None = None       # its answer (None: none yet, or it could not tell)
        self.summaries = self._new_summaries()  # the series table's blocks, kept across views

    def _new_summaries(self) -> SeriesBlocks:
        blocks = SeriesBlocks()
        blocks.on_computed = lambda done: self.mirror.keep_summaries(done)
        return blocks

    def verify_mirror(self, on_stale: Callable[[], None]) -> bool:
        """Once the first frame is shown: check the mirror the first read used against every
        byte of the history it covers, in a thread of the lowest priority; when they differ,
        ``on_stale()`` is called (from that thread: it should only ask for a read of the
        history), and that read says so, once, and reads the history anew from the file.
        Whether a check was started (not before the first read, nor twice, nor without a mirror)."""
        if not self._opened or self._verifier is not None or self.mirror.opened_from is None:
            return False

        def check() -> None:
            _lower_priority()
            self.verified = self.mirror.verify()
            if self.verified is False:
                self._stale = True
                on_stale()

        self._verifier = threading.Thread(target=check, name="history-mirror-check", daemon=True)
        self._verifier.start()
        return True

    def wait_verified(self, timeout: float) -> bool | None:
        """The full check's answer, once it is done (for the ones that must know: tests, benches)."""
        if self._verifier is not None:
            self._verifier.join(timeout)
        return self.verified

    def read(self, now: float, notices: list[Notice], first: bool, config: RunConfig | None,
             prev: HistoryView | None) -> HistoryView:
        """The history's view after reading what was appended; its notices go to ``notices``.
        ``prev`` (the last view) is returned again when nothing it shows changed."""
        opened_now = not self._opened
        reread = self._stale and not opened_now
        if opened_now:
            update, notes = self._open()
            self._opened = True
        elif reread:
            update, notes = self._reread()
        else:
            update, notes = self.history.refresh(), []
        saved = self.mirror.keep_up(self.history, update)
        h = self.history = self.mirror.mapped(self.history)     # rows held as the mirror's pages
        for note in notes + ([saved] if saved is not None else []):
            if note.kind not in self._mirror_said:
                self._mirror_said.add(note.kind)
                self._mirror_note = note
                notices.append(Notice(now, note.text(), note.level))
        if update.changed or first or prev is None:
            self._version += 1
        self._say(update, now, notices, first or reread)     # a re-read's past is no news either
        if opened_now:                          # the spike scans of the rows the mirror holds, kept beside it
            restored = self.mirror.load_detectors(h, *self.findings.params(config))
            self.findings.detector = restored.get("loss", self.findings.detector)
            self.findings.grad_detector = restored.get("grad_norm", self.findings.grad_detector)
            if not self.mirror.load_summaries(h, self.summaries):       # and the series table's blocks
                self.summaries.follow(h, HistoryUpdate(reset=True))
        else:
            if reread:
                self.summaries = self._new_summaries()
            self.summaries.follow(h, update)
        found = self.findings.update(h, update, config, now, notices, first)
        self.mirror.keep_detectors(h, {"loss": self.findings.detector, "grad_norm": self.findings.grad_detector})
        if prev is not None and not update.changed and prev.torn_tail == h.torn_tail and prev.error == h.error \
                and not found:
            return prev
        # The view's columns are views, not copies (a long run's would cost as much again):
        # the reader never changes the rows it has shared.
        h.share_rows()
        loss = h.loss
        # Where the run is: its head (the step of the newest step line), not the largest step,
        # which after a rollback or a resume from an older checkpoint belongs to an earlier
        # segment whose steps have not been run again yet.
        rows = head_rows(h.step, run_head(h.head_step, h.events, h.rows_read))
        head = int(h.step[rows - 1]) if rows else None
        last_loss = _last_finite(loss[:rows])
        tokens = h.tokens
        tokens_now = int(tokens[rows - 1]) if rows and tokens[rows - 1] >= 0 else None
        # Rates from the current segment's tail only: the cost of a read must not grow with
        # the history, and a pause before a resume is no part of any rate.
        tail, since = current_segment(h)
        t_tail = h.time[tail]
        silent = silent_rewinds(h)
        moving = not stopped(h.events)          # a run whose trainer logged its stop has no speed
        steps_per_s = rate_per_s(h.step[tail].astype(np.float64), t_tail, since) if moving else None
        return HistoryView(
            version=self._version, format=h.format, n_steps=len(h), last_step=head,
            last_loss=last_loss, tokens=tokens_now, steps_ahead=len(h) - rows,
            steps_per_s=steps_per_s,
            eta_s=eta_seconds(config.run.max_steps if config is not None else None, head, steps_per_s),
            tokens_per_s=rate_per_s(tokens[tail].astype(np.float64), t_tail, since)
            if tokens_now is not None and moving else None,
            nonfinite=h.nonfinite, bad_lines=h.bad_lines, torn_tail=h.torn_tail, problems=tuple(h.problems),
            error=h.error, events=tuple(h.events), step=_frozen(h.step), loss=_frozen(loss), rewinds=self._rewinds,
            last_nonfinite_step=h.last_nonfinite_step if h.nonfinite else None, **self.findings.view_fields(),
            tokens_column=_frozen(tokens), time_column=_frozen(h.time), series=series_data(h, _frozen),
            silent_rewinds=tuple(silent[-LISTED:]), silent_rewind_count=len(silent), mirror=self._mirror_note,
            arm_column=_frozen(h.arm), arm_names=tuple(h.arm_names), summaries=self.summaries,
            summary_generation=self.summaries.generation)

    def _say(self, update: HistoryUpdate, now: float, notices: list[Notice], first: bool) -> None:
        """What this read found worth a notice: a history replaced, lines skipped, non-finite
        losses, new events, a torn tail that stayed."""
        h = self.history
        if update.rewound or update.reset:
            self._rewinds += 1
            if update.reset and not first:
                notices.append(Notice(now, f"{LOSS_JSON} was replaced or shrank: re-read from the start",
                                      Level.WARNING))
        for problem in update.new_problems[:5]:
            notices.append(Notice(now, f"skipped: {problem}", Level.WARNING))
        if update.new_bad_lines > 5:
            notices.append(Notice(now, f"skipped {counted(update.new_bad_lines - 5, 'more unreadable line')}",
                                  Level.WARNING))
        if update.new_nonfinite:
            loss = h.loss
            tail = loss[-max(update.new_steps, 1):]
            bad = h.step[-len(tail):][~np.isfinite(tail)]
            where = ", ".join(f"{int(s):,}" for s in bad[:5]) + (" ..." if len(bad) > 5 else "")
            notices.append(Notice(now, f"non-finite loss at step {where}" if len(bad) else
                                  counted(update.new_nonfinite, 'non-finite loss value'), Level.ERROR))
        for ev in ([] if first else update.new_events):     # the whole past is not news
            text = event_notice(ev)
            if text:
                notices.append(Notice(now, text[0], text[1]))
        # A torn tail is normal for an instant while a line is written; one that is still
        # there at the next read (or at the first) is reported, once.
        if h.torn_tail and (first or h.torn_tail == self._torn_seen) and h.torn_tail != self._torn_reported:
            notices.append(Notice(now, f"torn last line in {LOSS_JSON} ({counted(h.torn_tail, 'byte')}): skipped",
                                  Level.WARNING))
            self._torn_reported = h.torn_tail
        elif not h.torn_tail:
            self._torn_reported = 0
        self._torn_seen = h.torn_tail

    def _reread(self) -> tuple[HistoryUpdate, list[MirrorNote]]:
        """The history read anew from the file, its stale mirror forgotten (written again by
        this read's keep_up); an update that resets what was derived from the old rows."""
        self._stale = False
        self.mirror.forget()
        self.history = LossHistory(self.history.path)
        whole = self.history.refresh()
        note = MirrorNote(MIRROR_STALE, f"a full check found {self.history.path.name} changed in place under it: "
                                        "read again from the file")
        return HistoryUpdate(whole.new_steps, reset=True), [note]

    def _open(self) -> tuple[HistoryUpdate, list[MirrorNote]]:
        """The first read: the prefetch's hand-over when there is one, else the history opened
        through its mirror (:class:`HistoryMirror`); the update of the whole read and what was
        said about the mirror."""
        handed = None
        if self._prefetch is not None:
            prefetch, self._prefetch = self._prefetch, None
            handed = prefetch.result()
        notes = list(handed.notes) if handed is not None else []
        if handed is not None and handed.history is not None and handed.history.path == self.history.path:
            self.history = handed.history           # what the child read counts as this read's
            self.mirror.opened_from = handed.opened_from        # checked whole after the first frame
            if any(n.kind == MIRROR_NOT_SAVED for n in notes):
                self.mirror.failed_at = self.history._offset       # the child tried: not again at once
            return handed.update.then(self.history.refresh()), notes
        self.history, update, note = self.mirror.open()             # mapped (the child wrote it), or parsed
        return update, notes + ([note] if note is not None else [])
