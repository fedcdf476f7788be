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
- at most :data:`MAX_ARM_SERIES` arms get these, those with the most pulls; the rest are
  one more arm, ``<family>/N other arms``, their pulls together (a history with 10,000
  arm names made 20,000 series of every step: memory arms x steps);
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
from rundir.step_rows import search_steps
from rundir.text import printable

from .series_blocks import pulls_of
from .units import FAMILY_SEP, unit_of

if TYPE_CHECKING:
    from .snapshot import HistoryView

RATE_WINDOW = 50            # steps: tokens/s and steps/s are measured over this many steps
SHARE_WINDOW = 100          # steps: an arm's share of pulls is that of this many steps
MAX_ARM_SERIES = 32         # arms with series of their own; the others share one
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
    rows = search_steps(steps, np.asarray(bounds, np.int64))
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


def others_name(count: int) -> str:
    """The arm that stands for the ``count`` arms without series of their own."""
    return f"{count:,} other arms"


def arm_groups(h: "HistoryView") -> dict[str, np.ndarray]:
    """The arms that get series, each with the codes (into ``arm_names``) it stands for: the
    :data:`MAX_ARM_SERIES` drawn most (in the history's order), then the others as one."""
    memo = _memo(h)
    if "arm_groups" not in memo:
        groups: dict[str, np.ndarray] = {}
        if h.arm_column is not None and len(h.arm_column):
            named = np.array([i for i, arm in enumerate(h.arm_names) if arm], np.int64)
            kept = h.summaries.arm_pulls(h) if h.summaries is not None else None
            pulls = (kept if kept is not None else pulls_of(h.arm_column, len(h.arm_names)))[named]
            drawn = named[pulls > 0]
            top = np.sort(named[np.argsort(-pulls, kind="stable")[:MAX_ARM_SERIES]]) \
                if len(drawn) > MAX_ARM_SERIES else drawn
            groups = {h.arm_names[code]: np.array([code]) for code in top.tolist()}
            rest = np.setdiff1d(drawn, top)
            if len(rest):
                groups[others_name(len(rest))] = rest
        memo["arm_groups"] = groups
    return memo["arm_groups"]


def _arm_rows(h: "HistoryView", name: str) -> np.ndarray:
    """Which rows drew the arm (or the arms) of a family series ``name``."""
    arm = name.split(FAMILY_SEP, 1)[1]
    codes = arm_groups(h).get(arm)
    if codes is None:
        raise UnknownSeries(f"unknown series {name!r}: no arm {arm!r} in the history")
    assert h.arm_column is not None
    return h.arm_column == codes[0] if len(codes) == 1 else np.isin(h.arm_column, codes)


def _share(h: "HistoryView", name: str) -> Values:
    hits = np.cumsum(_arm_rows(h, name), dtype=np.float64)
    share = hits.copy()
    share[SHARE_WINDOW:] -= hits[:-SHARE_WINDOW]        # the pulls of the last SHARE_WINDOW rows
    share[:SHARE_WINDOW] /= np.arange(1, min(len(hits), SHARE_WINDOW) + 1)
    share[SHARE_WINDOW:] /= SHARE_WINDOW
    return h.step, share


def _prob(h: "HistoryView", name: str) -> Values:
    mine = _arm_rows(h, name)
    steps, p = _column(h, "p")
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
    memo = _memo(h)
    if "available" not in memo:
        memo["available"] = _available(h)
        memo["available_set"] = frozenset(memo["available"])
    return memo["available"]


def _available(h: "HistoryView") -> list[str]:
    names = _names(h)
    out = [s.name for s in SERIES.values() if s.needs and set(s.needs) <= names]
    if names & {"eval_loss", "val_loss"}:
        out.insert(1, "eval_loss")
    arms = list(arm_groups(h))
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
    available(h)
    if name not in memo["available_set"]:
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
    i = int(search_steps(steps, step, side="right")) - 1
    return float(values[i]) if i >= 0 else math.nan


def on_rows(h: HistoryView, steps: np.ndarray, column: np.ndarray | None) -> np.ndarray | None:
    """A per-step column of the history (tokens, time, the abandoned mask) at ``steps``: a
    series of some steps only (``p/<arm>``) takes the rows of its own steps."""
    if column is None or len(column) == len(steps):         # a series of every step
        return column
    if not len(column):
        return np.full(len(steps), np.nan) if column.dtype.kind == "f" else np.zeros(len(steps), column.dtype)
    return column[np.minimum(search_steps(h.step, steps), len(column) - 1)]
