"""The history's series as the view hands them to the panes: every column of the step lines
and the eval series, copied at one read (:class:`SeriesData`), and the names and columns of
:class:`~console.model.snapshot.HistoryView` (``series_names()``, ``column(name)``) are made
from it here.

The names: ``loss``, ``lr``, ``grad_norm``, ``tokens`` and ``time`` (every history has
them), then each other numeric key of the step lines in the order the history first had it
(``p``, ``gpu_util``, ``val_loss``, ...: :mod:`rundir.history.keys`), then ``eval_loss`` and
``eval_loss/<arm>`` (:mod:`rundir.history.evals`: the eval events, and another engine's
``eval_loss``/``val_loss`` keys, merged as documented there).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from rundir import LossHistory
from rundir.history.evals import EVAL_LOSS, merged_eval

BASE_SERIES = ("loss", "lr", "grad_norm", "tokens", "time")
_STEP_COPIED = ("lr", "grad_norm")               # the base columns the view has no field of


@dataclass(frozen=True)
class SeriesData:
    """The series of one read: ``step_columns`` (``lr``, ``grad_norm`` and every series of
    the step lines, by name, aligned with the view's ``step``), ``evals`` (each eval series'
    ``(steps, values, times)``), and the numeric keys not kept (the limit: their count and the
    first few names)."""

    step_columns: dict[str, np.ndarray] = field(default_factory=dict, repr=False, compare=False)
    step_keys: tuple[str, ...] = ()                 # the step lines' own series, in the order found
    evals: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=dict, repr=False,
                                                                        compare=False)
    dropped: int = 0
    dropped_names: tuple[str, ...] = ()


def series_data(h: LossHistory, share: Callable[[np.ndarray], np.ndarray] = np.copy) -> SeriesData:
    """The series of the history as read now: each step column through ``share`` (a copy by
    default, as the reader goes on in its thread; the console's history part passes read-only
    views of rows the reader never changes again), the eval series copied (they are small)."""
    columns = {name: share(getattr(h, name)) for name in _STEP_COPIED}
    keys = h.series_keys
    columns.update((name, share(h.series_column(name))) for name in keys)
    evals = {name: tuple(a.copy() for a in cols) for name, cols in h.evals.columns().items()}
    return SeriesData(columns, tuple(keys), evals, h.keys.dropped, tuple(h.keys.dropped_names))


def names(data: SeriesData) -> list[str]:
    """Every series' name (see the module's docstring)."""
    out = [*BASE_SERIES, *(name for name in data.step_keys if name != EVAL_LOSS)]
    has_eval = EVAL_LOSS in data.evals or any(key in data.step_keys for key in ("eval_loss", "val_loss"))
    if has_eval:
        out.append(EVAL_LOSS)
    out.extend(name for name in data.evals if name != EVAL_LOSS)
    return out


def column(data: SeriesData, name: str, step: np.ndarray, loss: np.ndarray, tokens: np.ndarray | None,
           time: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(steps, values, times)`` of the series ``name``; KeyError for a name that is none."""
    time = time if time is not None and len(time) == len(step) else np.full(len(step), np.nan)
    if name == "loss":
        return step, loss, time
    if name == "tokens":
        values = tokens.astype(np.float64) if tokens is not None else np.full(len(step), np.nan)
        values[values < 0] = np.nan                 # -1: absent
        return step, values, time
    if name == "time":
        return step, time, time
    if name == EVAL_LOSS:
        merged = merged_eval(data.evals.get(EVAL_LOSS), step, time, data.step_columns)
        if merged is None:
            raise KeyError(name)
        return merged
    if name in data.step_columns:
        return step, data.step_columns[name], time
    if name in data.evals:
        return data.evals[name]
    raise KeyError(name)
