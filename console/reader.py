"""Reading a run directory into :class:`~console.views.RunSnapshot`s, re-reading only what changed.

:class:`RunReader` reads through :mod:`rundir` only (it never parses a file format
itself). It is incremental: :meth:`RunReader.read` takes the *kinds* of files that
changed and re-reads only those (the history reader picks up only the appended bytes),
reusing the other parts of the previous snapshot as they are, so a consumer can tell
what changed by identity. Each read also returns the :class:`~console.views.Notice`
list of what it saw change (:mod:`console.changes`).
"""

from __future__ import annotations

import math
import os
import stat
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterable

import numpy as np

from rundir import (CheckpointInfo, CheckpointStamp, ConfigError, LossHistory, RunConfig, Sample, checkpoint_stamps,
                    checkpoints_since, find_zombies, load_run_config, newest_per_arm, read_samples, read_state)
from rundir.abandoned import head_rows
from rundir.config import RunSection
from rundir.retention import RetentionPolicy, plan_retention, protected_steps
from rundir.run_summary import RATE_STEPS, eta_seconds, rate_per_s, stall_threshold
from rundir.sources import SourceCache
from rundir.storage import Storage, free_bytes, growth_per_step
from rundir.storage import measure as measure_storage
from rundir.layout import (ALL_KINDS, CHECKPOINTS, CONFIG, DIRECTORY, EVENT_RESUME, EVENT_START, HISTORY, LOG, LOSS_JSON,
                           RUN_TOML, SAMPLES, STATE, STATE_JSON, TRAINER, TRAINER_LOG, is_known, is_temporary)
from rundir.pivot_files import list_pivots, policy_text, read_journal

from .changes import describe_changes, event_notice
from .findings import HistoryFindings
from .format import LINE_LIMIT, printable
from .log_tail import LogTail
from .prefetch import HistoryPrefetch
from .rollback_runner import pending_rollback
from .probe import TrainerProbe
from .views import (LISTED, TRAINER_LABELS, ArmRow, ArmsView, HistoryView, Notice, PivotEntry, RetentionView, RunSnapshot,
                    TrainerView)

# The run directory's size is walked again at most this often (and when checkpoints change).
STORAGE_EVERY_S = 10.0

# A verified trainer whose history has not grown for this long is shown as stalled: the
# larger of STALL_MIN_S and STALL_STEPS median step times, unless --stall-after sets it
# (rundir.run_summary.stall_threshold, which the overview uses too).

# A checkpoint request that no read has seen answered after this long is forgotten.
REQUEST_TIMEOUT_S = 3600.0

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


@dataclass(frozen=True, eq=False)
class CheckpointRequest:
    """A SIGUSR1 sent at ``sent_at``, when the checkpoints were ``baseline``."""

    sent_at: float
    baseline: dict[str, CheckpointStamp] = field(default_factory=dict)


def _last_finite(x: np.ndarray) -> float | None:
    """The last finite value, looking back in growing chunks (not a mask of the whole column)."""
    end, chunk = len(x), 64
    while end > 0:
        part = x[max(0, end - chunk):end]
        idx = np.flatnonzero(np.isfinite(part))
        if len(idx):
            return float(part[idx[-1]])
        end -= chunk
        chunk *= 4
    return None


def current_segment(h: LossHistory) -> tuple[slice, float]:
    """The rows of the run's current segment, and when it began: the steps since the newest
    ``start``/``resume`` event or rewind (another engine's restart), up to the newest step
    written. Rates are measured over it alone, never across the pause before a resume."""
    start_step, since = 0, -math.inf
    for ev in reversed(h.events):
        if ev.event in (EVENT_RESUME, EVENT_START):
            start_step = (ev.step if ev.step is not None else 0) + 1
            since = ev.time if ev.time is not None and math.isfinite(ev.time) else -math.inf
            break
    if h.rewinds:
        step, t = h.rewinds[-1]
        if not math.isfinite(since) or (math.isfinite(t) and t >= since):
            start_step, since = step, (t if math.isfinite(t) else -math.inf)
    steps = h.step
    lo = int(np.searchsorted(steps, start_step, side="left"))
    hi = head_rows(steps, h.head_step)
    return slice(max(lo, hi - 2 * RATE_STEPS), max(lo, hi)), since


def silent_rewinds(h: LossHistory) -> list[int]:
    """The steps the history went back to with no ``resume`` (or ``start``) event just
    before them: another engine's restart, otherwise invisible."""
    if not h.rewinds:
        return []
    announced = set()
    for ev in h.events:
        if ev.event in (EVENT_RESUME, EVENT_START):
            for step in (ev.step, ev.data.get("from_step")):
                if isinstance(step, int) and not isinstance(step, bool):
                    announced.add(step + 1)
    return [step for step, _ in h.rewinds if step not in announced]


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
    pending = (f"a polish pivot is unfinished (last completed stage: {journal.stage}); p or --pivot completes "
               "it, --pivot-rollback undoes it") if journal else None
    return tuple(entries), pending


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
        self.history = LossHistory(self.run_dir / LOSS_JSON)
        self._prefetch = prefetch               # the first history read, done by a forked child
        self._snapshot: RunSnapshot | None = None
        self._history_version = 0
        self._rewinds = 0
        self.log = LogTail(self.run_dir / TRAINER_LOG)
        self._requests: list[CheckpointRequest] = []
        self._requests_lock = threading.Lock()
        self._torn_seen = 0
        self._torn_reported = 0
        self._ckpt_cache: dict[str, tuple[CheckpointStamp, CheckpointInfo]] = {}
        self._storage_at = 0.0
        self._ckpt_written = 0.0                # mtime of the newest checkpoint file
        self._sources = SourceCache()           # arm source checks, between reads of .state.json
        self._dir_id: tuple[int, int, bool] | None = None   # the run directory last listed (_dir_identity)
        self._lost_pid: int | None = None       # the trainer that ran when the directory went away

    @property
    def snapshot(self) -> RunSnapshot | None:
        return self._snapshot

    def expect_checkpoint(self, request: CheckpointRequest) -> None:
        """A checkpoint was requested (SIGUSR1 sent): the read that sees it land says so, once,
        in its notice. Safe to call from any thread."""
        with self._requests_lock:
            self._requests.append(request)

    def forget_checkpoint(self, request: CheckpointRequest) -> None:
        """The request was not sent after all."""
        with self._requests_lock:
            self._requests = [r for r in self._requests if r is not request]

    # -- the read --------------------------------------------------------------
    def read(self, kinds: Iterable[str] = ALL_KINDS) -> tuple[RunSnapshot, list[Notice]]:
        """Re-read ``kinds`` (everything on the first call); never raises for bad input."""
        prev = self._snapshot
        kinds = ALL_KINDS if prev is None else frozenset(kinds)
        now = self.now()
        notices: list[Notice] = []
        # One stat tells whether the directory is still the one last listed: a run directory
        # renamed away or replaced is seen at the next read, whatever kinds it was asked for.
        moved = prev is not None and self._dir_identity() != self._dir_id
        dir_state, other = self._dir_state() if (DIRECTORY in kinds or prev is None or moved
                                                 or kinds & {CHECKPOINTS, CONFIG}) \
            else (prev.dir_state, prev.other_files)
        if prev is not None and (prev.dir_state != dir_state or moved):
            kinds = ALL_KINDS
            if prev.dir_state != dir_state:
                notices.append(Notice(now, f"run directory is now {dir_state}",
                                      "warn" if dir_state != "ok" else "info"))
        config, config_error = (prev.config, prev.config_error) if prev and CONFIG not in kinds else self._config(dir_state)
        history = self._history(now, notices, first=prev is None, config=config) if HISTORY in kinds \
            else prev.history
        # The trainer before the checkpoints: one that exits writes its final checkpoint, then
        # removes its record, so a read that sees the record gone lists that checkpoint too
        # (and the notice of the exit names it, not the one before).
        trainer = self.probe(self.run_dir) if TRAINER in kinds else prev.trainer
        if prev is not None and prev.trainer.state == "running" and trainer.state != "running":
            kinds = kinds | {CHECKPOINTS}
        checkpoints = self._checkpoints(prev) if CHECKPOINTS in kinds else prev.checkpoints
        trainer = self._out_of_sight(trainer, prev, dir_state)
        if kinds & {TRAINER, HISTORY, CHECKPOINTS}:
            trainer = self._stall(trainer, now)
        if STATE in kinds or CONFIG in kinds or prev is None:
            arms = self._arms(config)
        else:
            arms = prev.arms
        if SAMPLES in kinds:
            read = read_samples(self.run_dir)
            samples = tuple(_shown_sample(s) for s in newest_per_arm(read.value or []).values())
            samples_error = None if read.error and "not written yet" in read.error else read.error
        else:
            samples, samples_error = prev.samples, prev.samples_error
        log_tail = self.log.read() if LOG in kinds else prev.log_tail
        if prev is None or kinds & {DIRECTORY, CONFIG, CHECKPOINTS, TRAINER}:
            pivots, pending_pivot = read_pivots(self.run_dir)
            rollback = pending_rollback(self.run_dir)
        else:
            pivots, pending_pivot, rollback = prev.pivots, prev.pending_pivot, prev.pending_rollback
        if prev is None or kinds & {CHECKPOINTS, CONFIG, DIRECTORY}:
            retention = self._retention(config, checkpoints, history)
        else:
            retention = prev.retention
        if prev is None or kinds & {CHECKPOINTS, CONFIG, DIRECTORY} or now - self._storage_at >= STORAGE_EVERY_S:
            storage = self._storage(config, checkpoints, history, dir_state, trainer.state == "running", now)
        else:
            storage = prev.storage
        snap = RunSnapshot(run_dir=self.run_dir, name=self.run_dir.resolve().name or str(self.run_dir), taken=now,
                           dir_state=dir_state, config=config, config_error=config_error, trainer=trainer,
                           history=history, checkpoints=checkpoints, arms=arms, samples=samples,
                           samples_error=samples_error, log_tail=log_tail, other_files=other,
                           log_seen=self.log.seen, pivots=pivots, pending_pivot=pending_pivot,
                           pending_rollback=rollback,
                           retention=retention, storage=storage)
        changes = describe_changes(prev, snap, now, self._answered_requests(prev, snap, now))
        if prev is None:
            notices[:0] = changes                            # the summary first
        else:
            notices.extend(changes)
        self._snapshot = snap
        return snap, notices

    # -- parts -----------------------------------------------------------------
    def stall_threshold(self) -> float:
        """``--stall-after``, else the larger of 60 s and ten median step times."""
        if self.stall_after is not None:
            return self.stall_after
        return stall_threshold(self.history.time[-2 * RATE_STEPS:])

    def _stall(self, trainer: TrainerView, now: float) -> TrainerView:
        """A verified trainer whose history, checkpoints and checkpoint temporaries stopped changing."""
        if trainer.state != "running":
            return replace(trainer, stalled_for=None, stall_threshold=None) if trainer.stalled_for else trainer
        # A checkpoint that landed is progress: a long write must not read as a stall the
        # moment its temporary is renamed into place (a clock ahead of ours counts as now).
        latest = max(trainer.started or 0.0, min(self._ckpt_written, now))
        try:
            latest = max(latest, (self.run_dir / LOSS_JSON).stat().st_mtime)
        except OSError:
            pass
        threshold = self.stall_threshold()
        if now - latest > threshold:
            # A long checkpoint write is progress too: its temporary keeps growing.
            try:
                for entry in os.scandir(self.run_dir):
                    if is_temporary(entry.name):
                        latest = max(latest, entry.stat().st_mtime)
            except OSError:
                pass
        idle = now - latest
        stalled = idle > threshold
        label = "stalled" if stalled else TRAINER_LABELS.get(trainer.state, trainer.state)
        return replace(trainer, label=label, stalled_for=idle if stalled else None, stall_threshold=threshold)

    def _out_of_sight(self, trainer: TrainerView, prev: RunSnapshot | None, dir_state: str) -> TrainerView:
        """A trainer that was running when its run directory went away (renamed, removed,
        emptied, no longer readable) has not been seen to exit: its record is out of sight,
        and it may well train on under another name. Until the directory is back it is shown
        as not verified, never as stopped."""
        if dir_state == "ok":
            self._lost_pid = None
            return trainer
        if prev is None or trainer.state not in ("stopped", "unreadable"):
            return trainer
        if prev.trainer.state == "running":
            self._lost_pid = prev.trainer.pid
        if self._lost_pid is None:
            return trainer
        return TrainerView(state="unverified", label=TRAINER_LABELS["unverified"], pid=self._lost_pid,
                           reason=f"the run directory is {dir_state} (renamed or removed?): pid {self._lost_pid}, "
                                  "the trainer that was running, can no longer be verified")

    def _dir_identity(self) -> tuple[int, int, bool] | None:
        """(device, inode, is a directory) of the run directory's path; None: nothing there."""
        try:
            st = os.stat(self.run_dir)
        except (OSError, ValueError):
            return None
        return st.st_dev, st.st_ino, stat.S_ISDIR(st.st_mode)

    def _dir_state(self) -> tuple[str, tuple[str, ...]]:
        self._dir_id = self._dir_identity()
        try:
            names = os.listdir(self.run_dir)
        except FileNotFoundError:
            return "missing", ()
        except NotADirectoryError:
            return "not a directory", ()
        except OSError as err:
            return f"unreadable ({(err.strerror or type(err).__name__).lower()})", ()
        if not names:
            return "empty", ()
        return "ok", tuple(sorted(n for n in names if not is_known(n)))

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

    def _checkpoints(self, prev: RunSnapshot | None) -> tuple[CheckpointInfo, ...]:
        """Every ``step_*.bin``, as :func:`rundir.list_checkpoints` sees them, but inspecting
        only files whose ``.bin`` or ``.json`` changed since the last read, and keeping no
        sidecar contents (the console never shows them)."""
        stamps = checkpoint_stamps(self.run_dir)
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

    def _answered_requests(self, prev: RunSnapshot | None, snap: RunSnapshot,
                           now: float) -> dict[str, CheckpointRequest]:
        """Which requested checkpoints this read sees complete: ``{file name: request}``."""
        if prev is None or snap.checkpoints is prev.checkpoints:
            return {}
        answered = {}
        with self._requests_lock:
            for c in snap.checkpoints:
                if c.status != "complete":
                    continue
                stamp = self._ckpt_cache.get(c.path.name, (None,))[0]
                for request in self._requests:
                    if request.baseline.get(c.path.name) != stamp:
                        answered[c.path.name] = request
            self._requests = [r for r in self._requests if r not in answered.values()
                              and now - r.sent_at < REQUEST_TIMEOUT_S]
        return answered

    def _config(self, dir_state: str) -> tuple[RunConfig | None, str | None]:
        if dir_state != "ok":
            return None, None
        if not os.path.lexists(self.run_dir / RUN_TOML):
            return None, "no run.toml (a run from another engine, or not started yet)"
        try:
            return load_run_config(self.run_dir), None
        except ConfigError as err:
            return None, str(err)
        except Exception as err:      # a config the library could not even classify (never expected)
            return None, f"run.toml: {type(err).__name__}: {err}"

    def _history(self, now: float, notices: list[Notice], first: bool, config: RunConfig | None = None
                 ) -> HistoryView:
        earlier = None
        if self._prefetch is not None:
            prefetch, self._prefetch = self._prefetch, None
            handed_over = prefetch.result()
            if handed_over is not None and handed_over[0].path == self.history.path:
                self.history, earlier = handed_over
        h = self.history
        update = h.refresh()
        if earlier is not None:                 # what the child read counts as this read's
            update = earlier.then(update)
        if update.changed or first or self._snapshot is None:
            self._history_version += 1
        if update.rewound or update.reset:
            self._rewinds += 1
            if update.reset and not first:
                notices.append(Notice(now, f"{LOSS_JSON} was replaced or shrank: re-read from the start", "warn"))
        for problem in update.new_problems[:5]:
            notices.append(Notice(now, f"skipped: {problem}", "warn"))
        if update.new_bad_lines > 5:
            notices.append(Notice(now, f"skipped {update.new_bad_lines - 5:,} more unreadable line(s)", "warn"))
        if update.new_nonfinite:
            loss = h.loss
            tail = loss[-max(update.new_steps, 1):]
            bad = h.step[-len(tail):][~np.isfinite(tail)]
            where = ", ".join(str(int(s)) for s in bad[:5]) + (" ..." if len(bad) > 5 else "")
            notices.append(Notice(now, f"non-finite loss at step {where}" if len(bad) else
                                  f"{update.new_nonfinite} non-finite loss value(s)", "error"))
        for ev in ([] if first else update.new_events):     # the whole past is not news
            text = event_notice(ev)
            if text:
                notices.append(Notice(now, text[0], text[1]))
        # A torn tail is normal for an instant while a line is written; one that is still
        # there at the next read (or at the first) is reported, once.
        if h.torn_tail and (first or h.torn_tail == self._torn_seen) and h.torn_tail != self._torn_reported:
            notices.append(Notice(now, f"torn last line in {LOSS_JSON} ({h.torn_tail} bytes): skipped", "warn"))
            self._torn_reported = h.torn_tail
        elif not h.torn_tail:
            self._torn_reported = 0
        self._torn_seen = h.torn_tail
        found = self.findings.update(h, update, config, now, notices, first)
        prev = self._snapshot.history if self._snapshot else None
        if prev is not None and not update.changed and prev.torn_tail == h.torn_tail and prev.error == h.error \
                and not found:
            return prev
        loss = h.loss
        # Where the run is: its head (the step of the newest step line), not the largest step,
        # which after a rollback or a resume from an older checkpoint belongs to an earlier
        # segment whose steps have not been run again yet.
        rows = head_rows(h.step, h.head_step)
        head = int(h.step[rows - 1]) if rows else None
        last_loss = _last_finite(loss[:rows])
        tokens = h.tokens
        tokens_now = int(tokens[rows - 1]) if rows and tokens[rows - 1] >= 0 else None
        # Rates from the current segment's tail only: the cost of a read must not grow with
        # the history, and a pause before a resume is no part of any rate.
        tail, since = current_segment(h)
        t_tail = h.time[tail]
        silent = silent_rewinds(h)
        steps_per_s = rate_per_s(h.step[tail].astype(np.float64), t_tail, since)
        return HistoryView(
            version=self._history_version, format=h.format, n_steps=len(h), last_step=head,
            last_loss=last_loss, tokens=tokens_now, steps_ahead=len(h) - rows,
            steps_per_s=steps_per_s, eta_s=eta_seconds(config.run.max_steps if config is not None else None, head, steps_per_s),
            tokens_per_s=rate_per_s(tokens[tail].astype(np.float64), t_tail, since)
            if tokens_now is not None else None,
            nonfinite=h.nonfinite, bad_lines=h.bad_lines, torn_tail=h.torn_tail, problems=tuple(h.problems),
            error=h.error, events=tuple(h.events), step=h.step.copy(), loss=loss.copy(), rewinds=self._rewinds,
            last_nonfinite_step=h.last_nonfinite_step if h.nonfinite else None, **self.findings.view_fields(),
            tokens_column=tokens.copy(), time_column=h.time.copy(),
            silent_rewinds=tuple(silent[-LISTED:]), silent_rewind_count=len(silent))

    def _arms(self, config: RunConfig | None) -> ArmsView:
        read = read_state(self.run_dir)
        state = read.value
        configured = config.arms if config is not None else {}
        error = None if read.error and "not written yet" in read.error else read.error   # absent is normal
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
                        error=error)
