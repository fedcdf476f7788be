"""What the run API (:mod:`rundir.run`) takes from a training loop, checked: a history line's
integer, a metric's name, a path. Each refusal is one :class:`RunError` line."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

from .config import ConfigError, RunConfig, engine_config_text, read_run_toml
from .layout import RUN_TOML


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


def number(key: str, value: Any) -> float | int:
    """A step line's value: an int or float as it is, a numpy or torch scalar by ``item()``."""
    if type(value) is float:
        return value
    kind = type(value)
    if kind is int:
        return int64(key, value)
    if kind is not bool:
        item = getattr(value, "item", None)
        if callable(item):
            try:
                value = item()
            except (TypeError, ValueError, RuntimeError):       # a tensor of several elements
                raise RunError(f"run.log: {key} is {shown(value)}, not a single number") from None
            if type(value) in (int, float):
                return int64(key, value) if type(value) is int else value
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value) if isinstance(value, float) else int64(key, int(value))
    raise RunError(f"run.log: {key} = {shown(value)} is not a number")


def checked_step(where: str, step: Any) -> int:
    """A step the API takes: an int (or a numpy or torch integer scalar) from 0 to 2**63 - 1."""
    if type(step) is not int:
        item = getattr(step, "item", None)
        try:
            step = item() if callable(item) and not isinstance(step, bool) else step
        except (TypeError, ValueError, RuntimeError):       # a tensor of several elements
            pass
    if type(step) is not int or not 0 <= step < 2**63:
        raise RunError(f"{where}: step {shown(step)} is not an integer from 0 to 2**63 - 1")
    return step


def recorded_path(run_dir: Path, target: Path) -> str:
    """A path as the history records it: relative to the run directory when it lies inside it,
    else absolute."""
    absolute = Path(os.path.abspath(target))
    try:
        return str(absolute.relative_to(Path(os.path.abspath(run_dir))))
    except ValueError:
        return str(absolute)


def run_toml_text(run_dir: Path, config: Mapping[str, Any] | None) -> str | None:
    """The run.toml that open_run writes (None: keep the one there): ``config`` as its
    ``[config]``, the other tables of the one there (``[run]``, ``[alerts]``, ``[console]``)
    kept as they are; refuses andrea-train's own run."""
    existing: dict[str, Any] | None = None
    if (run_dir / RUN_TOML).exists():
        try:
            existing = read_run_toml(run_dir)
            RunConfig.from_dict(existing)
        except ConfigError:
            existing = None                 # unreadable: replaced
    if existing is not None and "config" not in existing:
        raise RunError(f"open_run: {run_dir} is andrea-train's run (its {RUN_TOML} has data arms and no "
                       "[config]): train another directory")
    if config is None and existing is not None:
        return None
    if config is not None and not isinstance(config, Mapping):
        raise RunError(f"open_run: config is {type(config).__name__}, not a dict")
    try:
        return engine_config_text(run_dir.resolve().name, dict(config or {}), existing)
    except ConfigError as err:
        raise RunError(f"open_run: {err}") from None
