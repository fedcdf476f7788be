"""Held-out eval losses as series: the trainer's ``eval`` events, and another engine's keys.

Our trainer appends ``{"event": "eval", "step": S, "eval_loss": X, "per_arm": {arm: loss},
"windows": N}`` every ``run.eval_every`` steps. :class:`EvalSeries` keeps them as columns:
``eval_loss`` and, per arm, ``eval_loss/<arm>`` (at most :data:`~.limits.MAX_EVAL_ARMS`
arms), each by step, sorted, the newest event for a step winning (a resumed run evaluates
a step again), with the event's time (so that an eval a rollback abandoned is dimmed as its
steps are: :func:`rundir.abandoned.abandoned_mask`). A value that is not a finite number is
NaN; an eval event without a valid step is not kept.

Another engine writes its held-out loss on step lines, as ``eval_loss`` or ``val_loss``.
The ``eval_loss`` series is one, whatever its source (:func:`merged_eval`): at each step,
the eval event's value if there is one, else the step line's ``eval_loss``, else its
``val_loss``; steps with none of them are not in it. (``val_loss`` stays a series of its
own too.)
"""

from __future__ import annotations

import numpy as np

from ..layout import EVENT_EVAL
from . import limits
from .keys import series_value
from .records import HistoryEvent, is_int

EVAL_EVENT = EVENT_EVAL
EVAL_LOSS = "eval_loss"
STEP_LINE_EVAL_KEYS = ("eval_loss", "val_loss")     # on another engine's step lines, in precedence


def arm_series(arm: str) -> str:
    return f"{EVAL_LOSS}/{arm}"


class EvalSeries:
    """The eval events read so far, as series (see the module's docstring)."""

    def __init__(self) -> None:
        self._steps: list[int] = []
        self._times: list[float] = []
        self._values: dict[str, list[float]] = {EVAL_LOSS: []}
        self._cache: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] | None = None

    def __len__(self) -> int:
        return len(self._steps)

    def add(self, event: HistoryEvent) -> None:
        """Keep an ``eval`` event (any other is ignored)."""
        if event.event != EVAL_EVENT or not is_int(event.step) or event.step < 0:
            return
        data = event.data
        i = len(self._steps)
        self._steps.append(int(event.step))
        self._times.append(event.time if event.time is not None else np.nan)
        self._values[EVAL_LOSS].append(series_value(data.get(EVAL_LOSS)))
        per_arm = data.get("per_arm")
        if isinstance(per_arm, dict):
            for arm, loss in per_arm.items():
                name = arm_series(str(arm))
                column = self._values.get(name)
                if column is None:
                    if len(self._values) > limits.MAX_EVAL_ARMS:
                        continue
                    column = self._values[name] = []
                column.extend([np.nan] * (i - len(column)))
                column.append(series_value(loss))
        self._cache = None

    def names(self) -> list[str]:
        """``eval_loss`` (when any eval event was read) and the per-arm series, by arm."""
        return [EVAL_LOSS, *sorted(name for name in self.columns() if name != EVAL_LOSS)] if self._steps else []

    def columns(self) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Each series as ``(steps, values, times)``, by step, the newest event for a step
        winning; the steps where a per-arm series has no value are left out of it (and a
        per-arm series with none at all)."""
        if self._cache is None:
            steps = np.array(self._steps, np.int64)
            times = np.array(self._times, np.float64)
            order = np.argsort(steps, kind="stable")
            newest = order[np.append(steps[order][1:] != steps[order][:-1], True)] if len(steps) else order
            out = {}
            for name, column in self._values.items():
                values = np.full(len(steps), np.nan)
                values[:len(column)] = column
                kept = newest if name == EVAL_LOSS else newest[~np.isnan(values[newest])]
                if len(kept) or name == EVAL_LOSS:
                    out[name] = (steps[kept], values[kept], times[kept])
            self._cache = out if self._steps else {}
        return self._cache


def merged_eval(events: tuple[np.ndarray, np.ndarray, np.ndarray] | None, step: np.ndarray, time: np.ndarray,
                step_keys: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The ``eval_loss`` series from all its sources, as ``(steps, values, times)``: ``events``
    (the eval events' columns), and the step lines' ``eval_loss`` and ``val_loss`` columns
    (``step_keys`` by name, aligned with ``step`` and ``time``). At a step, the first source
    that has a value there wins; None when no source has any."""
    sources = [events] if events is not None and len(events[0]) else []
    for key in STEP_LINE_EVAL_KEYS:
        column = step_keys.get(key)
        if column is not None:
            has = ~np.isnan(column)
            if has.any():
                sources.append((step[has], column[has], time[has]))
    if not sources:
        return None
    if len(sources) == 1:
        return sources[0]
    steps, values, times = (np.concatenate([source[i] for source in sources]) for i in range(3))
    rank = np.concatenate([np.full(len(source[0]), i) for i, source in enumerate(sources)])
    order = np.lexsort((rank, steps))           # by step, then by the source's precedence
    first = order[np.append(True, steps[order][1:] != steps[order][:-1])]
    return steps[first], values[first], times[first]
