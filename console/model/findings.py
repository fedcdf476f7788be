"""What is wrong with a run, as typed records: the problems list and the alerts.

Every finding is a :class:`Finding`: its kind (a row of :data:`KINDS`, which says what the
kind is: its level, an alert or not, a fact of the history's past, said already by the
history read), the values it was made from (step, pid, key) and its text, made from them here.
A kind's level is set once, in :data:`KINDS`: the problems pane, the alerts, ``--check`` and
the overview all say a finding at it (a finding made at another level is refused).
The panes, ``--once``, ``--json``, ``--check``, the alerts and the event log render these
records and decide by kind and level only: nothing searches a message's words (a test
greps the console for that).

:func:`derive_problems` is the problems list (one line a problem, most important first; many
files or arms of one kind are one line that names a few and counts the rest).
:func:`summary_problems` is the overview row's: the same findings, made by the same functions
from what a run's cheap summary reads (console.read.run_summary: the history's tail, the newest
checkpoints), so the overview, ``--check`` and the problems pane agree.
:func:`derive_alerts` is what is raised once to someone not looking at the screen: finer
grained (a zombie arm, a spike, a run of non-finite steps each), with the key that makes it
raised once.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import islice
from typing import TYPE_CHECKING, Any

from rundir.history import HistoryEvent, limits
from rundir.layout import EVENT_RESUME, EVENT_START, EVENT_STOP, LOSS_JSON, is_error_stop
from rundir.text import counted

from .format import LINE_LIMIT, TRAINER_LABELS, format_counter, format_size, idle_text, printable
from .levels import Level
from .spikes import Spike

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from rundir.checkpoint import CheckpointInfo
    from rundir.ranks import RankStatus
    from rundir.storage import Storage

    from .run_facts import RunSummary
    from .snapshot import RunSnapshot

# Problems and notices about files or arms take one line each up to this many; more make
# one line that names the first few and counts the rest (a hostile run directory can hold
# 100,000 of them, and neither a list nor an event log is read that far).
LISTED = 3


@dataclass(frozen=True)
class FindingKind:
    """What a kind of finding is, for everyone who shows or raises it."""

    name: str
    level: Level                 # how serious every finding of this kind is, everywhere it is said
    alert: bool = False          # raised as an alert: an event, the bell, --notify; --check says it at its level
    history_fact: bool = False   # a fact of the history's past: raised only as it happens; "past" once old
    said_by_read: bool = False   # the history read's own notices say it (the first summary leaves it out)
    noun: str = ""               # several of this kind, as one alert names them


E, W = Level.ERROR, Level.WARNING

KINDS: dict[str, FindingKind] = {kind.name: kind for kind in (
    FindingKind("disk", E, alert=True, noun="disk problems"),
    FindingKind("directory", E),                                # missing, not a directory, unreadable
    FindingKind("empty", W),                                    # the run directory is empty
    FindingKind("trainer", W),                                  # a pid record that does not verify
    FindingKind("lock", E),                                     # a lock file no trainer's start gets past
    FindingKind("exit", E, alert=True, noun="trainer ends"),    # gone without a clean exit, or stopped by an error
    FindingKind("stall", W, alert=True, noun="stalls"),         # no new step for too long, or suspended (state T)
    FindingKind("checkpoint", E, alert=True, noun="failed checkpoints"),
    FindingKind("divergence", E, alert=True, noun="divergence stops"),
    FindingKind("pending", W),                                  # an unfinished pivot or rollback
    FindingKind("config", W),                                   # run.toml cannot be used
    FindingKind("invalid", E),                                  # invalid checkpoint files
    FindingKind("zombie", E, alert=True, noun="zombie arms"),
    FindingKind("history", W),                                  # .loss.json cannot be read at all
    FindingKind("lines", W, said_by_read=True),                 # unreadable lines, a torn tail
    FindingKind("nonfinite", E, alert=True, history_fact=True, said_by_read=True, noun="runs of non-finite loss"),
    FindingKind("rewind", W),                                   # steps went back with no resume event
    FindingKind("series", W),                                   # more numeric keys than are kept as series
    FindingKind("sidecar", W),                                  # .state.json or .samples.json unreadable
    FindingKind("spike", W, alert=True, history_fact=True, noun="loss spikes"),
    FindingKind("resume", E, alert=True, history_fact=True, noun="diverged resumes"),
    # One rank of a job of several processes (rundir/ranks.py's verdicts): "rank_" + the verdict.
    FindingKind("rank_dead", E, alert=True, noun="dead ranks"),
    FindingKind("rank_stopped", E, alert=True, noun="stopped ranks"),
    FindingKind("rank_silent", E, alert=True, noun="silent ranks"),
    FindingKind("rank_behind", W, alert=True, noun="ranks behind"),
    FindingKind("rank_straggling", W, alert=True, noun="straggling ranks"),
)}

@dataclass(frozen=True)
class Finding:
    """One problem or alert: ``kind`` (a key of :data:`KINDS`), ``level``, one printable line,
    and ``key``, the identity that makes an alert raised once. ``ended_pid``: the trainer whose
    end it reports, so that one end is one alert however the console learns of it. ``count``:
    the findings it stands for (see :func:`console.actions.alerts.gathered_by_kind`)."""

    kind: str
    level: Level
    text: str
    key: str = ""
    step: int | None = None
    ended_pid: int | None = None
    count: int = 1

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown finding kind {self.kind!r}")
        object.__setattr__(self, "level", Level(self.level))
        if self.level is not KINDS[self.kind].level:
            raise ValueError(f"a {self.kind!r} finding is at level {KINDS[self.kind].level}, not {self.level}")
        object.__setattr__(self, "text", printable(self.text, LINE_LIMIT))

    @property
    def spec(self) -> FindingKind:
        return KINDS[self.kind]

    def to_json(self, run_dir: str, time: float) -> dict[str, Any]:
        """What ``--notify`` gets on stdin."""
        return {"kind": self.kind, "level": self.level.value, "text": self.text, "key": self.key, "step": self.step,
                "ended_pid": self.ended_pid, "count": self.count, "run_dir": run_dir, "time": time}


def many(n: int, noun: str) -> str:
    """``1 zombie arm``, ``100,000 zombie arms``."""
    return f"{n:,} {noun}" + ("" if n == 1 else "s")


def names_and_more(names: list[str], total: int) -> str:
    """``a, b, c and 99,997 more`` (the names made printable)."""
    shown = ", ".join(printable(n) for n in names)
    return shown + (f" and {total - len(names):,} more" if total > len(names) else "")


# -- texts shared by a problem and its alert ---------------------------------------------

def disk_text(s: Storage) -> str:
    return (f"disk nearly FULL: {format_size(s.free)} free on the run directory's filesystem, room for "
            f"{counted(s.checkpoints_that_fit, 'checkpoint')} of {format_size(s.checkpoint_size)}")


def failed_checkpoint_text(step: int | None, data: dict[str, Any]) -> str:
    return (f"checkpoint FAILED at step {format_counter(step)}: "
            f"{printable(data.get('error', 'write error'), LINE_LIMIT)}")


def divergence_text(step: int | None, data: dict[str, Any]) -> str:
    return (f"trainer stopped: the run diverged at step {format_counter(step)} "
            f"({data.get('in_a_row', '?')} non-finite steps in a row)")


# -- the problems list ----------------------------------------------------------------------

def derive_problems(snap: RunSnapshot) -> tuple[Finding, ...]:
    """Everything wrong with the run, most important first."""
    out = _directory_problems(snap)
    if snap.dir_state == "unreadable":
        return tuple(out)               # every file in it is unreadable for that one reason
    out += _trainer_problems(snap)
    ok = snap.dir_state == "ok"
    out += _run_file_findings(snap.lock_problem, rank_findings(snap), snap.pending_pivot, snap.pending_rollback,
                              snap.config_error if ok else None)
    out += _file_problems(snap)
    out += _history_problems(snap)
    out += _sidecar_findings(snap.arms.error if ok else None, snap.samples_error if ok else None)
    return tuple(out)


def summary_problems(s: RunSummary) -> tuple[Finding, ...]:
    """The overview row's problems: :func:`derive_problems`'s findings that a run's summary can
    show (it reads the history's tail and the newest checkpoints: counts are "among the newest"),
    made by the same functions, in the same order."""
    if s.directory_error:
        return (Finding("directory", Level.ERROR, s.directory_error),)
    stall = s.stall
    stalled = _stall_finding(s.pid, s.last_step, stall.idle if stall is not None and stall.stalled else None,
                             stall.threshold if stall is not None else None, None)
    out = _trainer_findings(s.trainer_state, TRAINER_LABELS.get(s.trainer_state, s.trainer_state), s.trainer_reason,
                            stalled, _exit_finding(s.trainer_state, s.pid, s.events, s.last_step),
                            s.failed_checkpoint, s.safety_stop)
    out += _run_file_findings(s.lock_problem, _rank_findings(s.ranks, s.launch), s.pending_pivot, s.pending_rollback,
                              s.config_error)
    out += _file_findings(s.invalid, s.zombies)
    if s.history_error:
        out.append(Finding("history", Level.WARNING, s.history_error))
    if s.bad_lines:
        out.append(Finding("lines", Level.WARNING,
                           f"{LOSS_JSON}: {counted(s.bad_lines, 'unreadable line')} among the newest"))
    if s.torn_tail:
        out.append(Finding("lines", Level.WARNING, torn_tail_text(s.torn_tail)))
    if s.nonfinite:
        out.append(Finding("nonfinite", Level.ERROR,
                           f"{LOSS_JSON}: {counted(s.nonfinite, 'non-finite loss value')} among the newest steps"))
    out += _sidecar_findings(s.state_error, None)
    return tuple(out)


def _run_file_findings(lock: str | None, ranks: list[Finding], pivot: str | None, rollback: str | None,
                       config: str | None) -> list[Finding]:
    """A lock file no start gets past, the ranks', unfinished journals, an unusable run.toml."""
    out = [Finding("lock", Level.ERROR, lock)] if lock else []
    out += ranks
    out += [Finding("pending", Level.WARNING, text) for text in (pivot, rollback) if text]
    if config:
        out.append(Finding("config", Level.WARNING, config))
    return out


def _sidecar_findings(*errors: str | None) -> list[Finding]:
    return [Finding("sidecar", Level.WARNING, error) for error in errors if error]


def torn_tail_text(n: int) -> str:
    return f"{LOSS_JSON}: torn last line ({counted(n, 'byte')}) skipped"


def _directory_problems(snap: RunSnapshot) -> list[Finding]:
    out = []
    if snap.storage is not None and snap.storage.too_full:
        out.append(Finding("disk", Level.ERROR, disk_text(snap.storage)))
    state = snap.dir_state
    if state == "missing":
        out.append(Finding("directory", Level.ERROR, f"run directory {snap.run_dir} does not exist"))
    elif state == "not a directory":
        out.append(Finding("directory", Level.ERROR, f"{snap.run_dir} is not a directory"))
    elif state == "empty":
        out.append(Finding("empty", Level.WARNING, "the run directory is empty: nothing has been written yet"))
    elif state == "unreadable":
        out.append(Finding("directory", Level.ERROR, f"cannot read the run directory ({snap.dir_reason})"))
        if snap.trainer.pid is not None:        # the trainer that ran it, out of sight
            out.append(Finding("trainer", Level.WARNING, f"trainer {snap.trainer.label}: {snap.trainer.reason}"))
    return out


def _trainer_problems(snap: RunSnapshot) -> list[Finding]:
    t = snap.trainer
    return _trainer_findings(t.state, t.label, t.reason, stall_finding(snap), _abnormal_exit(snap),
                             snap.failed_checkpoint, snap.safety_stop)


def _trainer_findings(state: str, label: str, reason: str, stalled: Finding | None, exited: Finding | None,
                      failed: HistoryEvent | None, stop: HistoryEvent | None) -> list[Finding]:
    """The trainer's problems: its record, a stall, an abnormal end, a failed checkpoint, a
    divergence stop (the dashboard's and the overview's)."""
    out = []
    if state in ("stale", "unverified", "unreadable"):
        out.append(Finding("trainer", Level.WARNING, f"trainer {label}: {reason}"))
    if stalled is not None:
        out.append(stalled)
    if exited is not None and state != "stale":          # a stale record is said above
        out.append(exited)
    if failed is not None:
        out.append(Finding("checkpoint", Level.ERROR, failed_checkpoint_text(failed.step, failed.data)))
    if stop is not None:
        out.append(Finding("divergence", Level.ERROR, divergence_text(stop.step, stop.data)))
    return out


def rank_findings(snap: RunSnapshot) -> list[Finding]:
    """A finding per rank with a problem, naming the rank and its host, errors first."""
    return _rank_findings(snap.ranks.statuses, snap.ranks.launch)


def _rank_findings(statuses: Sequence[RankStatus], launch: str | None) -> list[Finding]:
    out = [Finding(f"rank_{s.verdict}", KINDS[f"rank_{s.verdict}"].level,
                   f"rank {s.record.rank} on {printable(s.record.host, 60)}: {s.verdict}: {s.why}",
                   f"rank:{launch}:{s.record.rank}:{s.verdict}", s.record.step)
           for s in statuses if f"rank_{s.verdict}" in KINDS]
    return sorted(out, key=lambda f: f.level is not Level.ERROR)


def _file_problems(snap: RunSnapshot) -> list[Finding]:
    return _file_findings(snap.invalid_checkpoints, snap.zombies)


def _file_findings(invalid: Sequence[CheckpointInfo], zombies: Mapping[str, str]) -> list[Finding]:
    """Invalid checkpoint files (newest first) and zombie arms, a few named one a line."""
    out = []
    if len(invalid) <= LISTED:
        out.extend(Finding("invalid", Level.ERROR, f"{printable(c.path.name)}: invalid: {c.reason}") for c in invalid)
    else:
        out.append(Finding("invalid", Level.ERROR, f"{many(len(invalid), 'invalid checkpoint file')} (newest first): "
                           + names_and_more([c.path.name for c in invalid[:LISTED]], len(invalid))
                           + f"; {printable(invalid[0].path.name)}: {invalid[0].reason}"))
    if len(zombies) <= LISTED:
        out.extend(Finding("zombie", Level.ERROR, f"zombie arm {printable(name)}: {reason}")
                   for name, reason in zombies.items())
    else:
        first = next(iter(zombies.items()))
        out.append(Finding("zombie", Level.ERROR,
                           f"{many(len(zombies), 'zombie arm')}: "
                           f"{names_and_more(list(islice(zombies, LISTED)), len(zombies))}"
                           f"; {printable(first[0])}: {first[1]}"))
    return out


def _history_problems(snap: RunSnapshot) -> list[Finding]:
    out = []
    h = snap.history
    if h.error:
        out.append(Finding("history", Level.WARNING, h.error))
    if h.bad_lines:
        out.append(Finding("lines", Level.WARNING, f"{LOSS_JSON}: {counted(h.bad_lines, 'unreadable line')} skipped"
                           + (f" (first: {h.problems[0]})" if h.problems else "")))
    if h.torn_tail:
        out.append(Finding("lines", Level.WARNING, torn_tail_text(h.torn_tail)))
    if h.nonfinite:
        out.append(Finding("nonfinite", Level.ERROR, f"{LOSS_JSON}: {counted(h.nonfinite, 'non-finite loss value')}"
                           + (f", the last at step {h.last_nonfinite_step:,}" if h.last_nonfinite_step is not None
                              else "")))
    for check in h.resume_checks:          # as its alert says it: --check and the pane agree
        if check.verdict == "diverged":
            out.append(Finding("resume", Level.ERROR, check.text(), f"resume:{check.line}", check.from_step))
    if h.silent_rewind_count:
        out.append(Finding("rewind", Level.WARNING,
                           f"{LOSS_JSON}: the steps went back to step {h.silent_rewinds[-1]:,} with no resume event "
                           "(a restart by another engine?)" if h.silent_rewind_count == 1 else
                           f"{LOSS_JSON}: the steps went back {h.silent_rewind_count:,} times with no resume event, "
                           f"the last to step {h.silent_rewinds[-1]:,} (restarts by another engine?)"))
    if h.series.dropped:
        out.append(Finding("series", Level.WARNING,
                           f"{LOSS_JSON}: {counted(h.series.dropped, 'more numeric key')} not kept as series (at most "
                           f"{limits.MAX_SERIES} are): "
                           f"{names_and_more(list(h.series.dropped_names), h.series.dropped)}"))
    return out


# -- the alerts ---------------------------------------------------------------------------

def derive_alerts(snap: RunSnapshot) -> tuple[Finding, ...]:
    """Every alert the snapshot shows, errors first, one per thing that is wrong (the
    tracker gathers those that are new together by kind)."""

    h = snap.history
    out: list[Finding] = []
    if snap.storage is not None and snap.storage.too_full:
        out.append(Finding("disk", Level.ERROR, disk_text(snap.storage), "disk"))
    stop = snap.safety_stop
    if stop is not None:
        out.append(Finding("divergence", Level.ERROR, divergence_text(stop.step, stop.data), f"divergence:{stop.line}",
                           stop.step, ended_pid=_started_pid(snap.history.events, stop.line)))
    failed = snap.failed_checkpoint
    if failed is not None:
        out.append(Finding("checkpoint", Level.ERROR, failed_checkpoint_text(failed.step, failed.data),
                           f"checkpoint:{failed.line}", failed.step))
    exited = _abnormal_exit(snap)
    if exited is not None:
        out.append(exited)
    out += rank_findings(snap)
    for first, last in _nonfinite_runs(h.nonfinite_steps):
        where = f"step {first:,}" if first == last else f"steps {first:,}..{last:,}"
        out.append(Finding("nonfinite", Level.ERROR, f"non-finite loss at {where}", f"nonfinite:{first}", first))
    for check in h.resume_checks:
        if check.verdict == "diverged":
            out.append(Finding("resume", Level.ERROR, check.text(), f"resume:{check.line}", check.from_step))
    stalled = stall_finding(snap)
    if stalled is not None:
        out.append(stalled)
    for spike in h.spikes:
        out.append(Finding("spike", Level.WARNING, spike_text(spike), f"spike:{spike.start}", spike.start))
    for name, reason in snap.zombies.items():
        out.append(Finding("zombie", Level.ERROR, f"zombie arm {printable(name)}: {printable(reason, LINE_LIMIT)}",
                           f"zombie:{name}"))
    return tuple(out)


def _nonfinite_runs(steps: tuple[int, ...]) -> list[tuple[int, int]]:
    """Consecutive non-finite steps as (first, last) runs."""
    runs: list[tuple[int, int]] = []
    for s in steps:
        if runs and s == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], s)
        else:
            runs.append((s, s))
    return runs


def stall_finding(snap: RunSnapshot) -> Finding | None:
    """The trainer makes no progress though alive and verified: stalled (no new step past the
    threshold), or suspended (stopped by a signal or a debugger: state T or t) even before."""
    t = snap.trainer
    return _stall_finding(t.pid, snap.history.last_step, t.stalled_for if t.stalled else None, t.stall_threshold,
                          t.suspended if t.state == "running" else None)


def _stall_finding(pid: int | None, step: int | None, idle: float | None, threshold: float | None,
                   suspended: str | None) -> Finding | None:
    """``idle``: seconds without progress where past ``threshold`` (else None)."""
    if idle is not None:
        return Finding("stall", Level.WARNING, f"trainer STALLED: {idle_text(idle, threshold, suspended)}",
                       f"stall:{pid}:{step}", step)
    if suspended:
        return Finding("stall", Level.WARNING, f"trainer SUSPENDED: {suspended}", f"stall:{pid}:{step}", step)
    return None


def error_stop_text(ev: HistoryEvent) -> str:
    """``the trainer stopped with an error at step 120: ValueError (see its log)``."""
    reason = printable(str(ev.data.get("reason", "error")), LINE_LIMIT)
    what = reason.partition(":")[2].strip() or reason
    return f"the trainer stopped with an error at step {format_counter(ev.step)}: {what} (see its log)"


def _abnormal_exit(snap: RunSnapshot) -> Finding | None:
    """The trainer is gone without a clean exit: a stale record (killed, crashed), a
    process that wrote no ``stop`` event before it ended, or one whose ``stop`` says an
    error stopped it."""
    return _exit_finding(snap.trainer.state, snap.trainer.pid, snap.history.events, snap.history.last_step)


def _exit_finding(state: str, pid: int | None, events: Sequence[HistoryEvent], last_step: int | None) -> Finding | None:
    if state == "stale":
        return Finding("exit", Level.ERROR, f"the trainer (pid {pid}) is gone without a clean exit (killed or "
                                            "crashed; see trainer.log)", f"exit:stale:{pid}", ended_pid=pid)
    if state != "stopped":
        return None
    for ev in reversed(events):
        if ev.event == EVENT_STOP:
            if not is_error_stop(ev.data.get("reason")):
                return None
            return Finding("exit", Level.ERROR, error_stop_text(ev), f"exit:line:{ev.line}", ev.step,
                           ended_pid=_started_pid(events, ev.line))
        if ev.event in (EVENT_START, EVENT_RESUME):
            started = ev.data.get("pid")
            if not isinstance(started, int):
                return None                     # not this trainer's history: it writes its pid
            step = last_step
            return Finding("exit", Level.ERROR, f"the trainer (pid {printable(started)}) ended without a stop event "
                                                f"after step {format_counter(step)} (it failed or was killed; see "
                                                "trainer.log)", f"exit:line:{ev.line}", step, ended_pid=started)
    return None


def _started_pid(events: Sequence[HistoryEvent], line: int) -> int | None:
    """The pid in the last start or resume event before history line ``line``."""
    for ev in reversed(events):
        if ev.line < line and ev.event in (EVENT_START, EVENT_RESUME):
            pid = ev.data.get("pid")
            return pid if isinstance(pid, int) else None
    return None


def child_exit_alert(pid: int, code: int) -> Finding | None:
    """The alert for a trainer this console started that exited with ``code`` (none for 0)."""
    if code == 0:
        return None
    return Finding("exit", Level.ERROR, f"the trainer (pid {pid}) exited with code {code}", f"exit:child:{pid}",
                   ended_pid=pid)


def spike_text(spike: Spike) -> str:
    """``loss spike at steps 1,201..1,203: peak 6.0 at 1,202 (baseline 2.5)``."""
    where = f"step {spike.start:,}" if spike.start == spike.end else f"steps {spike.start:,}..{spike.end:,}"
    return f"loss spike at {where}: peak {spike.peak_loss:.4g} at {spike.peak_step:,} (baseline {spike.baseline:.4g})"


def eta_text(seconds: float | None) -> str:
    """``ETA 2h 05m`` to run.max_steps, or ``ETA -``."""
    if seconds is None:
        return "ETA -"
    minutes = int(seconds // 60)
    if minutes >= 24 * 60:
        return f"ETA {minutes // (24 * 60)}d {minutes // 60 % 24:02d}h"
    if minutes >= 60:
        return f"ETA {minutes // 60}h {minutes % 60:02d}m"
    return f"ETA {minutes}m {int(seconds % 60):02d}s"
