"""What the console finds in a history as it grows: loss spikes, non-finite steps,
resume verdicts and the ETA to ``run.max_steps``.

:class:`HistoryFindings` is fed each refresh of the :class:`~rundir.history.LossHistory`
by the :class:`~console.read.reader.RunReader`; its cost per refresh follows the lines added
(spike detection is incremental; resume checks look at the replaced lines only).
"""

from __future__ import annotations

from typing import Any

from rundir import HistoryEvent, HistoryUpdate, LossHistory, RunConfig
from rundir.layout import EVENT_RESUME, EVENT_ROLLBACK, EVENT_START
from rundir.resume_check import ResumeCheck, check_resumes

from ..model.snapshot import Notice
from ..model.spikes import DEFAULT_K, DEFAULT_WINDOW, Spike, SpikeDetector

# Non-finite steps listed in a view (the newest); the history's count says how many in all.
NONFINITE_LISTED = 1000


def spike_params(window: int | None, k: float | None, config: RunConfig | None) -> tuple[int, float]:
    """The spike window and k in force: the flags' (``window``, ``k``), else run.toml's
    ``[alerts]``, else the defaults."""
    alerts = config.alerts if config is not None else None
    return window or (alerts.window if alerts else DEFAULT_WINDOW), k or (alerts.k if alerts else DEFAULT_K)


class HistoryFindings:
    """Spikes (``window``/``k`` from flags, else run.toml's ``[alerts]``), non-finite steps,
    resume checks and the ETA of one growing history."""

    def __init__(self, window: int | None = None, k: float | None = None):
        self.window_override, self.k_override = window, k
        self.detector: SpikeDetector | None = None
        # Grad-norm spikes, found the same way on the grad_norm column: they often come
        # just before a loss spike, and are shown as their own marker.
        self.grad_detector: SpikeDetector | None = None
        # The dashboard leaves them out of its first read (a 200k-step history's first frame
        # would wait ~0.1 s for them) and reads again once that frame is painted.
        self.grad_after_first = False
        self.grad_pending = False
        self._processes: list[HistoryEvent] = []     # start, resume and rollback events, in file order
        self._events_seen = 0
        self._checks: tuple[ResumeCheck, ...] = ()
        self._told: set[tuple[int, str]] = set()       # (resume line, verdict) already noticed

    def params(self, config: RunConfig | None) -> tuple[int, float]:
        """The spike window and k in force: the flags', else run.toml's ``[alerts]``, else the defaults."""
        return self._params(config)

    def _params(self, config: RunConfig | None) -> tuple[int, float]:
        return spike_params(self.window_override, self.k_override, config)

    def update(self, history: LossHistory, update: HistoryUpdate, config: RunConfig | None, now: float,
               notices: list[Notice], first: bool) -> bool:
        """Take in one refresh; notices for resume verdicts (verified, changed) go to
        ``notices`` (none for what the first read finds: the past is not news; spikes and
        divergences are alerts). Whether anything changed."""
        window, k = self._params(config)
        changed = False
        if update.reset or self.detector is None or (self.detector.window, self.detector.k) != (window, k):
            self.detector = SpikeDetector(window, k)
            self._processes, self._events_seen = [], 0
            changed = True
        # On its own: the loss's detector may be one restored beside the history's mirror.
        grad = self.grad_detector
        if update.reset or grad is None or (grad.window, grad.k) != (window, k):
            self.grad_detector = SpikeDetector(window, k)
        changed |= self.detector.update(history.step, history.loss, update.rewound_from)
        if first and self.grad_after_first:
            self.grad_pending = True
        else:
            changed |= self.grad_detector.update(history.step, history.grad_norm, update.rewound_from)
            changed |= self.grad_pending
            self.grad_pending = False
        events = history.events
        if len(events) < self._events_seen:
            self._processes, self._events_seen = [], 0
        self._processes += [e for e in events[self._events_seen:]
                            if e.event in (EVENT_START, EVENT_RESUME, EVENT_ROLLBACK)]   # the resume check's events
        self._events_seen = len(events)
        if update.changed or first:
            checks = tuple(check_resumes(self._processes, history.superseded, history.last_step))
            changed |= checks != self._checks
            self._checks = checks
            for check in checks:
                verdict = check.verdict
                # A divergence is an alert (console.actions.alerts), which says it in the events pane.
                if verdict in ("pending", "diverged") or (verdict == "changed" and not check.complete):
                    continue
                key = (check.line, verdict)
                if key not in self._told:
                    self._told.add(key)
                    if not first:
                        level = {"verified": "good", "diverged": "error"}.get(verdict, "info")
                        notices.append(Notice(now, check.text(), level))
        return changed

    @property
    def spikes(self) -> list[Spike]:
        return self.detector.spikes if self.detector is not None else []

    def view_fields(self) -> dict[str, Any]:
        """The :class:`~console.model.snapshot.HistoryView` fields this feeds."""
        nonfinite = self.detector.newest_nonfinite_steps(NONFINITE_LISTED) if self.detector is not None else ()
        grad = self.grad_detector.spikes if self.grad_detector is not None else []
        return {"spikes": tuple(self.spikes), "nonfinite_steps": tuple(nonfinite),
                "resume_checks": self._checks, "grad_spikes": tuple(grad)}
