"""The steps a guided rollback abandoned: still in ``.loss.json`` (it is never rewritten)
until the resumed trainer's lines for the same steps replace them. The plot dims them,
and a second rollback does not go back for a spike among them."""

from __future__ import annotations

from typing import Iterable

import numpy as np

from .history import HistoryEvent
from .layout import EVENT_ROLLBACK


def abandoned_mask(steps: np.ndarray, times: np.ndarray | None, events: Iterable[HistoryEvent]) -> np.ndarray | None:
    """The steps a rollback abandoned that no newer line has replaced yet: after a
    ``rollback`` event from step F to step X, the lines of steps X+1..F written before it.
    (The resumed trainer's lines for the same steps replace them as it goes.) None when
    there are none."""
    mask = None
    if times is None or len(times) != len(steps):
        return None
    for ev in events:
        if ev.event != EVENT_ROLLBACK or ev.time is None:
            continue
        to_step, from_step = ev.data.get("to_step"), ev.data.get("from_step")
        if not isinstance(to_step, int) or not isinstance(from_step, int):
            continue
        lo, hi = np.searchsorted(steps, [to_step + 1, from_step + 1])
        older = np.zeros(len(steps), dtype=bool)
        older[lo:hi] = times[lo:hi] < ev.time
        mask = older if mask is None else mask | older
    return mask if mask is not None and mask.any() else None
