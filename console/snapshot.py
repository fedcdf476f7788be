"""The torch-free model of a run directory that the dashboard, ``--once`` and ``--json`` share.

:class:`RunReader` reads a run directory through :mod:`trainer.rundir` only (it never
parses a file format itself) and returns an immutable :class:`RunSnapshot`. It is
incremental: :meth:`RunReader.read` takes the *kinds* of files that changed and re-reads
only those (the history reader picks up only the appended bytes), reusing the other
parts of the previous snapshot as they are, so a consumer can tell what changed by
identity. Each read also returns the :class:`Notice` list of what it saw change:
checkpoints landing, the trainer exiting, zombie arms, torn or non-finite lines...
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import time
from collections import deque
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np
import psutil

from trainer.rundir import (LOSS_JSON, SAMPLES_JSON, STATE_JSON, CheckpointInfo, ConfigError, HistoryEvent,
                            LossHistory, RunConfig, Sample, find_zombies, inspect_checkpoint, load_run_config,
                            newest_per_arm, read_samples, read_state, verify_trainer)
from trainer.rundir.pivot import PIVOT_JOURNAL, list_pivots, policy_text, read_journal
from trainer.rundir.process import LOCK_FILE, TRAINER_JSON

from .prefetch import HistoryPrefetch

RUN_TOML = "run.toml"
TRAINER_LOG = "trainer.log"

# The kinds of files a change can touch; a read re-reads only the kinds it is given.
HISTORY, CHECKPOINTS, STATE, SAMPLES, TRAINER, LOG, CONFIG, DIRECTORY = (
    "history", "checkpoints", "state", "samples", "trainer", "log", "config", "directory")
ALL_KINDS = frozenset({HISTORY, CHECKPOINTS, STATE, SAMPLES, TRAINER, LOG, CONFIG, DIRECTORY})

KNOWN_NAMES = {RUN_TOML: CONFIG, LOSS_JSON: HISTORY, STATE_JSON: STATE, SAMPLES_JSON: SAMPLES,
               TRAINER_JSON: TRAINER, LOCK_FILE: TRAINER, TRAINER_LOG: LOG, "archive": DIRECTORY,
               PIVOT_JOURNAL: DIRECTORY}

LOG_TAIL_LINES = 200
LOG_FIRST_READ_BYTES = 64 << 10
RATE_WINDOW_STEPS = 200

# A verified trainer whose history has not grown for this long is shown as stalled: the
# larger of STALL_MIN_S and STALL_STEPS median step times, unless --stall-after sets it.
STALL_MIN_S = 60.0
STALL_STEPS = 10
STALL_AFTER_S: float | None = None      # the process-wide --stall-after (None: automatic)

# How a verification state reads on the dashboard.
TRAINER_LABELS = {"running": "running", "stopped": "stopped", "stale": "stale pid record",
                  "unverified": "not supervised", "unreadable": "not supervised"}


def kind_of(name: str) -> str | None:
    """The kind of a file name in a run directory (None: a temporary file, ignored)."""
    if name.startswith(".tmp-"):
        return None
    if name.startswith("step_") and (name.endswith(".bin") or name.endswith(".json")):
        return CHECKPOINTS
    return KNOWN_NAMES.get(name, DIRECTORY)


def is_known(name: str) -> bool:
    return name in KNOWN_NAMES or (name.startswith("step_") and name.endswith((".bin", ".json"))) \
        or name.startswith(".tmp-")


@dataclass(frozen=True)
class Notice:
    """One line for the event log: what the console saw or did."""

    time: float
    text: str
    level: str = "info"                 # info | good | warn | error


@dataclass(frozen=True)
class TrainerView:
    """Who trains this directory, as verified against the process table."""

    state: str                          # running | stopped | stale | unverified | unreadable
    label: str                          # running | stopped | not supervised | stale pid record
    reason: str
    pid: int | None = None
    started: float | None = None
    cpu_percent: float | None = None
    rss: int | None = None
    gpu_memory: int | None = None       # bytes, where nvidia-smi reports the pid
    argv: tuple[str, ...] = ()
    stalled_for: float | None = None    # seconds without a new history line, when past the threshold
    stall_threshold: float | None = None

    @property
    def signallable(self) -> bool:
        return self.state == "running"

    @property
    def stalled(self) -> bool:
        """Alive and verified, but no new step for longer than the stall threshold."""
        return self.state == "running" and self.stalled_for is not None


@dataclass(frozen=True)
class HistoryView:
    """The history reader's state at one read (columns copied, so safe to hand to the UI)."""

    version: int                        # bumped at every change: the plot re-renders on it
    format: str | None
    n_steps: int
    last_step: int | None
    last_loss: float | None
    tokens: int | None
    steps_per_s: float | None
    tokens_per_s: float | None
    nonfinite: int
    bad_lines: int
    torn_tail: int
    problems: tuple[str, ...]
    error: str | None
    events: tuple[HistoryEvent, ...]
    step: np.ndarray = field(repr=False, compare=False)
    loss: np.ndarray = field(repr=False, compare=False)
    rewinds: int = 0                    # how many reads found the history rewound or reset
    last_nonfinite_step: int | None = None


@dataclass(frozen=True)
class ArmRow:
    name: str
    pulls: int | None
    share: float | None
    prob: float | None
    ema_reward: float | None
    cap: float | None
    floor: float | None
    source: str
    status: str                         # ok | zombie | configured (not in .state.json)
    reason: str = ""


@dataclass(frozen=True)
class ArmsView:
    rows: tuple[ArmRow, ...]
    policy_from: str                    # .state.json | run.toml | none
    phase: dict[str, Any]
    state_step: int | None
    error: str | None


@dataclass(frozen=True)
class PivotEntry:
    """One polish pivot, from its archive's ``pivot.json``."""

    step: int | None                    # P, the checkpoint it resumed from
    archive: str                        # relative to the run directory
    stage: str
    policy: str                         # the new caps and floors, one line

    @property
    def finished(self) -> bool:
        return self.stage == "resumed"


def read_pivots(run_dir: Path) -> tuple[tuple[PivotEntry, ...], str | None]:
    """Every pivot's archive, and a line about an interrupted pivot (its journal), if any."""
    entries = []
    for data in list_pivots(run_dir):
        step = data.get("final_step")
        entries.append(PivotEntry(step if isinstance(step, int) else None, str(data.get("path", "")),
                                  str(data.get("stage", data.get("error", "?"))),
                                  printable(policy_text(data.get("new_policy")))))
    journal, error = read_journal(run_dir)
    if error:
        return tuple(entries), error
    pending = (f"a polish pivot is unfinished (last completed stage: {journal.stage}); p or --pivot completes "
               "it, --pivot-rollback undoes it") if journal else None
    return tuple(entries), pending


@dataclass(frozen=True)
class RunSnapshot:
    """Everything the dashboard shows, read at one moment."""

    run_dir: Path
    name: str
    taken: float
    dir_state: str                      # ok | empty | missing | not a directory
    config: RunConfig | None
    config_error: str | None
    trainer: TrainerView
    history: HistoryView
    checkpoints: tuple[CheckpointInfo, ...]
    arms: ArmsView
    samples: tuple[Sample, ...]         # newest per arm
    samples_error: str | None
    log_tail: tuple[str, ...]
    other_files: tuple[str, ...]
    log_seen: int = 0                   # trainer.log lines read so far (new ones = the difference)
    pivots: tuple[PivotEntry, ...] = ()  # finished or archived polish pivots, oldest first
    pending_pivot: str | None = None    # an interrupted pivot's journal, described

    @property
    def newest_checkpoint(self) -> CheckpointInfo | None:
        usable = [c for c in self.checkpoints if c.status != "invalid"]
        return usable[-1] if usable else None

    @property
    def failed_checkpoint(self) -> HistoryEvent | None:
        """The newest ``checkpoint_failed`` event not yet followed by a checkpoint on disk."""
        for ev in reversed(self.history.events):
            if ev.event == "checkpoint_failed":
                newest = self.newest_checkpoint
                step = ev.step if ev.step is not None else -1
                return ev if newest is None or newest.step < step else None
            if ev.event in ("checkpoint", "start", "resume"):
                return None
        return None

    @property
    def safety_stop(self) -> HistoryEvent | None:
        """The trainer's last ``stop`` event, when a safety policy (divergence) made it."""
        for ev in reversed(self.history.events):
            if ev.event == "stop":
                return ev if ev.data.get("reason") == "nonfinite" else None
            if ev.event in ("start", "resume"):
                return None
        return None

    @property
    def zombies(self) -> dict[str, str]:
        return {a.name: a.reason for a in self.arms.rows if a.status == "zombie"}

    def problems(self) -> list[str]:
        """Everything wrong, one line each, most important first."""
        out = []
        if self.dir_state == "missing":
            out.append(f"run directory {self.run_dir} does not exist")
        elif self.dir_state == "not a directory":
            out.append(f"{self.run_dir} is not a directory")
        elif self.dir_state == "empty":
            out.append("the run directory is empty: nothing has been written yet")
        if self.trainer.state in ("stale", "unverified", "unreadable"):
            out.append(f"trainer {self.trainer.label}: {self.trainer.reason}")
        if self.trainer.stalled:
            out.append(f"trainer STALLED: {stall_text(self.trainer)}")
        failed = self.failed_checkpoint
        if failed is not None:
            out.append(f"checkpoint FAILED at step {failed.step}: {failed.data.get('error', 'write error')}")
        stop = self.safety_stop
        if stop is not None:
            out.append(f"trainer stopped: the run diverged at step {stop.step} "
                       f"({stop.data.get('in_a_row', '?')} non-finite steps in a row)")
        if self.pending_pivot:
            out.append(self.pending_pivot)
        if self.config_error and self.dir_state == "ok":
            out.append(self.config_error)
        for c in self.checkpoints:
            if c.status == "invalid":
                out.append(f"{c.path.name}: invalid: {c.reason}")
        for name, reason in self.zombies.items():
            out.append(f"zombie arm {name}: {reason}")
        h = self.history
        if h.error:
            out.append(h.error)
        if h.bad_lines:
            out.append(f"{LOSS_JSON}: {h.bad_lines} unreadable line(s) skipped"
                       + (f" (first: {h.problems[0]})" if h.problems else ""))
        if h.torn_tail:
            out.append(f"{LOSS_JSON}: torn last line ({h.torn_tail} bytes) skipped")
        if h.nonfinite:
            out.append(f"{LOSS_JSON}: {h.nonfinite} non-finite loss value(s)"
                       + (f", the last at step {h.last_nonfinite_step:,}" if h.last_nonfinite_step is not None else ""))
        if self.arms.error and self.dir_state == "ok":
            out.append(self.arms.error)
        if self.samples_error and self.dir_state == "ok":
            out.append(self.samples_error)
        return out


class TrainerProbe:
    """Verifies ``.trainer.json`` and measures the verified process (CPU%, RSS, GPU memory).

    Stateful because psutil's ``cpu_percent`` compares with the previous call. Tests
    replace it with a callable returning a fixed :class:`TrainerView`.
    """

    GPU_EVERY_S = 5.0

    def __init__(self) -> None:
        self._proc: psutil.Process | None = None
        self._key: tuple[int, float] | None = None
        self._nvidia_smi = shutil.which("nvidia-smi")
        self._gpu: tuple[float, dict[int, int]] = (0.0, {})

    def __call__(self, run_dir: Path) -> TrainerView:
        v = verify_trainer(run_dir)
        rec = v.record
        view = TrainerView(state=v.state, label=TRAINER_LABELS.get(v.state, v.state), reason=v.reason,
                           pid=rec.pid if rec else None,
                           started=(rec.started or rec.create_time) if rec else None,
                           argv=tuple(rec.argv) if rec else ())
        if not v.ok or rec is None:
            self._proc = self._key = None
            return view
        try:
            if self._key != (rec.pid, rec.create_time):
                self._proc = psutil.Process(rec.pid)
                self._key = (rec.pid, rec.create_time)
                self._proc.cpu_percent(None)            # primes the next reading
                cpu = None
            else:
                assert self._proc is not None
                cpu = self._proc.cpu_percent(None)
            rss = self._proc.memory_info().rss
        except psutil.Error:
            return view
        return replace(view, cpu_percent=cpu, rss=rss, gpu_memory=self._gpu_memory(rec.pid))

    def _gpu_memory(self, pid: int) -> int | None:
        if not self._nvidia_smi:
            return None
        stamp, table = self._gpu
        if time.monotonic() - stamp > self.GPU_EVERY_S:
            table = {}
            try:
                out = subprocess.run([self._nvidia_smi, "--query-compute-apps=pid,used_memory",
                                      "--format=csv,noheader,nounits"], capture_output=True, text=True,
                                     timeout=2).stdout
                for line in out.splitlines():
                    p, _, mib = line.partition(",")
                    if p.strip().isdigit() and mib.strip().isdigit():
                        table[int(p)] = table.get(int(p), 0) + int(mib) * (1 << 20)
            except (OSError, subprocess.SubprocessError):
                self._nvidia_smi = None
            self._gpu = (time.monotonic(), table)
        return table.get(pid)


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


def _rate(x: np.ndarray, t: np.ndarray) -> float | None:
    """Units per second over the last few hundred steps (None when time is unknown)."""
    ok = np.isfinite(t) & (x >= 0)
    x, t = x[ok], t[ok]
    if len(t) < 2:
        return None
    x, t = x[-RATE_WINDOW_STEPS:], t[-RATE_WINDOW_STEPS:]
    dt = float(t[-1] - t[0])
    return float(x[-1] - x[0]) / dt if dt > 0 else None


class RunReader:
    """Reads a run directory into :class:`RunSnapshot`s, re-reading only what changed.

    Not thread-safe: one thread at a time calls :meth:`read` (the dashboard uses an
    exclusive worker). The snapshots it returns are immutable and safe to share.
    """

    def __init__(self, run_dir: str | os.PathLike[str], now: Callable[[], float] = time.time,
                 probe: Callable[[Path], TrainerView] | None = None, stall_after: float | None = None,
                 prefetch: HistoryPrefetch | None = None):
        self.run_dir = Path(run_dir)
        self.stall_after = stall_after if stall_after is not None else STALL_AFTER_S
        self.now = now
        self.probe = probe or TrainerProbe()
        self.history = LossHistory(self.run_dir / LOSS_JSON)
        self._prefetch = prefetch               # the first history read, done by a forked child
        self._snapshot: RunSnapshot | None = None
        self._history_version = 0
        self._rewinds = 0
        self._log_offset: int | None = None
        self._log_identity: tuple[int, int] | None = None
        self._log_lines: deque[str] = deque(maxlen=LOG_TAIL_LINES)
        self._log_partial = b""
        self._log_seen = 0
        self._torn_seen = 0
        self._torn_reported = 0
        self._ckpt_cache: dict[str, tuple[tuple, CheckpointInfo]] = {}

    @property
    def snapshot(self) -> RunSnapshot | None:
        return self._snapshot

    # -- the read --------------------------------------------------------------
    def read(self, kinds: Iterable[str] = ALL_KINDS) -> tuple[RunSnapshot, list[Notice]]:
        """Re-read ``kinds`` (everything on the first call); never raises for bad input."""
        prev = self._snapshot
        kinds = ALL_KINDS if prev is None else frozenset(kinds)
        now = self.now()
        notices: list[Notice] = []
        dir_state, other = self._dir_state() if (DIRECTORY in kinds or prev is None or kinds & {CHECKPOINTS, CONFIG}) \
            else (prev.dir_state, prev.other_files)
        if prev is not None and prev.dir_state != dir_state:
            kinds = ALL_KINDS
            notices.append(Notice(now, f"run directory is now {dir_state}", "warn" if dir_state != "ok" else "info"))
        config, config_error = (prev.config, prev.config_error) if prev and CONFIG not in kinds else self._config(dir_state)
        history = self._history(now, notices, first=prev is None) if HISTORY in kinds else prev.history
        checkpoints = self._checkpoints(prev) if CHECKPOINTS in kinds else prev.checkpoints
        trainer = self.probe(self.run_dir) if TRAINER in kinds else prev.trainer
        if kinds & {TRAINER, HISTORY}:
            trainer = self._stall(trainer, now)
        if STATE in kinds or CONFIG in kinds or prev is None:
            arms = self._arms(config)
        else:
            arms = prev.arms
        if SAMPLES in kinds:
            read = read_samples(self.run_dir)
            samples = tuple(newest_per_arm(read.value or []).values())
            samples_error = None if read.error and "not written yet" in read.error else read.error
        else:
            samples, samples_error = prev.samples, prev.samples_error
        log_tail = self._log_tail() if LOG in kinds else prev.log_tail
        if prev is None or kinds & {DIRECTORY, CONFIG, CHECKPOINTS, TRAINER}:
            pivots, pending_pivot = read_pivots(self.run_dir)
        else:
            pivots, pending_pivot = prev.pivots, prev.pending_pivot
        snap = RunSnapshot(run_dir=self.run_dir, name=self.run_dir.resolve().name or str(self.run_dir), taken=now,
                           dir_state=dir_state, config=config, config_error=config_error, trainer=trainer,
                           history=history, checkpoints=checkpoints, arms=arms, samples=samples,
                           samples_error=samples_error, log_tail=log_tail, other_files=other,
                           log_seen=self._log_seen, pivots=pivots, pending_pivot=pending_pivot)
        if prev is None:
            notices[:0] = self._diff(prev, snap, now)        # the summary first
        else:
            notices.extend(self._diff(prev, snap, now))
        self._snapshot = snap
        return snap, notices

    # -- parts -----------------------------------------------------------------
    def stall_threshold(self) -> float:
        """``--stall-after``, else the larger of 60 s and ten median step times."""
        if self.stall_after is not None:
            return self.stall_after
        t = self.history.time[-2 * RATE_WINDOW_STEPS:]
        dt = np.diff(t[np.isfinite(t)])
        dt = dt[dt > 0]
        return max(STALL_MIN_S, STALL_STEPS * float(np.median(dt))) if len(dt) else STALL_MIN_S

    def _stall(self, trainer: TrainerView, now: float) -> TrainerView:
        """A verified trainer whose history (and checkpoint temporaries) stopped changing."""
        if trainer.state != "running":
            return replace(trainer, stalled_for=None, stall_threshold=None) if trainer.stalled_for else trainer
        latest = trainer.started or 0.0
        try:
            latest = max(latest, (self.run_dir / LOSS_JSON).stat().st_mtime)
        except OSError:
            pass
        threshold = self.stall_threshold()
        if now - latest > threshold:
            # A long checkpoint write is progress too: its temporary keeps growing.
            try:
                for entry in os.scandir(self.run_dir):
                    if entry.name.startswith(".tmp-"):
                        latest = max(latest, entry.stat().st_mtime)
            except OSError:
                pass
        idle = now - latest
        stalled = idle > threshold
        label = "stalled" if stalled else TRAINER_LABELS.get(trainer.state, trainer.state)
        return replace(trainer, label=label, stalled_for=idle if stalled else None, stall_threshold=threshold)

    def _dir_state(self) -> tuple[str, tuple[str, ...]]:
        try:
            names = os.listdir(self.run_dir)
        except FileNotFoundError:
            return "missing", ()
        except NotADirectoryError:
            return "not a directory", ()
        except OSError as err:
            return f"unreadable ({err.strerror})", ()
        if not names:
            return "empty", ()
        return "ok", tuple(sorted(n for n in names if not is_known(n)))

    def _checkpoints(self, prev: RunSnapshot | None) -> tuple[CheckpointInfo, ...]:
        """Every ``step_*.bin``, as :func:`trainer.rundir.list_checkpoints` sees them, but
        inspecting only files whose ``.bin`` or ``.json`` changed since the last read (a real
        sidecar holds the samplers' state, about 1 MB of JSON each) and keeping no sidecar
        contents, which the console never shows."""
        try:
            entries = {e.name: e for e in os.scandir(self.run_dir) if e.name.startswith("step_")}
        except OSError:
            self._ckpt_cache.clear()
            return ()

        def stamp(name: str) -> tuple[int, int] | None:
            entry = entries.get(name)
            try:
                st = entry.stat() if entry is not None else None
            except OSError:
                return None
            return (st.st_mtime_ns, st.st_size) if st else None

        infos, cache = [], {}
        for name in entries:
            if not name.endswith(".bin"):
                continue
            key = (stamp(name), stamp(name[:-4] + ".json"))
            hit = self._ckpt_cache.get(name)
            if hit is not None and hit[0] == key:
                info = hit[1]
            else:
                info = replace(inspect_checkpoint(entries[name].path), sidecar=None)
            cache[name] = (key, info)
            infos.append(info)
        self._ckpt_cache = cache
        infos.sort(key=lambda i: (i.step, i.path.name))
        result = tuple(infos)
        if prev is not None and result == prev.checkpoints:
            return prev.checkpoints            # unchanged: same object, nothing repaints
        return result

    def _config(self, dir_state: str) -> tuple[RunConfig | None, str | None]:
        if dir_state != "ok":
            return None, None
        if not (self.run_dir / RUN_TOML).exists():
            return None, "no run.toml (a run from another engine, or not started yet)"
        try:
            return load_run_config(self.run_dir), None
        except ConfigError as err:
            return None, str(err)
        except Exception as err:      # a config the library could not even classify
            return None, f"run.toml: {type(err).__name__}: {err}"

    def _history(self, now: float, notices: list[Notice], first: bool) -> HistoryView:
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
        if len(update.new_problems) > 5:
            notices.append(Notice(now, f"skipped {len(update.new_problems) - 5} more unreadable line(s)", "warn"))
        if update.new_nonfinite:
            loss = h.loss
            tail = loss[-max(update.new_steps, 1):]
            bad = h.step[-len(tail):][~np.isfinite(tail)]
            where = ", ".join(str(int(s)) for s in bad[:5]) + (" ..." if len(bad) > 5 else "")
            notices.append(Notice(now, f"non-finite loss at step {where}" if len(bad) else
                                  f"{update.new_nonfinite} non-finite loss value(s)", "error"))
        for ev in ([] if first else update.new_events):     # the whole past is not news
            text = _event_text(ev)
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
        prev = self._snapshot.history if self._snapshot else None
        if prev is not None and not update.changed and prev.torn_tail == h.torn_tail and prev.error == h.error:
            return prev
        loss = h.loss
        last_loss = _last_finite(loss)
        bad_steps = h.step[~np.isfinite(loss)] if h.nonfinite else ()
        tokens = h.tokens
        # Rates from the tail only: the cost of a read must not grow with the history.
        tail = slice(-2 * RATE_WINDOW_STEPS, None)
        t_tail = h.time[tail]
        return HistoryView(
            version=self._history_version, format=h.format, n_steps=len(h), last_step=h.last_step,
            last_loss=last_loss, tokens=int(tokens[-1]) if len(tokens) and tokens[-1] >= 0 else None,
            steps_per_s=_rate(h.step[tail].astype(np.float64), t_tail),
            tokens_per_s=_rate(tokens[tail].astype(np.float64), t_tail) if len(tokens) and tokens[-1] >= 0 else None,
            nonfinite=h.nonfinite, bad_lines=h.bad_lines, torn_tail=h.torn_tail, problems=tuple(h.problems),
            error=h.error, events=tuple(h.events), step=h.step.copy(), loss=loss.copy(), rewinds=self._rewinds,
            last_nonfinite_step=int(bad_steps[-1]) if len(bad_steps) else None)

    def _arms(self, config: RunConfig | None) -> ArmsView:
        read = read_state(self.run_dir)
        state = read.value
        configured = config.arms if config is not None else {}
        error = None if read.error and "not written yet" in read.error else read.error   # absent is normal
        rows: list[ArmRow] = []
        if state is not None:
            try:
                zombies = find_zombies(state, config, self.run_dir)
            except Exception as err:          # never let one odd source crash the dashboard
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
                                   reason="in run.toml, not in .state.json yet"))
        return ArmsView(rows=tuple(rows), policy_from=".state.json" if state else ("run.toml" if configured else "none"),
                        phase=dict(state.phase) if state else {}, state_step=state.step if state else None,
                        error=error)

    def _log_tail(self) -> tuple[str, ...]:
        path = self.run_dir / TRAINER_LOG
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            if self._log_offset is not None:
                self._log_lines.clear()
                self._log_offset, self._log_identity, self._log_partial = None, None, b""
            return tuple(self._log_lines)
        try:
            st = os.fstat(fd)
            identity = (st.st_dev, st.st_ino)
            if self._log_offset is None or identity != self._log_identity or st.st_size < self._log_offset:
                self._log_lines.clear()
                self._log_partial = b""
                self._log_offset = max(0, st.st_size - LOG_FIRST_READ_BYTES)
                self._log_identity = identity
                skip_first = self._log_offset > 0
            else:
                skip_first = False
            if st.st_size > self._log_offset:
                data = os.pread(fd, st.st_size - self._log_offset, self._log_offset)
                self._log_offset += len(data)
                data = self._log_partial + data
                lines = data.split(b"\n")
                self._log_partial = lines.pop()
                if skip_first and lines:
                    lines = lines[1:]
                self._log_seen += len(lines)
                for raw in lines:
                    self._log_lines.append(raw.decode("utf-8", "replace").rstrip("\r").expandtabs(4))
        except OSError:
            pass
        finally:
            os.close(fd)
        return tuple(self._log_lines)

    # -- what changed ----------------------------------------------------------
    def _diff(self, prev: RunSnapshot | None, snap: RunSnapshot, now: float) -> list[Notice]:
        out: list[Notice] = []
        if prev is None:
            out.append(Notice(now, f"watching {snap.name}: trainer {snap.trainer.label}"
                              + (f" (pid {snap.trainer.pid})" if snap.trainer.pid and snap.trainer.state == "running"
                                 else "") + f", {snap.history.n_steps:,} steps, {len(snap.checkpoints)} checkpoint(s)"))
            for problem in snap.problems():
                if "torn last line" in problem or "non-finite" in problem or "unreadable line" in problem:
                    continue          # already said by the history read
                out.append(Notice(now, problem, "error" if "zombie" in problem or "invalid" in problem else "warn"))
            return out
        if snap.checkpoints is not prev.checkpoints:
            before = {c.path.name: c for c in prev.checkpoints}
            after = {c.path.name: c for c in snap.checkpoints}
            for name, c in after.items():
                old = before.get(name)
                if old is not None and (old.status, old.mtime, old.size) == (c.status, c.mtime, c.size):
                    continue
                if c.status == "invalid":
                    out.append(Notice(now, f"{name}: invalid: {c.reason}", "error"))
                elif old is None or old.mtime != c.mtime or old.status == "invalid":
                    kind = "complete" if c.status == "complete" else "foreign: weights, m and v only"
                    out.append(Notice(now, f"checkpoint landed: {name} (step {c.step:,}, {format_size(c.size)}, {kind})",
                                      "good" if c.status == "complete" else "info"))
                elif c.status == "complete" and old.status == "foreign":
                    out.append(Notice(now, f"{name}: resume .json written, now complete", "good"))
            for name in before.keys() - after.keys():
                out.append(Notice(now, f"checkpoint removed: {name}", "warn"))
        t0, t1 = prev.trainer, snap.trainer
        if (t0.state, t0.pid) != (t1.state, t1.pid):
            if t1.state == "running":
                out.append(Notice(now, f"trainer running: pid {t1.pid} verified", "good"))
            elif t0.state == "running" and t1.state == "stopped":
                final = snap.newest_checkpoint
                out.append(Notice(now, f"trainer exited cleanly (pid {t0.pid} removed its record)"
                                  + (f"; final checkpoint {final.path.name}" if final else ""), "good"))
            elif t0.state == "running" and t1.state == "stale":
                out.append(Notice(now, f"trainer pid {t0.pid} is gone without a clean exit: {t1.reason}", "error"))
            elif t1.state != "stopped":
                out.append(Notice(now, f"trainer {t1.label}: {t1.reason}", "warn"))
            else:
                out.append(Notice(now, "trainer stopped: " + t1.reason))
        if t1.stalled and not t0.stalled:
            out.append(Notice(now, f"trainer pid {t1.pid} STALLED: {stall_text(t1)}", "error"))
        elif t0.stalled and not t1.stalled and t1.state == "running":
            out.append(Notice(now, f"trainer pid {t1.pid} is stepping again", "good"))
        if snap.arms is not prev.arms:
            for name, reason in snap.zombies.items():
                if name not in prev.zombies:
                    out.append(Notice(now, f"zombie arm {name}: {reason}", "error"))
            if snap.arms.error and snap.arms.error != prev.arms.error:
                out.append(Notice(now, snap.arms.error, "warn"))
        if snap.samples_error and snap.samples_error != prev.samples_error:
            out.append(Notice(now, snap.samples_error, "warn"))
        if snap.config_error != prev.config_error and snap.config_error:
            out.append(Notice(now, snap.config_error, "error"))
        return out


def _finite(x: float) -> float | None:
    return x if isinstance(x, float) and math.isfinite(x) else None


def _event_text(ev: HistoryEvent) -> tuple[str, str] | None:
    d = ev.data
    at = f" at step {ev.step:,}" if ev.step is not None else ""
    if ev.event == "checkpoint":
        return None                      # the checkpoint file landing says it, with its status
    if ev.event == "resume":
        src = d.get("checkpoint") or d.get("path") or ""
        return f"trainer resumed from step {d.get('from_step', ev.step)}" + (f" ({src})" if src else ""), "info"
    if ev.event == "zombie":
        return f"trainer dropped zombie arm {d.get('arm', '?')}: {d.get('reason', '')}".rstrip(": "), "error"
    if ev.event == "pivot":
        return f"polish pivot{at}", "info"
    if ev.event == "checkpoint_failed":
        return f"checkpoint FAILED{at}: {d.get('error', 'write error')}; the previous checkpoint is intact", "error"
    if ev.event == "write_failed":
        return f"could not write {d.get('file', 'a file')}{at}: {d.get('error', 'write error')}", "warn"
    if ev.event == "stop" and d.get("reason") == "nonfinite":
        return (f"trainer STOPPED{at}: the run diverged ({d.get('in_a_row', '?')} non-finite steps in a row; "
                f"last good step {d.get('last_good_step')})"), "error"
    if ev.event == "stop":
        return f"trainer logged stop{at}" + (f" ({d.get('reason')})" if d.get("reason") else ""), "info"
    if ev.event == "signal":
        return f"trainer got {d.get('signal', 'a signal')}{at}", "info"
    if ev.event == "start":
        return f"trainer started{at}", "info"
    return f"{ev.event}{at}", "info"


# -- formatting shared by every view ---------------------------------------------

def stall_text(t: TrainerView) -> str:
    """``no new step for 2m05s (alive and verified; stall threshold 1m00s)``."""
    return (f"no new step for {format_age(t.stalled_for)} (alive and verified; "
            f"stall threshold {format_age(t.stall_threshold)})")


def format_size(n: int | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def format_age(seconds: float | None) -> str:
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
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def format_rate(x: float | None, unit: str) -> str:
    if x is None or not math.isfinite(x):
        return "-"
    if x >= 10_000:
        return f"{x / 1000:,.1f}k {unit}/s"
    return f"{x:,.1f} {unit}/s"


def format_float(x: float | None, fmt: str = ".4f") -> str:
    return "-" if x is None or not math.isfinite(x) else format(x, fmt)


def format_pct(x: float | None) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{100 * x:.1f}%"


def printable(text: str) -> str:
    """Model output can hold any byte: control characters would corrupt the terminal."""
    text = text.expandtabs(4)
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() or ch == "\n" else "\ufffd" for ch in text)


def plot_markers(snap: RunSnapshot) -> list[tuple[int, str]]:
    """Steps worth a marker on the loss plot: checkpoints on disk, resumes and pivots."""
    marks = [(c.step, "checkpoint") for c in snap.checkpoints if c.status != "invalid"]
    for ev in snap.history.events:
        if ev.event in ("resume", "pivot"):
            step = ev.step if ev.step is not None else ev.data.get("from_step")
            if isinstance(step, int):
                marks.append((step, ev.event))
    return marks
