"""``.rank-NNNNN.json``: every rank of a job of several processes, as typed records, and what is
wrong with each (docs/contract.md#the-ranks-records).

Each rank's heartbeat thread (:mod:`rundir.rank_heartbeat`) rewrites its record atomically every
:data:`HEARTBEAT_S` seconds. :func:`read_ranks` reads the records of one launch: the one
``.trainer.json`` names while it is there, else the newest; a record of an earlier launch of the
same run directory (a rank of a larger job, a job that was killed) is counted, never read as this
one's. :func:`judge_ranks` gives each rank its verdict, worst first:

- ``stopped``: its process is stopped by a signal (state T); only for a rank of this host and boot.
- ``dead``: its process is gone (or another process has its pid) without an exit recorded; only
  for a rank of this host and boot: another host's pids are never looked up.
- ``silent``: a rank of another host (or boot) whose record has not been rewritten for
  :data:`SILENT_AFTER_S` seconds (frozen, killed or cut off: from here one cannot tell).
- ``behind``: its last finished step is lower than the leader's, and the leader finished a later
  step more than :data:`BEHIND_AFTER_S` seconds after it.
- ``straggling``: its work per step (the batch and the forward pass, before the gradients are
  exchanged) is over :data:`STRAGGLER_FACTOR` times the ranks' median.
- ``exited`` (its exit code recorded) and ``ok``.
"""

from __future__ import annotations

import os
import socket
import statistics
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterable

from .layout import rank_of_record
from .safe_read import read_json_object
from .text import counted
from .trainer_record import read_boot_id, read_trainer_record

RANK_RECORD_VERSION = 1
RANK_RECORD_MAX = 64 * 1024
HEARTBEAT_S = 2.0               # how often a rank rewrites its record
SILENT_AFTER_S = 6.0            # a rank of another host unheard for this long (3 heartbeats) is silent
BEHIND_AFTER_S = 5.0            # the leader finished a later step this long after a rank's last
STRAGGLER_FACTOR = 1.5          # work per step over this times the median: straggling
STRAGGLER_FLOOR_S = 0.010       # ... and longer than the median by at least this (noise of tiny steps)
MAX_RANKS = 65536               # records read from one directory at most

# The verdicts, worst first (the order the console lists ranks in).
VERDICTS = ("dead", "stopped", "silent", "behind", "straggling", "exited", "ok")
PROBLEMS = frozenset(VERDICTS[:5])


@dataclass(frozen=True)
class RankRecord:
    """One rank's record, as its heartbeat last wrote it."""

    rank: int
    world_size: int
    local_rank: int
    host: str
    pid: int
    launch: str                         # the launch (job) it belongs to: shared by all its ranks
    heartbeat: float                    # Unix time of this write
    started: float
    start_ticks: int | None = None
    boot_id: str | None = None
    step: int | None = None             # the last step it finished
    step_time: float | None = None      # Unix time it finished it
    step_s: float | None = None         # EMA of the whole step's wall time
    work_s: float | None = None         # EMA of the batch and forward pass (before the gradient exchange)
    data_s: float | None = None         # EMA of the batch's draw
    cpu_percent: float | None = None
    rss: int | None = None
    gpu: dict[str, float] = field(default_factory=dict)    # gpu_util, gpu_mem_used, gpu_power_w, gpu_temp_c
    exit_code: int | None = None        # set by the rank's last write, as it exits
    written: float | None = None        # the file's mtime as read (the file server's clock; not in the file)

    @property
    def last_heard(self) -> float:
        """When the rank was last heard of: the later of its heartbeat (its own clock) and its
        file's mtime (the server's), as the lock's heartbeat is judged: a rank whose clock lags
        is not taken for silent."""
        return max(self.heartbeat, self.written or 0.0)

    @property
    def data_share(self) -> float | None:
        """The share of a step spent drawing the batch."""
        if self.data_s is None or not self.step_s:
            return None
        return min(1.0, self.data_s / self.step_s)

    def to_dict(self) -> dict[str, Any]:
        data = {"version": RANK_RECORD_VERSION, "rank": self.rank, "world_size": self.world_size,
                "local_rank": self.local_rank, "host": self.host, "pid": self.pid, "launch": self.launch,
                "heartbeat": self.heartbeat, "started": self.started, "start_ticks": self.start_ticks,
                "boot_id": self.boot_id, "step": self.step, "step_time": self.step_time, "step_s": self.step_s,
                "work_s": self.work_s, "data_s": self.data_s, "cpu_percent": self.cpu_percent, "rss": self.rss,
                "gpu": dict(self.gpu), "exit_code": self.exit_code}
        return {key: value for key, value in data.items() if value is not None}


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if value == value and abs(value) != float("inf") else None


def parse_rank_record(data: dict[str, Any]) -> tuple[RankRecord | None, str | None]:
    """A decoded record as ``(record, None)`` or ``(None, reason)``; an optional field of the
    wrong type is dropped."""
    rank, world, pid = _int(data.get("rank")), _int(data.get("world_size")), _int(data.get("pid"))
    host, launch = data.get("host"), data.get("launch")
    heartbeat, started = _num(data.get("heartbeat")), _num(data.get("started"))
    if rank is None or world is None or rank >= world:
        return None, f"rank {data.get('rank')!r} of world size {data.get('world_size')!r} is not a rank"
    if not pid or not isinstance(host, str) or not host or not isinstance(launch, str) or not launch:
        return None, "no pid, host or launch"
    if heartbeat is None or started is None:
        return None, "no heartbeat or start time"
    gpu = data.get("gpu")
    gpu = {k: v for k, v in gpu.items() if isinstance(k, str) and _num(v) is not None} if isinstance(gpu, dict) else {}
    boot = data.get("boot_id")
    exit_code = data.get("exit_code")
    return RankRecord(
        rank=rank, world_size=world, local_rank=_int(data.get("local_rank")) or 0, host=host, pid=pid, launch=launch,
        heartbeat=heartbeat, started=started, start_ticks=_int(data.get("start_ticks")),
        boot_id=boot if isinstance(boot, str) and boot else None, step=_int(data.get("step")),
        step_time=_num(data.get("step_time")), step_s=_num(data.get("step_s")), work_s=_num(data.get("work_s")),
        data_s=_num(data.get("data_s")), cpu_percent=_num(data.get("cpu_percent")), rss=_int(data.get("rss")),
        gpu=gpu, exit_code=exit_code if isinstance(exit_code, int) and not isinstance(exit_code, bool) else None,
    ), None


@dataclass(frozen=True)
class RanksRead:
    """The records of one launch, by rank, and what else was found."""

    launch: str | None
    records: tuple[RankRecord, ...]
    earlier: int = 0                    # records of other launches, not read as this one's
    errors: tuple[str, ...] = ()        # unreadable records, each named


def read_ranks(run_dir: str | os.PathLike[str], launch: str | None = None) -> RanksRead:
    """The rank records of ``launch`` (default: the one ``.trainer.json`` names, else the newest
    launch's, the one started last). Never raises; a run directory with none gives an empty read."""
    run_dir = Path(run_dir)
    if launch is None:
        record, _ = read_trainer_record(run_dir)
        launch = record.launch if record is not None else None
    try:
        names = [entry.name for entry in os.scandir(run_dir) if rank_of_record(entry.name) is not None]
    except OSError:
        return RanksRead(launch, ())
    records: list[RankRecord] = []
    errors: list[str] = []
    for name in sorted(names)[:MAX_RANKS]:
        read = read_json_object(run_dir / name, RANK_RECORD_MAX)
        if not read.ok:
            if not read.missing:
                errors.append(read.error or name)
            continue
        rec, why = parse_rank_record(read.value or {})
        if rec is None or rec.rank != rank_of_record(name):
            errors.append(f"{name}: {why or 'its rank is not its name'}")
            continue
        try:
            rec = replace(rec, written=os.stat(run_dir / name).st_mtime)
        except OSError:
            pass
        records.append(rec)
    if launch is None and records:
        launch = max(records, key=lambda r: r.started).launch        # the launch started last
    mine = tuple(sorted((r for r in records if r.launch == launch), key=lambda r: r.rank))
    return RanksRead(launch, mine, len(records) - len(mine), tuple(errors))


# -- verdicts ------------------------------------------------------------------------------

@dataclass(frozen=True)
class RankStatus:
    """One rank and its verdict (a word of :data:`VERDICTS`), with why in words."""

    record: RankRecord
    verdict: str
    why: str = ""
    local: bool = False                 # of this host and boot: its pid was looked at here
    slower_by: float | None = None      # work per step over the median, as a fraction (0.38: +38%)
    behind_by: int | None = None        # steps behind the leader

    @property
    def problem(self) -> bool:
        return self.verdict in PROBLEMS


ProcessState = Callable[[RankRecord], str]      # "running", "stopped", "gone"


def local_process_state(rec: RankRecord) -> str:
    """A rank of this host and boot: ``stopped`` (state T or t), ``gone`` (no such process, a
    zombie, or another process with its pid), else ``running``: one read of ``/proc/PID/stat``
    (its state, field 3, and its start ticks, field 22)."""
    try:
        with open(f"/proc/{rec.pid}/stat", "rb") as fh:
            stat = fh.read(4096)
    except OSError:
        return "gone"
    # The command name (field 2) is in parentheses and may hold spaces or ")".
    rest = stat[stat.rfind(b")") + 1:].split()
    try:
        state, ticks = rest[0], int(rest[19])
    except (IndexError, ValueError):
        return "gone"
    if state in (b"Z", b"X", b"x") or (rec.start_ticks is not None and ticks != rec.start_ticks):
        return "gone"
    return "stopped" if state in (b"T", b"t") else "running"


@dataclass(frozen=True)
class Here:
    """This host and boot: which records name processes of this kernel."""

    host: str
    boot_id: str | None

    @classmethod
    def now(cls) -> "Here":
        return cls(socket.gethostname(), read_boot_id())

    def holds(self, rec: RankRecord) -> bool:
        return rec.host == self.host and (rec.boot_id is None or self.boot_id is None or rec.boot_id == self.boot_id)


def judge_ranks(records: Iterable[RankRecord], now: float | None = None, here: Here | None = None,
                process_state: ProcessState = local_process_state) -> tuple[RankStatus, ...]:
    """Each rank's verdict, worst first (then by rank)."""
    records = tuple(records)
    now = time.time() if now is None else now
    here = here or Here.now()
    live = [r for r in records if r.exit_code is None]
    works = [r.work_s for r in live if r.work_s is not None]
    median = statistics.median(works) if len(works) >= 2 else None
    leader = max((r for r in live if r.step is not None), key=lambda r: (r.step, r.step_time or 0.0), default=None)
    out = []
    for rec in records:
        local = here.holds(rec)
        status = RankStatus(rec, "ok", local=local)
        if median:
            slower = (rec.work_s or 0.0) / median - 1.0
            status = replace(status, slower_by=slower)
        out.append(_verdict(status, now, process_state, median, leader))
    return tuple(sorted(out, key=lambda s: (VERDICTS.index(s.verdict), s.record.rank)))


def _verdict(status: RankStatus, now: float, process_state: ProcessState, median: float | None,
             leader: RankRecord | None) -> RankStatus:
    rec = status.record
    if rec.exit_code is not None:
        return replace(status, verdict="exited", why=f"exited with code {rec.exit_code}")
    if status.local:
        state = process_state(rec)
        if state == "gone":
            return replace(status, verdict="dead", why=f"pid {rec.pid} is gone without an exit recorded "
                                                        "(killed, or crashed)")
        if state == "stopped":
            return replace(status, verdict="stopped", why=f"stopped by a signal (state T); kill -CONT {rec.pid} "
                                                           "resumes it")
    else:
        quiet = now - rec.last_heard
        if quiet > SILENT_AFTER_S:
            return replace(status, verdict="silent", why=f"no heartbeat for {quiet:.0f} s (frozen, killed or cut "
                                                          f"off; on {rec.host}, not looked up from here)")
    if leader is not None and rec.step is not None and leader.step is not None and rec.step < leader.step \
            and (leader.step_time or 0.0) - (rec.step_time or 0.0) > BEHIND_AFTER_S:
        behind = leader.step - rec.step
        return replace(status, verdict="behind", behind_by=behind,
                       why=f"at step {rec.step:,}, {behind:,} behind rank {leader.rank}")
    if median and rec.work_s is not None and rec.work_s > STRAGGLER_FACTOR * median \
            and rec.work_s - median > STRAGGLER_FLOOR_S:
        return replace(status, verdict="straggling",
                       why=f"{rec.work_s * 1e3:.0f} ms of work per step, the median {median * 1e3:.0f} ms "
                           f"(+{(rec.work_s / median - 1) * 100:.0f}%)")
    return status


def fold_ranks(ranks: Iterable[int]) -> str:
    """``0, 2-7``: ranks as ranges."""
    out: list[str] = []
    run: list[int] = []
    for r in sorted(set(ranks)):
        if run and r == run[-1] + 1:
            run.append(r)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 2 else ", ".join(map(str, run)))
        run = [r]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 2 else ", ".join(map(str, run)))
    return ", ".join(out)


def summary_line(statuses: Iterable[RankStatus]) -> str:
    """``2 ranks on 1 node · slowest rank 1, +38% step time``."""
    statuses = tuple(statuses)
    if not statuses:
        return ""
    hosts = {s.record.host for s in statuses}
    text = f"{counted(len(statuses), 'rank')} on {counted(len(hosts), 'node')}"
    timed = [s for s in statuses if s.slower_by is not None and s.verdict != "exited"]
    if timed:
        slowest = max(timed, key=lambda s: (s.slower_by or 0.0, -s.record.rank))
        text += f" · slowest rank {slowest.record.rank}, {(slowest.slower_by or 0.0) * 100:+.0f}% step time"
    problems = sum(1 for s in statuses if s.problem)
    if problems:
        text += f" · {problems} with a problem"
    return text
