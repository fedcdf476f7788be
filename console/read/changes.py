"""What changed in a run directory, in words: the notices of the event log.

:func:`describe_changes` compares two snapshots (checkpoints landing or removed, the
trainer starting, exiting or stalling, new zombie arms...); :func:`event_notice` says what a
new history event means.
"""

from __future__ import annotations

import os
import shlex
from typing import Any, Mapping, Sequence

from rundir import CheckpointInfo, HistoryEvent
from rundir.layout import (
    ARCHIVE_DIR,
    EVENT_CHECKPOINT,
    EVENT_CHECKPOINT_FAILED,
    EVENT_EXTERNAL_CHECKPOINT,
    EVENT_PIVOT,
    EVENT_RESUME,
    EVENT_SIGNAL,
    EVENT_START,
    EVENT_STOP,
    EVENT_WRITE_FAILED,
    EVENT_ZOMBIE,
    STOP_REQUEUE,
    is_error_stop,
)
from rundir.text import counted

from ..model.checkpoint_wait import CheckpointWait, WaitEnd
from ..model.findings import LISTED, error_stop_text, many, names_and_more
from ..model.format import format_counter, format_size, printable, stall_text
from ..model.snapshot import Notice, RunSnapshot
from .landing import external_details, landed_text, landing_text

# How long a live trainer's new .bin may be without its .json before it is said as a
# foreign checkpoint: the .json is written right after the .bin, so a few seconds covers a
# loaded machine and a slow filesystem (and a clock a little off the file server's).
UNFINISHED_S = 10.0


def describe_changes(prev: RunSnapshot | None, snap: RunSnapshot, now: float,
                     requested: Mapping[str, Any] | None = None,
                     ended: Sequence[CheckpointWait] = ()) -> list[Notice]:
    """What changed between two snapshots, as notices (the first snapshot: a summary and its
    problems). ``requested`` names the checkpoints that answer a request (file name to the
    request, with its ``sent_at``): their landing says so, in the one notice; ``ended`` are the
    requests that ended without a file to say (unanswered, or landed in one pruned since)."""
    requested = requested or {}
    out = [Notice(now, landed_text(wait, wait.waited), "good") if wait.end is WaitEnd.LANDED else
           Notice(now, f"checkpoint request: {wait.why}", "error") for wait in ended]
    if prev is None:
        out.append(Notice(now, f"watching {printable(snap.name)}: trainer {snap.trainer.label}"
                          + (f" (pid {snap.trainer.pid})" if snap.trainer.pid and snap.trainer.state == "running"
                             else "") + f", {counted(snap.history.n_steps, 'step')}, "
                          f"{counted(len(snap.checkpoints), 'checkpoint')}"))
        out.extend(Notice(now, p.text, p.level) for p in snap.problems if not p.spec.said_by_read)
        return out
    if snap.checkpoints is not prev.checkpoints:
        out += _checkpoint_changes(prev, snap, now, requested)
    if snap.external_checkpoints is not prev.external_checkpoints:
        out += _external_changes(prev, snap, now, requested)
    out += _trainer_changes(prev, snap, now)
    if snap.arms is not prev.arms:
        before_zombies = prev.zombies
        new = [(name, reason) for name, reason in snap.zombies.items() if name not in before_zombies]
        if len(new) <= LISTED:
            out.extend(Notice(now, f"zombie arm {printable(name)}: {reason}", "error") for name, reason in new)
        else:                               # one notice for many: a list of 100,000 is not read
            out.append(Notice(now, f"{many(len(new), 'new zombie arm')}: "
                                   f"{names_and_more([n for n, _ in new[:LISTED]], len(new))}; "
                                   f"{printable(new[0][0])}: {new[0][1]}", "error"))
        if snap.arms.error and snap.arms.error != prev.arms.error:
            out.append(Notice(now, snap.arms.error, "warning"))
    if snap.samples_error and snap.samples_error != prev.samples_error:
        out.append(Notice(now, snap.samples_error, "warning"))
    if snap.config_error != prev.config_error and snap.config_error:
        out.append(Notice(now, snap.config_error, "error"))
    return out


def _checkpoint_changes(prev: RunSnapshot, snap: RunSnapshot, now: float,
                        requested: Mapping[str, Any]) -> list[Notice]:
    """Checkpoint files that landed, completed, turned invalid or were removed."""
    out: list[Notice] = []
    before = {c.path.name: c for c in prev.checkpoints}
    after = {c.path.name: c for c in snap.checkpoints}
    # One notice per file, up to LISTED of a kind in one read; past that (a copied-in or
    # hostile directory) one notice names a few and counts the rest. A landing that
    # answers a request is always said on its own.
    landed: list[Notice] = []
    invalid: list[tuple[str, str]] = []
    for raw_name, c in after.items():
        old, name = before.get(raw_name), printable(raw_name)
        if old is not None and (old.status, old.mtime, old.size) == (c.status, c.mtime, c.size):
            continue
        if _unfinished(c, snap, now):
            continue                    # said when its .json lands, as one landing
        if old is not None and _unfinished(old, prev, prev.taken):
            old = None                  # never said: its landing is said now
        if c.status == "invalid":
            invalid.append((raw_name, c.reason))
        elif old is None or old.mtime != c.mtime or old.status == "invalid" or raw_name in requested:
            kind = "complete" if c.status == "complete" else "foreign: weights, m and v only"
            request = requested.get(raw_name)
            waited = now - request.sent_at if request is not None else None
            notice = Notice(now, landing_text(name, c.step, f", {format_size(c.size)}, {kind}", waited),
                            "good" if c.status == "complete" else "info")
            (out if request is not None else landed).append(notice)
        elif c.status == "complete" and old.status == "foreign":
            landed.append(Notice(now, f"{name}: resume .json written, now complete", "good"))
    if len(landed) <= LISTED:
        out.extend(landed)
    else:                               # the newest on its own, the rest counted
        out.append(landed[-1])
        out.append(Notice(now, f"and {many(len(landed) - 1, 'more checkpoint file')} landed or completed "
                               "in the same read", "info"))
    if len(invalid) <= LISTED:
        out.extend(Notice(now, f"{printable(name)}: invalid: {reason}", "error") for name, reason in invalid)
    else:
        newest = invalid[::-1]
        out.append(Notice(now, f"{many(len(invalid), 'invalid checkpoint file')} (newest first): "
                               f"{names_and_more([n for n, _ in newest[:LISTED]], len(invalid))}; "
                               f"{printable(newest[0][0])}: {newest[0][1]}", "error"))
    removed = sorted(before.keys() - after.keys())
    archived = _archived(snap, removed)
    moved = [name for name in removed if name in archived]
    removed = [name for name in removed if name not in archived]
    if moved:
        where = ", ".join(sorted({f"{ARCHIVE_DIR}/{archived[name]}/" for name in moved}))
        out.append(Notice(now, f"{many(len(moved), 'checkpoint file')} moved to {printable(where)}, not deleted: "
                               f"{names_and_more(moved[:LISTED], len(moved))}", "info"))
    if len(removed) <= LISTED:
        out.extend(Notice(now, f"checkpoint removed: {printable(name)}", "warning") for name in removed)
    else:
        out.append(Notice(now, f"{many(len(removed), 'checkpoint file')} removed: "
                               f"{names_and_more(removed[:LISTED], len(removed))}", "warning"))
    return out


def _archived(snap: RunSnapshot, names: list[str]) -> dict[str, str]:
    """Of the checkpoint files ``names`` gone from the run directory, those now in one of its
    archives (a rollback sets them aside there), with that archive's name."""
    if not names:
        return {}
    try:
        archives = [entry for entry in os.scandir(snap.run_dir / ARCHIVE_DIR) if entry.is_dir()]
    except OSError:
        return {}
    found: dict[str, str] = {}
    for entry in archives:
        for name in names:
            if name not in found and os.path.exists(os.path.join(entry.path, name)):
                found[name] = entry.name
    return found


def _external_changes(prev: RunSnapshot, snap: RunSnapshot, now: float,
                      requested: Mapping[str, Any]) -> list[Notice]:
    """The trainer's own checkpoints reported since the last read (its format, not ours)."""
    seen = set(prev.external_checkpoints)
    new = [e for e in snap.external_checkpoints if e not in seen]
    out: list[Notice] = []
    for e in new[-LISTED:]:
        request = requested.get(e.path)
        waited = now - request.sent_at if request is not None else None
        out.append(Notice(now, landing_text(printable(e.path), e.step, external_details(e.size), waited),
                          "good" if request is not None else "info"))
    if len(new) > LISTED:
        out.insert(0, Notice(now, f"and {many(len(new) - LISTED, 'more external checkpoint')} reported in the same "
                                  "read", "info"))
    return out


def _unfinished(c: CheckpointInfo, snap: RunSnapshot, now: float) -> bool:
    """A ``.bin`` without its ``.json`` that the run's live trainer wrote moments ago: the
    ``.json`` follows it (docs/contract.md#the-resume-contract-step_nnnnnnjson), so it is not
    said as a foreign checkpoint
    landing. One that stays without it past :data:`UNFINISHED_S`, or came with no trainer
    running (copied in from another engine), is."""
    return (c.status == "foreign" and snap.trainer.state == "running"
            and abs(now - c.mtime) < UNFINISHED_S)


def _trainer_changes(prev: RunSnapshot, snap: RunSnapshot, now: float) -> list[Notice]:
    """The trainer started, exited, went stale, stalled or stepped again."""
    out: list[Notice] = []
    t0, t1 = prev.trainer, snap.trainer
    if (t0.state, t0.pid) != (t1.state, t1.pid):
        if t1.state == "running":
            out.append(Notice(now, f"trainer running: pid {t1.pid} verified", "good"))
        elif t0.state == "running" and t1.state == "stopped" and snap.error_stop is not None:
            out.append(Notice(now, error_stop_text(snap.error_stop), "error"))
        elif t0.state == "running" and t1.state == "stopped":
            final = snap.newest_checkpoint
            name = final.path.name if final else snap.external_checkpoints[-1].path if snap.external_checkpoints \
                else None
            out.append(Notice(now, f"trainer exited cleanly (pid {t0.pid} removed its record)"
                              + (f"; final checkpoint {printable(name)}" if name else ""), "good"))
            if final is not None:           # our checkpoint: --start resumes it (a run API loop resumes itself)
                out.append(Notice(now, f"to resume: andrea-console {printable(shlex.quote(str(snap.run_dir)))} --start"
                                       f" (it goes on from {printable(final.path.name)})", "info"))
        elif t0.state == "running" and t1.state == "stale":
            out.append(Notice(now, f"trainer pid {t0.pid} is gone without a clean exit: {t1.reason}", "error"))
        elif t1.state != "stopped":
            out.append(Notice(now, f"trainer {t1.label}: {t1.reason}", "warning"))
        else:
            out.append(Notice(now, "trainer stopped: " + t1.reason))
    if t1.stalled and not t0.stalled:
        out.append(Notice(now, f"trainer pid {t1.pid} STALLED: {stall_text(t1)}", "error"))
    elif t0.stalled and not t1.stalled and t1.state == "running":
        out.append(Notice(now, f"trainer pid {t1.pid} is stepping again", "good"))
    return out


def event_notice(ev: HistoryEvent) -> tuple[str, str] | None:
    """What a new history event means, as a notice's text and level (None: nothing to say)."""
    d = ev.data

    def field(key: str, default: str = "") -> str:
        # The event's fields are whatever the line held: shown printable, like every run-directory value.
        value = d.get(key)
        return printable(value) if value not in (None, "") else default

    def step_field(key: str) -> str:
        # A step the event names (the event's own where it names none), with thousands separators.
        value = d.get(key, ev.step)
        return "None" if value is None else format_counter(value)

    at = f" at step {ev.step:,}" if ev.step is not None else ""
    if ev.event in (EVENT_CHECKPOINT, EVENT_EXTERNAL_CHECKPOINT):
        return None                      # the checkpoint landing says it, with its status
    if ev.event == EVENT_RESUME:
        src = field("checkpoint") or field("path")
        return f"trainer resumed from step {step_field('from_step')}" + (f" ({src})" if src else ""), "info"
    if ev.event == EVENT_ZOMBIE:
        return f"trainer dropped zombie arm {field('arm', '?')}: {field('reason')}".rstrip(": "), "error"
    if ev.event == EVENT_PIVOT:
        return f"polish pivot{at}", "info"
    if ev.event == EVENT_CHECKPOINT_FAILED:
        return f"checkpoint FAILED{at}: {field('error', 'write error')}; the previous checkpoint is intact", "error"
    if ev.event == EVENT_WRITE_FAILED:
        return f"could not write {field('file', 'a file')}{at}: {field('error', 'write error')}", "warning"
    if ev.event == EVENT_STOP and d.get("reason") == "nonfinite":
        return (f"trainer STOPPED{at}: the run diverged ({field('in_a_row', '?')} non-finite steps in a row; "
                f"last good step {step_field('last_good_step')})"), "error"
    if ev.event == EVENT_STOP and is_error_stop(d.get("reason")):
        return f"trainer STOPPED{at} with an error ({field('reason')}; see trainer.log)", "error"
    if ev.event == EVENT_STOP and d.get("reason") == STOP_REQUEUE:
        return f"trainer stopped{at} for a SLURM requeue (the framework saved and requeued the job; the next " \
               "job resumes)", "info"
    if ev.event == EVENT_STOP:
        return f"trainer logged stop{at}" + (f" ({field('reason')})" if d.get("reason") else ""), "info"
    if ev.event == EVENT_SIGNAL:
        return f"trainer got {field('signal', 'a signal')}{at}", "info"
    if ev.event == EVENT_START:
        return f"trainer started{at}", "info"
    return f"{printable(ev.event)}{at}", "info"
