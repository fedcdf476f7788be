"""How figures read on every view (dashboard panes, ``--once``, notices): one formatter each."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

# Text from the run directory is made printable in one place, shared with rundir's own
# messages; the panes and --once import it from here with the other formatters.
from rundir.text import LINE_LIMIT, counted, printable, printable_block  # noqa: F401

# The loss plot's x axes (the x key cycles them; --x-axis picks one): here, not in the
# plot module, so that the command line offers them without loading numpy.
X_AXES = ("step", "tokens", "time")
# What every step of a history must have for an x axis other than the step (else the plot
# is by step, and says so).
AXIS_NEEDS = {"time": "a time", "tokens": "a token count"}

if TYPE_CHECKING:
    from rundir.storage import Storage

    from .snapshot import TrainerView


# A trainer's state (rundir.process's verification) as every view labels it.
TRAINER_LABELS = {"running": "running", "stopped": "stopped", "stale": "stale pid record",
                  "unverified": "not supervised", "unreadable": "not supervised", "remote": "on another host"}


def stall_text(t: "TrainerView") -> str:
    """``no new step for 2m05s (alive and verified; stall threshold 1m00s)``."""
    return idle_text(t.stalled_for, t.stall_threshold, t.suspended)


def idle_text(idle: float | None, threshold: float | None, suspended: str | None = None) -> str:
    """:func:`stall_text` from its figures (the overview's stall has no :class:`TrainerView`)."""
    text = f"no new step for {format_age(idle)} (alive and verified; stall threshold {format_age(threshold)})"
    return f"{text}: {suspended}" if suspended else text


def slurm_text(job: dict[str, str] | None) -> str:
    """``SLURM job 123 (andrea:120m) RUNNING on node07, 1-02:03:04 of 2-00:00:00``, from the
    record and what the scheduler said; "" outside SLURM."""
    if not job:
        return ""
    name = f" ({job['job_name']})" if job.get("job_name") else ""
    text = f"SLURM job {job.get('job_id', '?')}{name}"
    if job.get("state"):
        text += f" {job['state']}"
    text += f" on {job.get('node') or '?'}"
    if job.get("run_time"):
        text += f", {job['run_time']} of {job.get('time_limit') or '?'}"
    return printable(text, 200)


def storage_text(storage: "Storage") -> str:
    """``1.2 GiB used · 310.5 GiB free · full in ~3d04h`` (``~`` only: a steady-state estimate)."""
    used = ("≥ " if storage.approximate else "") + format_size(storage.used)
    text = f"{used} used · {format_size(storage.free)} free"
    full_in = storage.full_in_s
    if full_in is not None:
        age = format_age(full_in)
        text += f" · full in {'' if age == 'over a year' else '~'}{age}"
    if storage.too_full:
        text += f" · room for {counted(storage.checkpoints_that_fit, 'checkpoint')}"
    return text


def format_size(n: int | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}" if n < 1e6 else f"{n:.3g} {unit}"
        n /= 1024
    return "-"


def format_age(seconds: float | None) -> str:
    """A duration: ``45s``, ``3m07s``, ``2h05m``, ``4d03h``; "in the future" for a negative one
    (a time recorded ahead of this machine's clock)."""
    if seconds is None or not math.isfinite(seconds):
        return "-"
    if seconds < 0:
        return "in the future"
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    if s >= 365 * 86400:
        return "over a year"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def format_ago(seconds: float | None) -> str:
    """How long ago something happened: ``3m07s ago``, or ``2m00s in the future`` when its
    time is ahead of this machine's clock (never "in the future ago")."""
    if seconds is None or not math.isfinite(seconds):
        return "-"
    return f"{format_age(seconds)} ago" if seconds >= 0 else f"{format_age(-seconds)} in the future"


def format_uptime(seconds: float | None) -> str:
    """How long a process has run: ``2h05m``; when its recorded start is ahead of this
    machine's clock, that is said instead of a negative duration."""
    if seconds is not None and math.isfinite(seconds) and seconds < 0:
        return f"- (started {format_age(-seconds)} in the future)"
    return format_age(seconds)


def format_rate(x: float | None, unit: str) -> str:
    """``12.5 steps/s``; "-" when unknown or negative (a count that went back is no speed)."""
    if x is None or not math.isfinite(x) or x < 0:
        return "-"
    x += 0.0                            # -0.0 reads 0.0
    if x >= 1e9:
        return f"{x:.3g} {unit}/s"
    if x >= 10_000:
        return f"{x / 1000:,.1f}k {unit}/s"
    return f"{x:,.1f} {unit}/s"


def format_float(x: float | None, fmt: str = ".4f") -> str:
    """``x`` in ``fmt``; in 4 significant digits when that would be longer than 12 characters
    (a value no trainer writes, 1e308, must not widen a column to 300 digits)."""
    if x is None or not math.isfinite(x):
        return "-"
    text = format(x, fmt)
    return text if len(text) <= 12 else f"{x:.4g}"


def format_pct(x: float | None) -> str:
    if x is None or not math.isfinite(100 * x):
        return "-"
    return f"{100 * x:.1f}%" if abs(100 * x) < 1e6 else f"{100 * x:.3g}%"


def format_counter(value: object) -> str:
    """A counter from the run directory (the bandit's phase): a whole number with thousands
    separators, a fraction in four significant digits, anything else as printable text."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return format(value, ".4g")
    return printable(value)
