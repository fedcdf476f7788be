"""The step lines of a history as numpy columns: one row per step, the newest line winning,
and the lines it replaced kept beside their replacement (for resume verification)."""

from __future__ import annotations

from typing import Any

import numpy as np

from . import limits
from .records import FLOAT_COLUMNS

SERIES_PREFIX = "series."         # a series' name among the arrays (its key follows)


class Columns:
    """Growable, step-sorted numpy columns; appending is amortised O(new rows). Besides the
    columns every history has, ``series`` holds a float64 column per series (:mod:`.keys`),
    NaN on the rows of lines read before it was found."""

    def __init__(self) -> None:
        self.n = 0
        self.step = np.empty(0, np.int64)
        self.tokens = np.empty(0, np.int64)
        self.arm = np.empty(0, np.int32)
        self.floats = {name: np.empty(0, np.float64) for name in FLOAT_COLUMNS}
        self.shared = 0         # rows [0, shared) are handed out as views (share): never changed in place
        self.series: dict[str, np.ndarray] = {}

    def get(self, name: str) -> np.ndarray:
        arr = self.floats[name] if name in self.floats else getattr(self, name)
        return arr[: self.n]

    def get_series(self, name: str) -> np.ndarray:
        return self.series[name][: self.n]

    def arrays(self) -> list[tuple[str, np.ndarray]]:
        return [("step", self.step), ("tokens", self.tokens), ("arm", self.arm),
                *self.floats.items(), *((SERIES_PREFIX + name, arr) for name, arr in self.series.items())]

    def add_series(self, name: str) -> None:
        """A new series column: NaN on every row so far, with the others' room."""
        self.series[name] = np.full(len(self.step), np.nan)

    def share(self) -> None:
        """The rows so far are handed out as views that must not change (a snapshot's): a later
        rewind over them first moves the columns to new arrays (appending never touches them)."""
        self.shared = self.n

    def reserve(self, total: int) -> None:
        """Room for ``total`` rows, exactly: a read that knows about how many rows are
        coming grows the columns once, not by doubling (pages not yet written cost no memory)."""
        if total > len(self.step):
            self._grow(total)

    def _reserve(self, total: int) -> None:
        if total > len(self.step):
            self._grow(max(total, 2 * len(self.step), 1024))

    def _grow(self, capacity: int) -> None:
        for name, old in self.arrays():
            new = np.empty(capacity, old.dtype)
            new[: self.n] = old[: self.n]
            self.replace(name, new)
            del old

    def replace(self, name: str, arr: np.ndarray) -> None:
        if name in self.floats:
            self.floats[name] = arr
        elif name.startswith(SERIES_PREFIX):
            self.series[name[len(SERIES_PREFIX):]] = arr
        else:
            setattr(self, name, arr)

    def extend(self, block: dict[str, Any], superseded: "Superseded | None" = None, seq: int = 0) -> bool:
        """Add rows (in file order); returns True when that rewound over known steps. The
        rows that newer ones replace go to ``superseded`` with their replacement (whose
        place among all the step lines read is ``seq`` plus its index in the block)."""
        k = len(block["step"])
        if not k:
            return False
        steps = block["step"]
        old_n = self.n
        in_order = bool(np.all(steps[1:] > steps[:-1])) and (old_n == 0 or steps[0] > self.step[old_n - 1])
        self._reserve(old_n + k)
        given: dict[str, np.ndarray] = block.get("series", {})
        for name in given:
            if name not in self.series:
                self.add_series(name)
        for name, arr in self.arrays():
            if name.startswith(SERIES_PREFIX):
                values = given.get(name[len(SERIES_PREFIX):])
                arr[old_n:old_n + k] = np.nan if values is None else values
            else:
                arr[old_n:old_n + k] = block[name]
        self.n += k
        if not in_order:
            # Rows before the block's smallest step are sorted, unique and untouched by it.
            self._keep_newest_per_step(int(np.searchsorted(self.step[:old_n], steps.min())), superseded,
                                       seq - old_n)
        return not in_order

    def _keep_newest_per_step(self, lo: int = 0, superseded: "Superseded | None" = None, seq: int = 0) -> None:
        if lo < self.shared:
            self._grow(len(self.step))                # copies: the rows handed out stay as they were
            self.shared = 0
        steps = self.step[lo: self.n]
        order = np.argsort(steps, kind="stable")      # equal steps stay in file order
        sorted_steps = steps[order]
        is_last = np.append(sorted_steps[1:] != sorted_steps[:-1], True)
        if superseded is not None:
            older = order[:-1][~is_last[:-1]] + lo    # each replaced row, and the next line for its step
            newer = order[1:][~is_last[:-1]] + lo
            loss, grad_norm = self.floats["loss"], self.floats["grad_norm"]
            superseded.add(self.step[newer], newer + seq, loss[older], grad_norm[older], loss[newer],
                           grad_norm[newer], self.floats["time"][older], self.floats["time"][newer])
        keep = order[is_last] + lo
        for _, arr in self.arrays():
            arr[lo: lo + len(keep)] = arr[keep]
        self.n = lo + len(keep)


class Superseded:
    """Step lines that a newer line for the same step replaced, each beside its replacement:
    ``step``, ``row`` (the replacement's place among all step lines read, comparable with
    :attr:`~.records.HistoryEvent.row`), loss, grad_norm and time of both (``old_time``,
    ``new_time``: NaN where a line had none; a rollback's abandoned steps, and a step logged
    again by the same process, are told by them). The newest
    :data:`~.limits.MAX_SUPERSEDED` are kept, in the order their replacements were read."""

    NAMES = ("step", "row", "old_loss", "old_grad_norm", "new_loss", "new_grad_norm", "old_time", "new_time")

    def __init__(self) -> None:
        self.columns = {name: np.empty(0, np.int64 if name in ("step", "row") else np.float64)
                        for name in self.NAMES}

    def __len__(self) -> int:
        return len(self.columns["step"])

    def add(self, *values: np.ndarray) -> None:
        if not len(values[0]):
            return
        order = np.argsort(values[1], kind="stable")      # by the replacement's place
        for name, new in zip(self.NAMES, values):
            joined = np.concatenate([self.columns[name], new[order]])
            self.columns[name] = joined[-limits.MAX_SUPERSEDED:]

    def get(self, name: str) -> np.ndarray:
        return self.columns[name]
