"""Which keys of a step line are series: every numeric one, found as the lines are read.

Besides the columns every history has (:data:`~.records.STEP_COLUMNS`), any other key of a
step line whose value is a number (an integer or a float, never a boolean) is a **series**:
a float64 column, NaN on the lines that lack it or hold something else there (a string, a
boolean, null) or a non-finite number (a series value is a finite number: ``NaN`` and
``Infinity`` tokens, and numbers past a float's range, read as NaN). Our trainer's ``p`` and
GPU figures, another engine's ``val_loss`` or ``mfu``, are found this way, with no list of
names anywhere.

:class:`SeriesKeys` is what the reader knows of a history's keys so far: the series, in the
order they were first found, and the other keys of step lines (strings, objects, ...). The
fast path decodes step lines into a struct made of exactly these keys that refuses any other
(:meth:`SeriesKeys.decoder`): a line with a key never seen fails that decode, its batch is
read whole once (which finds the key), and the next batches decode fast again with it. A
key seen first with another value and later with a number becomes a series then (its
earlier lines are NaN, as they would be).

**Bounded.** At most :data:`~.limits.MAX_SERIES` series and :data:`~.limits.MAX_OTHER_KEYS`
other keys are kept; past either, the struct stops refusing unknown keys (the fast path
skips them, as it skipped every unknown key before) and no series is added any more. The
numeric keys found but not kept are counted in :attr:`SeriesKeys.dropped` (each once, with
the first few names), as far as lines read whole show them (the fast path skips them unseen:
the count is a lower bound): a hostile file with 100,000 distinct keys costs
:data:`~.limits.MAX_SERIES` columns, and one line saying so. A key with a quote, a backslash
or a control character in its name (no struct field can be named so) makes the keys full too.
"""

from __future__ import annotations

import functools
import math
import re
from typing import Any, Callable

import msgspec

from . import limits

# The keys of a step line that are not series: the columns every history has, and the event.
BASE_KEYS = frozenset(("step", "tokens", "arm", "loss", "lr", "grad_norm", "time", "event"))
DROPPED_NAMES = 5               # names of dropped keys kept, for the finding
MAX_DROPPED_TRACKED = 10_000    # dropped keys remembered, so that each is counted once
MAX_KEY_CHARS = 200             # a longer key is never a series (counted as dropped)
_UNDECLARABLE = re.compile(r'[\\"\x00-\x1f]')
_OTHER = str | bool | None | list[Any] | dict[Any, Any]     # any JSON value but a number: a number fails the decode


def is_number(value: Any) -> bool:
    """Whether a parsed JSON value makes its key a series: an int or a float, not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def printable_name(key: str) -> str:
    """A key as a finding names it: short, its odd characters escaped."""
    text = key.encode("unicode_escape").decode("ascii")
    return text if len(text) <= 40 else text[:37] + "..."


def series_value(value: Any) -> float:
    """A value of a series: the finite number, else NaN (absent, null, a string, a boolean,
    a non-finite number, an integer past a float's range)."""
    if not is_number(value):
        return math.nan
    try:
        x = float(value)
    except OverflowError:
        return math.nan
    return x if math.isfinite(x) else math.nan


class SeriesKeys:
    """The keys of a history's step lines found so far (see the module's docstring)."""

    def __init__(self) -> None:
        self.series: list[str] = []             # in the order they were first found
        self.other: set[str] = set()            # keys of step lines holding no number (yet)
        self.full = False                       # a limit was reached: no key is added any more
        self.dropped = 0                        # numeric keys found and not kept
        self.dropped_names: list[str] = []      # the first DROPPED_NAMES of them
        self._dropped_seen: set[str] = set()    # each counted once (the first MAX_DROPPED_TRACKED)
        self._index: dict[str, int] = {}
        self.version = 0

    def __contains__(self, name: str) -> bool:
        return name in self._index

    # -- what the lines say ----------------------------------------------------------
    def observe(self, record: dict[str, Any]) -> None:
        """Learn the keys of a step line (read whole)."""
        if len(record) <= len(BASE_KEYS) and record.keys() <= BASE_KEYS:
            return
        index, other = self._index, self.other
        new = [(key, value) for key, value in record.items() if key not in BASE_KEYS and key not in index
               and (key not in other or is_number(value))]
        if not new:
            return
        # Keys a struct can hold first: one it cannot makes it full, the line's others are kept.
        new.sort(key=lambda item: not self._declarable(item[0]))
        for key, value in new:
            numeric = is_number(value)
            if not numeric and self.full:
                continue
            if not self._declarable(key):
                self.full = True                # the struct could not refuse it: it skips every unknown key
            elif numeric and len(self.series) >= limits.MAX_SERIES:
                self.full = True
            elif not numeric and len(self.other) >= limits.MAX_OTHER_KEYS:
                self.full = True
            if self.full:
                if numeric:
                    self._drop(key)
                continue
            if numeric:
                self._index[key] = len(self.series)
                self.series.append(key)
                self.other.discard(key)
            else:
                self.other.add(key)
            self.version += 1

    @staticmethod
    def _declarable(key: str) -> bool:
        """Whether a key can be a field of the struct (msgspec takes no backslash, quote or
        control character in a field's name) and is short enough to be a series' name."""
        return len(key) <= MAX_KEY_CHARS and _UNDECLARABLE.search(key) is None

    def _drop(self, key: str) -> None:
        if key in self._dropped_seen:
            return
        if len(self._dropped_seen) < MAX_DROPPED_TRACKED:
            self._dropped_seen.add(key)
        self.dropped += 1
        if len(self.dropped_names) < DROPPED_NAMES:
            self.dropped_names.append(printable_name(key))

    def row(self, record: dict[str, Any]) -> tuple[float, ...]:
        """A step line's series values, in the order of :attr:`series`."""
        return tuple(series_value(record.get(name)) for name in self.series)

    # -- the fast path's struct --------------------------------------------------------
    def decoder(self, base: type) -> Callable[[Any], list[Any]]:
        """A decoder of a JSON array of step lines into structs with ``base``'s fields, a
        ``float | None`` field per series and a non-number field per other key, refusing any
        key not among them (until a limit is reached: then skipping it)."""
        return _decoder(base, tuple(self.series), tuple(sorted(self.other)), self.full)

    def field_names(self) -> list[str]:
        """The struct's attribute of each series, in the order of :attr:`series`."""
        return [f"s{i}" for i in range(len(self.series))]

    # -- hand-over ---------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"series": list(self.series), "other": sorted(self.other), "full": self.full,
                "dropped": self.dropped, "dropped_names": list(self.dropped_names)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.series = [str(name) for name in state.get("series", ())]
        self._index = {name: i for i, name in enumerate(self.series)}
        self.other = {str(name) for name in state.get("other", ())}
        self.full = bool(state.get("full", False))
        self.dropped = int(state.get("dropped", 0))
        self.dropped_names = [str(name) for name in state.get("dropped_names", ())]
        self.version += 1


@functools.lru_cache(maxsize=16)
def _decoder(base: type, series: tuple[str, ...], other: tuple[str, ...], full: bool) -> Callable[[Any], list[Any]]:
    """:meth:`SeriesKeys.decoder`'s decoder for these keys, made once per process: each
    history opened (a mirror 100 lines behind, the overview's compare) would otherwise
    define its struct anew (about half a millisecond)."""
    fields = [(f.name, f.type, f.default) for f in msgspec.structs.fields(base)]
    rename = {f[0]: f[0] for f in fields}
    for i, name in enumerate(series):
        fields.append((f"s{i}", float | None, math.nan))     # absent: NaN; null: None
        rename[f"s{i}"] = name
    for i, name in enumerate(other):
        fields.append((f"o{i}", _OTHER, None))
        rename[f"o{i}"] = name
    struct = msgspec.defstruct(f"{base.__name__}_keys", fields, rename=rename, forbid_unknown_fields=not full,
                               gc=False)
    return msgspec.json.Decoder(list[struct]).decode      # type: ignore[valid-type]  # a type made at run time
