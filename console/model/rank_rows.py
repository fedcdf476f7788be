"""The ranks of a job as rows and as plain data: one formatting for ``--once``, ``--json`` and the
ranks pane (:class:`~console.model.snapshot.RanksView`, judged by :mod:`rundir.ranks`)."""

from __future__ import annotations

from typing import Any

from rundir.ranks import RankStatus

from .format import format_age, format_size, printable

# The columns of a rank's row: (header, width); the pane and --once share them.
# 75 columns in all: a row fits an 80-column terminal inside a pane's border and scroll bar.
COLUMNS = (("rank", 5), ("host", 10), ("step", 7), ("ms", 6), ("vs med", 6), ("data", 4), ("cpu", 4),
           ("rss", 9), ("beat", 5), ("verdict", 10))


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.0f}" if seconds < 10 else f"{seconds:.0f}s"


def _age(seconds: float) -> str:
    """The heartbeat's age; ``ahead`` when its clock runs ahead of this machine's."""
    return "ahead" if seconds < 0 else format_age(seconds)


def rank_cells(status: RankStatus, now: float) -> tuple[str, ...]:
    """A rank's cells, in :data:`COLUMNS`' order (no pid, no clock: the age of its heartbeat); ``ms``
    is the step's wall time, ``vs med`` its work per step against the ranks' median, ``data`` the
    share of the step spent drawing the batch."""
    rec = status.record
    share = rec.data_share
    return (str(rec.rank), printable(rec.host, 10), "-" if rec.step is None else f"{rec.step:,}", _ms(rec.step_s),
            "-" if status.slower_by is None else f"{status.slower_by * 100:+.0f}%",
            "-" if share is None else f"{share * 100:.0f}%",
            "-" if rec.cpu_percent is None else f"{rec.cpu_percent:.0f}%", format_size(rec.rss),
            _age(now - rec.last_heard), status.verdict)


def rank_line(status: RankStatus, now: float) -> str:
    """One row of :data:`COLUMNS` as text."""
    return " ".join(cell[:width].ljust(width) for cell, (_, width) in zip(rank_cells(status, now), COLUMNS)).rstrip()


def header_line() -> str:
    return " ".join(name.ljust(width) for name, width in COLUMNS).rstrip()


def rank_json(status: RankStatus, now: float) -> dict[str, Any]:
    rec = status.record
    return {"rank": rec.rank, "local_rank": rec.local_rank, "world_size": rec.world_size, "host": rec.host,
            "pid": rec.pid, "verdict": status.verdict, "why": status.why, "local": status.local,
            "step": rec.step, "step_time": rec.step_time, "step_s": rec.step_s, "work_s": rec.work_s,
            "data_s": rec.data_s, "data_share": rec.data_share, "slower_by": status.slower_by,
            "behind_by": status.behind_by, "cpu_percent": rec.cpu_percent, "rss": rec.rss, "gpu": dict(rec.gpu),
            "heartbeat": rec.heartbeat, "heartbeat_age": now - rec.last_heard, "started": rec.started,
            "exit_code": rec.exit_code, "launch": rec.launch}
