"""Every series a plot can draw, as data: its name, its label and unit, and where its values
come from in a :class:`~console.model.snapshot.HistoryView`.

A series is ``(steps, values)``: int64 steps ascending, float64 values (NaN where a step
has none). Most are a numeric column of the step lines, read through
:meth:`HistoryView.column` (``loss``, ``grad_norm``, ``lr``, the GPU figures, and any
other numeric key a trainer writes: ``val_loss``, ``mfu``...); some are derived:

- ``tokens_per_s``, ``steps_per_s``: the tokens (steps) done over the last
  :data:`RATE_WINDOW` steps divided by the time they took, never across a resume, a
  start or a clock that went back (the window then starts at the segment's first step);
- ``share/<arm>``: the fraction of the last :data:`SHARE_WINDOW` steps that drew that arm;
- ``p/<arm>``: the probability the bandit gave the arm, at each step that drew it (the
  ``p`` of the step lines);
- ``eval_loss``: the held-out loss (an ``eval_loss`` column, else another engine's ``val_loss``,
  else the trainer's ``eval`` lines), and ``eval_loss/<arm>`` each arm's (their ``per_arm``).

:func:`available` lists a history's series in the picker's order; :func:`series_values`
gives one, computed once per view (the view is immutable).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import numpy as np

from rundir.layout import EVENT_RESUME, EVENT_START
from rundir.text import printable

from .units import FAMILY_SEP, unit_of

if TYPE_CHECKING:
    from .snapshot import HistoryView

RATE_WINDOW = 50            # steps: tokens/s and steps/s are measured over this many steps
SHARE_WINDOW = 100          # steps: an arm's share of pulls is that of this many steps
# Columns that are axes or raw inputs of a derived series, not series of their own.
NOT_SERIES = frozenset({"step", "time", "tokens", "arm", "p"})
# The full layout's grid of small plots, unless run.toml's [console] plots says otherwise.
DEFAULT_GRID = ("loss", "eval_loss", "grad_norm", "tokens_per_s")

Values = tuple[np.ndarray, np.ndarray]


class UnknownSeries(KeyError):
    """A series name the history does not have."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unknown series"


@dataclass(frozen=True)
class SeriesSpec:
    """What a series is called and where its values come from (its unit is
    :mod:`console.model.units`' table's)."""

    name: str
    label: str
    derive: Callable[["HistoryView", str], Values] | None = None    # None: the column of that name
    needs: tuple[str, ...] = ()         # the columns it is made from (all present: it exists)

    @property
    def unit(self) -> str:
        """The unit of the values as stored (--json's)."""
        return unit_of(self.name).stored_symbol

    def format(self, value: float) -> str:
        """One value with its unit, as the cursor, the picker and the table say it."""
        return unit_of(self.name).format(value)


def _column(h: "HistoryView", name: str) -> Values:
    try:
        return h.column(name)
    except KeyError:
        raise UnknownSeries(f"unknown series {name!r}") from None


def _eval_loss(h: "HistoryView", name: str) -> Values:
    """The held-out loss as the history's reader merged it (:mod:`rundir.history.evals`: the
    ``eval`` lines, else a step-line ``eval_loss``, else another engine's ``val_loss``)."""
    if name == "eval_loss" and "eval_loss" not in _names(h) and "val_loss" in _names(h):
        return _column(h, "val_loss")
    return _column(h, name)


def _segment_starts(h: "HistoryView", steps: np.ndarray, times: np.ndarray) -> np.ndarray:
    """The first row of each segment (0 first): segments begin after each start or resume
    event and where the clock went back."""
    bounds = sorted({(ev.step if isinstance(ev.step, int) else 0) + 1 for ev in h.events
                     if ev.event in (EVENT_START, EVENT_RESUME)})
    rows = np.searchsorted(steps, np.asarray(bounds, np.int64), side="left")
    with np.errstate(invalid="ignore"):
        back = np.flatnonzero(times[1:] < times[:-1]) + 1
    starts = np.union1d(np.concatenate([[0], rows, back]), [])
    return starts[starts < len(steps)].astype(np.int64)


def _rate(h: "HistoryView", numerator: np.ndarray) -> Values:
    """``numerator`` per second over the last :data:`RATE_WINDOW` rows of each row's segment.
    Vectorised as whole-array differences; only the rows less than a window into their
    segment are measured again from the segment's first row."""
    steps, times = _column(h, "time")
    n, w = len(steps), RATE_WINDOW
    rate = np.full(n, np.nan)
    if n == 0:
        return steps, rate

    def per_s(d_num: np.ndarray, d_t: np.ndarray, out: np.ndarray) -> np.ndarray:
        np.divide(d_num, d_t, out=out)          # in place: a long history's column is not copied again
        out[~(d_t > 0)] = np.nan                # no time passed (or a clock gone back): no rate
        return out
    # Any float a file holds: a difference that overflows is inf, one of infinities NaN (not plotted).
    with np.errstate(all="ignore"):
        if n > w:
            d_num = np.subtract(numerator[w:], numerator[:-w])
            per_s(d_num, np.subtract(times[w:], times[:-w]), rate[w:])
        starts = _segment_starts(h, steps, times)
        ends = np.append(starts[1:], n)
        fix = np.concatenate([np.arange(a, min(a + w, b)) for a, b in zip(starts.tolist(), ends.tolist())])
        first = np.repeat(starts, np.minimum(ends - starts, w))
        rate[fix] = per_s(numerator[fix] - numerator[first], times[fix] - times[first], np.empty(len(fix)))
    return steps, rate


def _tokens_per_s(h: "HistoryView", name: str) -> Values:
    return _rate(h, _column(h, "tokens")[1])


def _steps_per_s(h: "HistoryView", name: str) -> Values:
    return _rate(h, h.step.astype(np.float64))


def _arm_code(h: "HistoryView", name: str) -> int:
    arm = name.split(FAMILY_SEP, 1)[1]
    if h.arm_column is None or arm not in h.arm_names or not arm:
        raise UnknownSeries(f"unknown series {name!r}: no arm {arm!r} in the history")
    return h.arm_names.index(arm)


def _share(h: "HistoryView", name: str) -> Values:
    code = _arm_code(h, name)
    hits = np.cumsum(h.arm_column == code, dtype=np.float64)
    share = hits.copy()
    share[SHARE_WINDOW:] -= hits[:-SHARE_WINDOW]        # the pulls of the last SHARE_WINDOW rows
    share[:SHARE_WINDOW] /= np.arange(1, min(len(hits), SHARE_WINDOW) + 1)
    share[SHARE_WINDOW:] /= SHARE_WINDOW
    return h.step, share


def _prob(h: "HistoryView", name: str) -> Values:
    code = _arm_code(h, name)
    steps, p = _column(h, "p")
    mine = h.arm_column == code
    return steps[mine], p[mine]


SERIES: dict[str, SeriesSpec] = {spec.name: spec for spec in (
    SeriesSpec("loss", "loss", needs=("loss",)),
    SeriesSpec("eval_loss", "eval loss", derive=_eval_loss),
    SeriesSpec("grad_norm", "grad-norm", needs=("grad_norm",)),
    SeriesSpec("lr", "learning rate", needs=("lr",)),
    SeriesSpec("tokens_per_s", "throughput", derive=_tokens_per_s, needs=("tokens", "time")),
    SeriesSpec("steps_per_s", "steps/s", derive=_steps_per_s, needs=("time",)),
    SeriesSpec("gpu_util", "GPU utilisation", needs=("gpu_util",)),
    SeriesSpec("gpu_mem_used", "GPU memory used", needs=("gpu_mem_used",)),
    SeriesSpec("gpu_power_w", "GPU power", needs=("gpu_power_w",)),
    SeriesSpec("gpu_temp_c", "GPU temperature", needs=("gpu_temp_c",)),
)}
# Series made for each arm: ``share/<arm>``, ``p/<arm>``.
FAMILIES: dict[str, SeriesSpec] = {spec.name: spec for spec in (
    SeriesSpec("share", "share of pulls", derive=_share),
    SeriesSpec("p", "probability", derive=_prob, needs=("p",)),
)}


def spec_of(name: str) -> SeriesSpec:
    """The spec of any series name (a column no table names gets its name as its label).
    The label is what every view shows, so the part of it that comes from the history (an
    arm's name, a key's) is made printable here, once."""
    if name in SERIES:
        return SERIES[name]
    family, _, arm = name.partition(FAMILY_SEP)
    if arm and family == "eval_loss":
        return SeriesSpec(name, f"eval loss · {printable(arm)}", derive=_eval_loss)
    if arm and family in FAMILIES:
        base = FAMILIES[family]
        return SeriesSpec(name, f"{base.label} · {printable(arm)}", base.derive, base.needs)
    return SeriesSpec(name, printable(name))


def _memo(h: "HistoryView") -> dict:
    """A per-view cache: the view is immutable, so what is derived from it stays true."""
    return h.__dict__.setdefault("_series_memo", {})


def _names(h: "HistoryView") -> frozenset[str]:
    memo = _memo(h)
    if "names" not in memo:
        # A history with no step line yet has no series of the step lines, only their names.
        memo["names"] = frozenset(n for n in h.series_names() if len(h.step) or n.startswith("eval_loss"))
    return memo["names"]


def available(h: "HistoryView") -> list[str]:
    """The history's series, in the picker's order: the table's, then each arm's, then the
    other numeric columns."""
    names = _names(h)
    out = [s.name for s in SERIES.values() if s.needs and set(s.needs) <= names]
    if names & {"eval_loss", "val_loss"}:
        out.insert(1, "eval_loss")
    arms = [a for a in h.arm_names if a] if h.arm_column is not None and len(h.arm_column) else []
    for family in FAMILIES.values():
        if set(family.needs) <= names:
            out += [f"{family.name}{FAMILY_SEP}{arm}" for arm in arms]
    used = {n for s in SERIES.values() for n in s.needs} | {"eval_loss", "val_loss"} | NOT_SERIES
    out += sorted(names - used)
    return out


def series_values(h: "HistoryView", name: str) -> Values:
    """``(steps, values)`` of series ``name``; :class:`UnknownSeries` (naming the ones there
    are) when the history has no such series."""
    memo = _memo(h)
    if name in memo:
        return memo[name]
    if name not in available(h):
        have = ", ".join(available(h)) or "none"
        raise UnknownSeries(f"unknown series {name!r}; this history has: {have}")
    spec = spec_of(name)
    values = spec.derive(h, name) if spec.derive is not None else _column(h, name)
    memo[name] = values
    return values


def is_sparse(h: "HistoryView", name: str, steps: np.ndarray) -> bool:
    """Whether series ``name`` (at ``steps``) has a value at some steps only, fewer than half
    the step lines (the eval lines): drawn joined into a line, not smoothed, not as dots."""
    return name != "loss" and 0 < len(steps) < len(h.step) // 2


def value_at(h: "HistoryView", name: str, step: int) -> float:
    """The series' last finite value at or before ``step`` (a sparse one, such as the eval
    loss, has one every so many steps); NaN when there is none."""
    memo = _memo(h)
    key = ("finite", name)
    if key not in memo:
        steps, values = series_values(h, name)
        ok = np.isfinite(values)
        memo[key] = (steps[ok], values[ok])
    steps, values = memo[key]
    i = int(np.searchsorted(steps, step, side="right")) - 1
    return float(values[i]) if i >= 0 else math.nan


def on_rows(h: HistoryView, steps: np.ndarray, column: np.ndarray | None) -> np.ndarray | None:
    """A per-step column of the history (tokens, time, the abandoned mask) at ``steps``: a
    series of some steps only (``p/<arm>``) takes the rows of its own steps."""
    if column is None or len(column) == len(steps):         # a series of every step
        return column
    if not len(column):
        return np.full(len(steps), np.nan) if column.dtype.kind == "f" else np.zeros(len(steps), column.dtype)
    return column[np.minimum(np.searchsorted(h.step, steps), len(column) - 1)]
