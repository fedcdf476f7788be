"""What the run API (:mod:`rundir.run`) takes from a training loop, checked: a history line's
integer, a metric's name, a path. Each refusal is one :class:`RunError` line."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


class RunError(RuntimeError):
    """A bad use of the run API; the message is one line saying what and why."""


def shown(value: Any) -> str:
    """A value as a refusal quotes it: its repr, at most 60 characters."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def int64(key: str, value: int) -> int:
    """An integer a history line can hold (a reader's columns are 64-bit)."""
    if not -2**63 <= value < 2**63:
        raise RunError(f"run.log: {key} = {shown(value)} is past 64 bits (log it as a float)")
    return value


# Keys a metric may not take: the reader's own (an "event" key makes the line an event; "time"
# is stamped by run.log); and a name must be printable text without quotes or backslashes, which
# JSON would escape and a reader's series could not name.
RESERVED_METRICS = frozenset({"event", "time", "nonfinite", "skipped"})


def metric_name(key: str) -> str:
    if key in RESERVED_METRICS:
        raise RunError(f"run.log: a metric may not be named {key!r} (the history's own key): rename it")
    if not key or not key.isprintable() or '"' in key or "\\" in key:
        raise RunError(f"run.log: metric name {shown(key)} is empty or holds a quote, a backslash or a control "
                       "character: rename it")
    return key


def text_path(where: str, path: Any) -> Path:
    """A path the API takes: text (a str or an os.PathLike giving one)."""
    text = os.fspath(path) if isinstance(path, (str, os.PathLike)) else None
    if not isinstance(text, str):
        raise RunError(f"{where}: path {shown(path)} is not text (a str or a pathlib.Path)")
    return Path(text)


