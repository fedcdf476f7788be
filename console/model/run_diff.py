"""What differs between compared runs: their ``run.toml`` and their start events, as rows.

The comparison (overview ``v``) shows beside the curves why they may differ: a table of each
setting that is not the same in every run compared. :func:`run_diff` is that table, made of
plain data: for each run its ``run.toml`` as a dict (``RunConfig.to_dict()``: defaults
filled in, so a value left out and the same value written are the same) and the data of its
start event (the first ``start`` in its history, else its newest ``resume``: what the trainer
ran with, after command-line overrides, with the torch version and the device). Both are
flattened into dotted keys (``optimizer.lr``, ``arms.stdlib-code.cap``, ``start.torch_version``)
and only the keys whose values are not all the same are kept, in the order they first appear.
A run without a ``run.toml`` (another engine's) or without a start event has no value there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from rundir import HistoryEvent
from rundir.layout import EVENT_RESUME, EVENT_START, RUN_TOML

ABSENT = "—"
START_PREFIX = "start."
# Start-event keys that are bookkeeping of that one process, not a setting of the run.
SKIPPED_START_KEYS = frozenset(("event", "step", "time", "pid", "from_step", "checkpoint", "exact", "fresh",
                                "reset", "rerun", "restored_checksum", "skip_batches", "fresh_bandit"))
# run.toml keys that say nothing about how a run trains: its name (the columns are named by it).
SKIPPED_CONFIG_KEYS = frozenset(("run.name",))
MAX_ROWS = 500                  # a hostile run.toml or event: the first rows only


@dataclass(frozen=True)
class DiffRow:
    """One setting that differs: its dotted key and each run's value, as text (``ABSENT``
    where the run has none), in the order of the runs."""

    key: str
    values: tuple[str, ...]


def start_data(events: Iterable[HistoryEvent]) -> dict[str, Any] | None:
    """The data of a history's first ``start`` event, else of its newest ``resume``; None: neither."""
    resume = None
    for event in events:
        if event.event == EVENT_START:
            return event.data
        if event.event == EVENT_RESUME:
            resume = event.data
    return resume


def flatten(value: dict[str, Any], prefix: str = "", out: dict[str, Any] | None = None) -> dict[str, Any]:
    """A nested dict as ``{"a.b.c": leaf}``; lists are leaves, compared and shown whole, and
    an empty dict is no key. At most :data:`MAX_ROWS` keys."""
    out = {} if out is None else out
    for key, item in value.items():
        if len(out) >= MAX_ROWS:
            break
        name = f"{prefix}{key}"
        if isinstance(item, dict):
            flatten(item, name + ".", out)      # an empty one sets nothing: no row of its own
        else:
            out[name] = item
    return out


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and a == b


def value_text(value: Any) -> str:
    """A value as the table shows it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.8g}"
    if isinstance(value, (list, tuple)):
        return ", ".join(value_text(item) for item in value) or "[]"
    if isinstance(value, dict):
        return "{}" if not value else ", ".join(f"{k}={value_text(v)}" for k, v in value.items())
    if value is None:
        return "null"
    return str(value)


def run_diff(runs: Sequence[tuple[dict[str, Any] | None, dict[str, Any] | None]]) -> list[DiffRow]:
    """The rows of what differs between ``runs``, each ``(run.toml as a dict or None, start
    event data or None)``, in the order keys first appear (``run.toml``'s, then the start
    event's as ``start.KEY``). A key is a row when its value is not the same in every run that
    has its source (a ``run.toml``, a start event), a run that has the source and not the key
    included; a run without the source shows :data:`ABSENT` there, and that some runs lack a
    source altogether is a row of its own (``run.toml``, ``start event``)."""
    runs = _as_runs(runs)
    rows: list[DiffRow] = []
    for source, part, prefix in ((RUN_TOML, 0, ""), ("start event", 1, START_PREFIX)):
        given = [run[part] is not None for run in runs]
        if len(set(given)) > 1:
            rows.append(DiffRow(source, tuple("present" if g else ABSENT for g in given)))
        flat = [None if run[part] is None else
                {prefix + key: value for key, value in flatten(
                    {k: v for k, v in run[part].items() if part == 0 or k not in SKIPPED_START_KEYS}).items()}
                for run in runs]
        if part == 0:
            flat = [None if values is None else {k: v for k, v in values.items() if k not in SKIPPED_CONFIG_KEYS}
                    for values in flat]
        rows.extend(_differing(flat))
    return rows[:MAX_ROWS]


def _as_runs(runs: Sequence[tuple[dict[str, Any] | None, dict[str, Any] | None]]
             ) -> list[tuple[dict[str, Any] | None, dict[str, Any] | None]]:
    """The runs' settings as they ran: a start event's command-line overrides (``overrides``)
    applied to its run's ``run.toml`` ``[run]``; and a start event's key that ``[run]`` holds
    too (``preset``, ``seed``, ``max_steps``...) left to ``run.toml``'s rows where every run with
    a start event has a ``run.toml``, so that no setting is two rows. A run without a
    ``run.toml`` keeps its start event whole."""
    out = []
    for config, start in runs:
        overrides = start.get("overrides") if start is not None and config is not None else None
        if isinstance(overrides, dict) and overrides:
            config = {**config, "run": {**config.get("run", {}), **overrides}}
        if start is not None and config is not None:
            start = {k: v for k, v in start.items() if k != "overrides"}
        out.append((config, start))
    if all(config is not None for config, start in out if start is not None):
        sections = [set(config.get("run", {})) for config, _ in out if config is not None]
        held = set.intersection(*sections) if sections else set()
        out = [(config, None if start is None else {k: v for k, v in start.items() if k not in held})
               for config, start in out]
    return out


def _differing(flat: list[dict[str, Any] | None]) -> list[DiffRow]:
    """The rows of the keys whose values differ among the runs that have a source (not None)."""
    having = [values for values in flat if values is not None]
    if len(having) < 2:
        return []
    keys: dict[str, None] = {}
    for values in having:
        keys.update(dict.fromkeys(values))
    missing = object()
    rows = []
    for key in keys:
        got = [values.get(key, missing) for values in having]
        if all(v is not missing for v in got) and all(_same(got[0], v) for v in got[1:]):
            continue
        shown = [ABSENT if values is None or key not in values else value_text(values[key]) for values in flat]
        rows.append(DiffRow(key, tuple(shown)))
        if len(rows) >= MAX_ROWS:
            break
    return rows
