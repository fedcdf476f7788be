"""Reading a run directory into :class:`~console.model.snapshot.RunSnapshot`s, re-reading only what changed.

:class:`RunReader` reads through :mod:`rundir` only (it never parses a file format
itself). It is incremental: :meth:`RunReader.read` takes the *kinds* of files that
changed and re-reads only those (the history reader picks up only the appended bytes),
reusing the other parts of the previous snapshot as they are, so a consumer can tell
what changed by identity. Each read also returns the :class:`~console.model.snapshot.Notice`
list of what it saw change (:mod:`console.read.changes`).
"""

from __future__ import annotations

import math
import os
import stat
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterable

from rundir import (
    CheckpointInfo,
    CheckpointStamp,
    LossHistory,
    RunConfig,
    Sample,
    checkpoint_stamps,
    checkpoints_since,
    find_zombies,
    read_samples,
    read_state,
)
from rundir.abandoned import abandoned_pivot_archives
from rundir.checkpoint import said_checkpoints
from rundir.config import RunSection
from rundir.external import external_checkpoints, reported_files
from rundir.identity import open_directory
from rundir.layout import (
    ALL_KINDS,
    CHECKPOINTS,
    CONFIG,
    DIRECTORY,
    EVENT_CHECKPOINT,
    EVENT_EXTERNAL_CHECKPOINT,
    EVENT_PRUNE,
    EVENT_RESUME,
    HISTORY,
    LOG,
    LOSS_JSON,
    RANKS,
    RUN_TOML,
    SAMPLES,
    STATE,
    STATE_JSON,
    TRAINER,
    TRAINER_LOG,
    is_known,
)
from rundir.pivot_files import list_pivots, policy_text, read_journal, unfinished_text
from rundir.ranks import judge_ranks, read_ranks
from rundir.retention import RetentionPolicy, plan_retention, protected_steps
from rundir.rollback_files import pending_rollback
from rundir.run_lock import blocking_lock_file
from rundir.sources import SourceCache
from rundir.storage import Storage, free_bytes, growth_per_step
from rundir.storage import measure as measure_storage

from ..model.format import LINE_LIMIT, printable
from ..model.levels import Level
from ..model.markers import derive_markers
from ..model.run_facts import RATE_STEPS, stall_threshold
from ..model.snapshot import (
    TRAINER_LABELS,
    ArmRow,
    ArmsView,
    HistoryView,
    Notice,
    PivotEntry,
    RanksView,
    RetentionView,
    RunSnapshot,
    TrainerView,
)
from .changes import describe_changes
from .detectors import HistoryFindings
from .history_part import HistoryPart
from .landing import AwaitedCheckpoints
from .log_tail import LogTail
from .prefetch import HistoryPrefetch
from .probe import TrainerProbe
from .run_summary import read_config, trainer_stall

# The run directory's size is walked again at most this often (and when checkpoints change).
STORAGE_EVERY_S = 10.0

# A verified trainer whose history has not grown for this long is shown as stalled: the
# larger of STALL_MIN_S and STALL_STEPS median step times, unless --stall-after sets it
# (console.model.run_facts.stall_threshold, which the overview uses too).

# A sample is shown whole up to this many characters (its prompt up to PROMPT_CHARS); a
# longer one, a runaway or hostile completion, is cut, saying how much was left out.
SAMPLE_CHARS = 2000
PROMPT_CHARS = 500


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f" … [{len(text) - limit:,} more characters not shown]"


def _shown_sample(sample: Sample) -> Sample:
    """``sample`` as the views show it: prompt and completion cut to their caps."""
    if len(sample.completion) <= SAMPLE_CHARS and len(sample.prompt) <= PROMPT_CHARS:
        return sample
    return replace(sample, prompt=_cut(sample.prompt, PROMPT_CHARS), completion=_cut(sample.completion, SAMPLE_CHARS))


def _finite(x: float) -> float | None:
    return x if isinstance(x, float) and math.isfinite(x) else None



def read_pivots(run_dir: Path) -> tuple[tuple[PivotEntry, ...], str | None]:
    """Every pivot's archive, and a line about an interrupted pivot (its journal), if any."""
    entries = []
    for data in list_pivots(run_dir):
        step = data.get("final_step")
        entries.append(PivotEntry(step if isinstance(step, int) else None, str(data.get("path", "")),
                                  str(data.get("stage", data.get("error", "?"))),
                                  printable(policy_text(data.get("new_policy")), LINE_LIMIT)))
    journal, error = read_journal(run_dir)
    if error:
        return tuple(entries), error
    pending = unfinished_text(journal) if journal else None
    return tuple(entries), pending


@dataclass
class _Read:
    """One read in progress: what the last snapshot was, which file kinds are read again
    (a part may widen them: a directory that changed is read whole), the parts derived so
    far and the notices said on the way."""

    prev: RunSnapshot | None
    kinds: frozenset[str]
    now: float
    values: dict = field(default_factory=dict)
    notices: list[Notice] = field(default_factory=list)


@dataclass(frozen=True)
class Part:
    """A part of the snapshot: its fields, the file kinds whose change makes it read again,
    and the method that derives them (given the parts before it)."""

    name: str
    fields: tuple[str, ...]
    kinds: frozenset[str]
    derive: Callable[["RunReader", _Read], dict]
    due: Callable[["RunReader", float], bool] = lambda reader, now: False     # re-derived anyway when due


class RunReader:
    """Reads a run directory into :class:`RunSnapshot`s, re-reading only what changed.

    Not thread-safe: one thread at a time calls :meth:`read` (the dashboard uses an
    exclusive worker). The snapshots it returns are immutable and safe to share.
    """

    def __init__(self, run_dir: str | os.PathLike[str], now: Callable[[], float] = time.time,
                 probe: Callable[[Path], TrainerView] | None = None, stall_after: float | None = None,
                 prefetch: HistoryPrefetch | None = None, free_space: Callable[[Path], int | None] = free_bytes,
                 spike_window: int | None = None, spike_k: float | None = None):
        self.run_dir = Path(run_dir)
        self.findings = HistoryFindings(spike_window, spike_k)   # spikes, resume checks, ETA
        self.free_space = free_space            # the filesystem's free bytes (tests fix it: screens hold no machine)
        self.stall_after = stall_after
        self.now = now
        self.probe = probe or TrainerProbe()
        self._history = HistoryPart(self.run_dir / LOSS_JSON, prefetch, self.findings)
        self._snapshot: RunSnapshot | None = None
        self.log = LogTail(self.run_dir / TRAINER_LOG)
        # The checkpoints the console asked for, settled at each read: the session's signal job
        # adds to it from its thread (AwaitedCheckpoints is safe for that).
        self.awaited = AwaitedCheckpoints()
        self._ckpt_cache: dict[str, tuple[CheckpointStamp, CheckpointInfo]] = {}
        self._said: dict[str, bool] = {}      # the trainer's word of its newest checkpoints (its history)
        self._storage_at = 0.0
        self._ckpt_written = 0.0                # mtime of the newest checkpoint file
        self._sources = SourceCache()           # arm source checks, between reads of .state.json
        self._dir_id: tuple[int, int, bool] | None = None   # the run directory last listed (_dir_identity)
        self._lost_pid: int | None = None       # the trainer that ran when the directory went away
        self._seen_id: tuple[int, int] | None = None   # (device, inode) of the directory when last seen whole

    @property
    def history(self) -> LossHistory:
        """The incremental reader of ``.loss.json`` (the prefetch's, once handed over)."""
        return self._history.history

    @property
    def snapshot(self) -> RunSnapshot | None:
        return self._snapshot

    def verify_history_mirror(self, on_stale: Callable[[], None]) -> bool:
        """After the first frame: check the history's mirror whole in the background
        (:meth:`HistoryPart.verify_mirror`); ``on_stale`` asks for a read of the history."""
        return self._history.verify_mirror(on_stale)

    def _requests_due(self, now: float) -> bool:
        """While a request waits, every read (the tick's too) looks at the checkpoints, so the
        dashboard sees a landing (:mod:`.landing`) also where no file event comes (a shared
        filesystem)."""
        return bool(self.awaited)

    def late_kinds(self) -> frozenset[str]:
        """The kinds of file whose last read stopped before NUL bytes not written yet: to be
        read again, though no change may be seen when their bytes land (a network filesystem)."""
        return frozenset(kind for kind, late in ((HISTORY, self.history.awaiting_late_bytes),
                                                 (LOG, self.log.awaiting_late_bytes)) if late)

    # -- the read --------------------------------------------------------------
    def read(self, kinds: Iterable[str] = ALL_KINDS) -> tuple[RunSnapshot, list[Notice]]:
        """Re-read ``kinds`` (everything on the first call); never raises for bad input.
        Each part of the snapshot (:data:`PARTS`) is derived anew when a file kind it reads
        changed, and carried over from the last snapshot otherwise."""
        prev = self._snapshot
        read = _Read(prev, ALL_KINDS if prev is None else frozenset(kinds), self.now())
        # One stat tells whether the directory is still the one last listed: a run directory
        # renamed away or replaced is seen at the next read, whatever kinds it was asked for.
        if prev is not None and self._dir_identity() != self._dir_id:
            read.kinds = ALL_KINDS
        versions = dict(prev.versions) if prev is not None else {}
        for part in PARTS:
            if prev is None or read.kinds & part.kinds or part.due(self, read.now):
                fields = part.derive(self, read)
                if prev is None or any(fields[name] is not getattr(prev, name) for name in fields):
                    versions[part.name] = versions.get(part.name, 0) + 1
            else:
                fields = {name: getattr(prev, name) for name in part.fields}
            read.values.update(fields)
        snap = RunSnapshot(run_dir=self.run_dir, name=self.run_dir.resolve().name or str(self.run_dir), taken=read.now,
                           versions=versions, **read.values)
        answered, ended = self.awaited.settle(prev, snap, read.now,
                                              lambda name: self._ckpt_cache.get(name, (None,))[0])
        changes = describe_changes(prev, snap, read.now, answered, ended)
        notices = changes + read.notices if prev is None else read.notices + changes    # the summary first
        self._snapshot = snap
        return snap, notices

    # -- the parts, in the order they are derived (each may use those before it) ----
    def _part_directory(self, read: _Read) -> dict:
        dir_state, reason, other = self._dir_state()
        prev = read.prev
        if prev is not None and (prev.dir_state != dir_state or read.kinds == ALL_KINDS):
            read.kinds = ALL_KINDS
            if prev.dir_state != dir_state:
                said = f"{dir_state} ({reason})" if reason else dir_state
                read.notices.append(Notice(read.now, f"run directory is now {said}",
                                           Level.WARNING if dir_state != "ok" else Level.INFO))
        return {"dir_state": dir_state, "dir_reason": reason, "other_files": other}

    def _part_config(self, read: _Read) -> dict:
        config, error = self._config(read.values["dir_state"])
        return {"config": config, "config_error": error}

    def _part_history(self, read: _Read) -> dict:
        history = self._history.read(read.now, read.notices, first=read.prev is None, config=read.values["config"],
                                     prev=read.prev.history if read.prev else None)
        if read.prev is not None and history.events is not read.prev.history.events:
            # The trainer's word of a checkpoint written or pruned: the checkpoints are looked at
            # again, though a network mount's cached listing may show no change yet.
            new = history.events[len(read.prev.history.events):]
            if any(ev.event in (EVENT_CHECKPOINT, EVENT_PRUNE, EVENT_EXTERNAL_CHECKPOINT) for ev in new):
                read.kinds = read.kinds | {CHECKPOINTS}
        return {"history": history}

    def _part_trainer(self, read: _Read) -> dict:
        # The trainer before the history and the checkpoints: one that exits writes its last
        # lines (the stop event) and its final checkpoint, then removes its record, so a read
        # that sees it gone reads those too: the exit is said with its final checkpoint, and
        # never as one "without a stop event" from lines read before the trainer wrote them.
        trainer = self.probe(self.run_dir)
        if read.prev is not None and read.prev.trainer.state == "running" and trainer.state != "running":
            read.kinds = read.kinds | {CHECKPOINTS, HISTORY}
        return {"trainer": trainer}

    def _part_checkpoints(self, read: _Read) -> dict:
        self._said = said_checkpoints(read.values["history"].events)
        return {"checkpoints": self._checkpoints(read.prev, reported_files(read.values["external_checkpoints"]))}

    def _part_external(self, read: _Read) -> dict:
        """The trainer's own checkpoints, as its history reports them (rundir.external)."""
        prev, events = read.prev, read.values["history"].events
        if prev is not None and events is prev.history.events:
            return {"external_checkpoints": prev.external_checkpoints}
        found = external_checkpoints(events)
        return {"external_checkpoints": prev.external_checkpoints if prev is not None and
                found == prev.external_checkpoints else found}

    def _part_trainer_state(self, read: _Read) -> dict:
        """The verified trainer as the run's files show it: out of sight when its directory
        went away, stalled when its history stopped growing."""
        trainer = self._out_of_sight(read.values["trainer"], read.prev, read.values["dir_state"])
        if read.kinds & {TRAINER, HISTORY, CHECKPOINTS}:
            trainer = self._stall(trainer, read.now)
        return {"trainer": trainer}

    def _part_ranks(self, read: _Read) -> dict:
        """Every rank's record of the job, and each one's verdict (rundir.ranks)."""
        got = read_ranks(self.run_dir)
        return {"ranks": RanksView(judge_ranks(got.records, read.now), got.launch, got.earlier, got.errors)}

    def _part_lock(self, read: _Read) -> dict:
        """A lock file that would refuse every trainer's start (the trainer's own words)."""
        ok = read.values["dir_state"] not in ("missing", "not a directory", "unreadable")
        return {"lock_problem": blocking_lock_file(self.run_dir) if ok else None}

    def _part_arms(self, read: _Read) -> dict:
        return {"arms": self._arms(read.values["config"])}

    def _part_samples(self, read: _Read) -> dict:
        samples = read_samples(self.run_dir, newest_only=True)
        newest = tuple(_shown_sample(s) for s in samples.value or [])
        return {"samples": newest, "samples_error": None if samples.missing else samples.error}   # absent is normal

    def _part_log(self, read: _Read) -> dict:
        tail = self.log.read()
        return {"log_tail": tail, "log_seen": self.log.seen}

    def _part_guided(self, read: _Read) -> dict:
        pivots, pending_pivot = read_pivots(self.run_dir)
        # A pivot a rollback went back past is abandoned: the run no longer stands on it.
        gone = abandoned_pivot_archives(read.values["history"].events)
        pivots = tuple(p for p in pivots if p.archive not in gone)
        return {"pivots": pivots, "pending_pivot": pending_pivot, "pending_rollback": pending_rollback(self.run_dir)}

    def _part_retention(self, read: _Read) -> dict:
        v = read.values
        return {"retention": self._retention(v["config"], v["checkpoints"], v["history"])}

    def _part_storage(self, read: _Read) -> dict:
        v = read.values
        return {"storage": self._storage(v["config"], v["checkpoints"], v["history"], v["dir_state"],
                                         v["trainer"].state == "running", read.now)}

    def _storage_due(self, now: float) -> bool:
        return now - self._storage_at >= STORAGE_EVERY_S

    def _part_markers(self, read: _Read) -> dict:
        v, h, prev = read.values, read.values["history"], read.prev
        if prev is not None and v["checkpoints"] is prev.checkpoints and h is prev.history:
            return {"markers": prev.markers}          # thousands of checkpoints: not again at every read
        return {"markers": derive_markers(v["checkpoints"], h.events, h.silent_rewinds, h.spikes, h.nonfinite_steps,
                                          h.grad_spikes, v["external_checkpoints"])}

    # -- parts -----------------------------------------------------------------
    def stall_threshold(self) -> float:
        """``--stall-after``, else the larger of 60 s and ten median step times."""
        if self.stall_after is not None:
            return self.stall_after
        return stall_threshold(self.history.time[-2 * RATE_STEPS:])

    def _stall(self, trainer: TrainerView, now: float) -> TrainerView:
        """A verified trainer whose history, checkpoints and checkpoint temporaries stopped
        changing (console.read.run_summary.trainer_stall, which the overview asks too)."""
        if trainer.state != "running":
            return replace(trainer, stalled_for=None, stall_threshold=None) if trainer.stalled_for else trainer
        stall = trainer_stall(self.run_dir, now, self.stall_threshold(), trainer.started, self._ckpt_written)
        label = "suspended" if trainer.suspended else "stalled" if stall.stalled \
            else TRAINER_LABELS.get(trainer.state, trainer.state)
        return replace(trainer, label=label, stalled_for=stall.idle if stall.stalled else None,
                       stall_threshold=stall.threshold)

    def _out_of_sight(self, trainer: TrainerView, prev: RunSnapshot | None, dir_state: str) -> TrainerView:
        """A trainer that was running when its run directory went away (renamed, removed,
        emptied, no longer readable) has not been seen to exit: its record is out of sight,
        and it may well train on under another name. Until the directory is back it is shown
        as not verified, never as stopped."""
        if dir_state == "ok":
            self._lost_pid = None
            self._seen_id = self._dir_id[:2] if self._dir_id else None
            return trainer
        if prev is None or trainer.state not in ("stopped", "unreadable"):
            return trainer
        if prev.trainer.state == "running":
            self._lost_pid = prev.trainer.pid
        if self._lost_pid is None:
            return trainer
        # The trainer holds its run directory open: where it holds it is where the run went.
        went = open_directory(self._lost_pid, self._seen_id) if self._seen_id else None
        if went is not None:
            reason = (f"the run directory was moved to {went}: pid {self._lost_pid} trains on there "
                      f"(andrea-console {went} watches it)")
        else:
            reason = (f"the run directory is {dir_state} (renamed or removed?): pid {self._lost_pid}, the trainer "
                      "that was running, can no longer be verified")
        return TrainerView(state="unverified", label=TRAINER_LABELS["unverified"], pid=self._lost_pid, reason=reason)

    def _dir_identity(self) -> tuple[int, int, bool] | None:
        """(device, inode, is a directory) of the run directory's path; None: nothing there."""
        try:
            st = os.stat(self.run_dir)
        except (OSError, ValueError):
            return None
        return st.st_dev, st.st_ino, stat.S_ISDIR(st.st_mode)

    def _dir_state(self) -> tuple[str, str, tuple[str, ...]]:
        """The directory's state, why it is unreadable (else ""), and its unknown files."""
        self._dir_id = self._dir_identity()
        try:
            names = os.listdir(self.run_dir)
        except FileNotFoundError:
            return "missing", "", ()
        except NotADirectoryError:
            return "not a directory", "", ()
        except OSError as err:
            return "unreadable", (err.strerror or type(err).__name__).lower(), ()
        if not names:
            return "empty", "", ()
        try:
            # Listing needs read permission, reaching the files search (x): a directory with
            # the one and not the other lists names whose files cannot be opened.
            os.stat(os.path.join(self.run_dir, names[0]), follow_symlinks=False)
        except PermissionError:
            return "unreadable", "its files cannot be reached: no search (x) permission on the directory", ()
        except OSError:
            pass
        return "ok", "", tuple(sorted(n for n in names if not is_known(n)))

    def _retention(self, config: RunConfig | None, checkpoints: tuple[CheckpointInfo, ...],
                   history: HistoryView) -> RetentionView:
        """What the trainer's retention policy (run.toml's, or the defaults) keeps, and why."""
        run = config.run if config is not None else RunSection()
        policy = RetentionPolicy(run.keep_last, run.keep_every)
        resumes = [ev for ev in history.events if ev.event == EVENT_RESUME]
        resumed = resumes[-1].data.get("from_step") if resumes else None
        verdicts = plan_retention(checkpoints, policy, protected_steps(self.run_dir, history.events),
                                  resumed if isinstance(resumed, int) else None)
        return RetentionView(policy.describe(), {v.info.path.name: v.keep for v in verdicts})

    def _storage(self, config: RunConfig | None, checkpoints: tuple[CheckpointInfo, ...], history: HistoryView,
                 dir_state: str, training: bool, now: float) -> Storage | None:
        """The directory's size and room (a walk and a statvfs, at most every STORAGE_EVERY_S);
        it grows only while a trainer runs."""
        self._storage_at = now
        if dir_state != "ok":
            return None
        run = config.run if config is not None else RunSection()
        usable = [c for c in checkpoints if c.status != "invalid"]
        size = usable[-1].size if usable else None
        try:
            history_bytes = os.stat(self.run_dir / LOSS_JSON).st_size
        except OSError:
            history_bytes = 0
        per_step = growth_per_step(history_bytes, history.last_step, size, run.checkpoint_every, run.keep_last,
                                   run.keep_every)
        return measure_storage(self.run_dir, size, per_step if training else None, history.steps_per_s,
                               free=self.free_space(self.run_dir))

    def _checkpoints(self, prev: RunSnapshot | None, reported: frozenset[str]) -> tuple[CheckpointInfo, ...]:
        """Every ``step_*.bin``, as :func:`rundir.list_checkpoints` sees them, but inspecting
        only files whose ``.bin`` or ``.json`` changed since the last read, and keeping no
        sidecar contents (the console never shows them). A file the trainer reported as its own
        checkpoint (``reported``: :func:`rundir.external.reported_files`) is that, not ours."""
        stamps = checkpoint_stamps(self.run_dir, self._said)
        stamps = {name: stamp for name, stamp in stamps.items() if name not in reported} if reported else stamps
        # The newest .bin or .json written: a checkpoint landing is progress (see _stall).
        self._ckpt_written = max((max(b[0], s[0] if s else 0) for b, s in stamps.values()), default=0) / 1e9
        old = self._ckpt_cache
        if (prev is not None and len(stamps) == len(old)
                and all(old.get(name, (None,))[0] == stamp for name, stamp in stamps.items())):
            return prev.checkpoints            # nothing new, changed or gone: no inspection, no sort
        stale = {name: hit[0] for name, hit in old.items() if name in stamps}
        fresh = {info.path.name: info for info in checkpoints_since(self.run_dir, stale, stamps)}
        cache = {}
        for name, stamp in stamps.items():
            info = fresh.get(name)
            if info is None:
                info = old[name][1]
            elif info.sidecar is not None:
                info = replace(info, sidecar=None)
            cache[name] = (stamp, info)
        self._ckpt_cache = cache
        result = tuple(sorted((info for _, info in cache.values()), key=lambda i: (i.step, i.path.name)))
        if prev is not None and result == prev.checkpoints:
            return prev.checkpoints            # unchanged: same object, nothing repaints
        return result

    def _config(self, dir_state: str) -> tuple[RunConfig | None, str | None]:
        return read_config(self.run_dir) if dir_state == "ok" else (None, None)

    def _arms(self, config: RunConfig | None) -> ArmsView:
        read = read_state(self.run_dir)
        state = read.value
        configured = config.arms if config is not None else {}
        error = None if read.missing else read.error                            # absent is normal
        rows: list[ArmRow] = []
        if state is not None:
            try:
                # Each arm on its own: a source that cannot be checked is that arm's reason.
                zombies = find_zombies(state, config, self.run_dir, self._sources)
            except Exception as err:          # a library bug: never let it crash the dashboard
                zombies, error = {}, f"zombie check failed: {err}"
            total = sum(a.pulls for a in state.arms.values())
            for name, arm in state.arms.items():
                conf = configured.get(name)
                cap = state.caps.get(name, conf.cap if conf else None)
                floor = state.floors.get(name, conf.floor if conf else None)
                rows.append(ArmRow(name=name, pulls=arm.pulls, share=arm.pulls / total if total else None,
                                   prob=_finite(arm.prob), ema_reward=_finite(arm.ema_reward), cap=cap, floor=floor,
                                   source=arm.source or (conf.source if conf else ""),
                                   status="zombie" if name in zombies else "ok", reason=zombies.get(name, "")))
        for name, conf in configured.items():
            if state is None or name not in state.arms:
                rows.append(ArmRow(name=name, pulls=None, share=None, prob=None, ema_reward=None, cap=conf.cap,
                                   floor=conf.floor, source=conf.source, status="configured",
                                   reason=f"in {RUN_TOML}, not in {STATE_JSON} yet"))
        return ArmsView(rows=tuple(rows), policy_from=STATE_JSON if state else (RUN_TOML if configured else "none"),
                        phase=dict(state.phase) if state else {}, state_step=state.step if state else None,
                        error=error, none_why="" if rows else self._no_arms(config))

    def _no_arms(self, config: RunConfig | None) -> str:
        """Why a run has no arms, as it is: a trainer of the run API mixes no sources."""
        if config is not None and config.config is not None:
            return f"this run's trainer mixes no sources (a run of the run API: its {RUN_TOML} has [config], no [arms])"
        if config is not None:
            return f"{RUN_TOML} has no [arms] and there is no {STATE_JSON}"
        if os.path.lexists(self.run_dir / RUN_TOML):
            return f"{RUN_TOML} cannot be read and there is no {STATE_JSON}"
        return f"no {STATE_JSON} and no {RUN_TOML}"


# The parts of a snapshot, in the order they are derived (each may use those before it).
PARTS: tuple[Part, ...] = (
    Part("directory", ("dir_state", "dir_reason", "other_files"), frozenset({DIRECTORY, CHECKPOINTS, CONFIG}),
         RunReader._part_directory),
    Part("config", ("config", "config_error"), frozenset({CONFIG}), RunReader._part_config),
    Part("trainer", ("trainer",), frozenset({TRAINER}), RunReader._part_trainer),
    Part("history", ("history",), frozenset({HISTORY}), RunReader._part_history),
    Part("external", ("external_checkpoints",), frozenset({HISTORY}), RunReader._part_external),
    Part("checkpoints", ("checkpoints",), frozenset({CHECKPOINTS}), RunReader._part_checkpoints,
         due=RunReader._requests_due),
    Part("trainer_state", ("trainer",), frozenset({TRAINER, HISTORY, CHECKPOINTS, DIRECTORY}),
         RunReader._part_trainer_state),
    Part("ranks", ("ranks",), frozenset({TRAINER, RANKS}), RunReader._part_ranks),
    Part("lock", ("lock_problem",), frozenset({TRAINER, CONFIG, DIRECTORY}), RunReader._part_lock),
    Part("arms", ("arms",), frozenset({STATE, CONFIG}), RunReader._part_arms),
    Part("samples", ("samples", "samples_error"), frozenset({SAMPLES}), RunReader._part_samples),
    Part("log", ("log_tail", "log_seen"), frozenset({LOG}), RunReader._part_log),
    Part("guided", ("pivots", "pending_pivot", "pending_rollback"),
         frozenset({DIRECTORY, CONFIG, CHECKPOINTS, TRAINER, HISTORY}),
         RunReader._part_guided),
    Part("retention", ("retention",), frozenset({CHECKPOINTS, CONFIG, DIRECTORY}), RunReader._part_retention),
    Part("storage", ("storage",), frozenset({CHECKPOINTS, CONFIG, DIRECTORY}), RunReader._part_storage,
         due=RunReader._storage_due),
    Part("markers", ("markers",), frozenset({CHECKPOINTS, HISTORY}), RunReader._part_markers),
)
