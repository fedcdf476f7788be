"""The guided polish pivot (docs/contract.md#the-polish-pivot), shared by the pivot screen and ``--pivot``.

Six steps, each checking its precondition and verifying its result, recorded in the
pivot journal (``.pivot.json``) as they complete, so that a pivot interrupted anywhere
(the console killed, the operator cancelling, the trainer dying) is found by the next
pivot and completed, or rolled back with :func:`rollback_pivot`:

1. SIGUSR1: the audit checkpoint; wait until it is complete.
2. SIGTERM (after a confirmation): the trainer's final checkpoint at its last completed
   step P is the one resumed from; wait for the exit.
3. Archive ``.samples.json`` and ``.state.json`` (with the previous ``run.toml`` and a
   ``pivot.json``) into ``archive/pivot_P_<UTC>/``.
4. ``.loss.json`` stays in place, untouched.
5. The new caps and floors into ``run.toml``.
6. Relaunch ``andrea-train --resume step_P.bin --fresh-bandit`` detached; it writes a
   ``pivot`` event and continues at P+1. Done when it runs verified and the event is in
   the history.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from rundir import (
    ConfigError,
    LossHistory,
    RunConfig,
    checkpoint_path,
    latest_resumable,
    load_run_config,
    verify_trainer,
)
from rundir.layout import CHECKPOINT_SIGNAL, EVENT_PIVOT, LOSS_JSON, PIVOT_RECORD
from rundir.pivot_files import (
    PivotError,
    PivotJournal,
    archive_sidecars,
    plan_policy,
    policy_text,
    read_journal,
    remove_journal,
    rollback_archive,
    unfinished_text,
    write_journal,
    write_new_policy,
)

from ..read.landing import landed_text
from . import supervise
from .guided_runner import JournalledRunner
from .relaunch import StepFailed, relaunch_and_wait

STEP_TITLES = {
    "1": "audit checkpoint (SIGUSR1)",
    "2": "stop the trainer (SIGTERM)",
    "3": "archive .samples.json and .state.json",
    "4": "keep .loss.json in place",
    "5": "write the new caps and floors",
    "6": "resume from step P with a fresh bandit",
}


@dataclass
class PivotRequest:
    """The new policy: caps and floors per arm, arms to drop."""

    caps: dict[str, float] = field(default_factory=dict)
    floors: dict[str, float] = field(default_factory=dict)
    drop: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.caps or self.floors or self.drop)


@dataclass
class PivotOutcome:
    ok: bool
    message: str
    final_step: int | None = None
    archive: str | None = None


class PivotFailed(StepFailed):
    """A step could not complete; the message says which and what state the run is in."""


class PivotRunner(JournalledRunner):
    """Runs (or resumes) one pivot. ``confirm`` is asked before the trainer is stopped;
    ``report`` receives a live status line per step; ``cancelled`` is polled while waiting."""

    OUTCOME = PivotOutcome
    FAILURES = (StepFailed, PivotError, ConfigError)
    request: PivotRequest

    # -- the sequence ----------------------------------------------------------------
    def _run(self) -> PivotOutcome:
        config = load_run_config(self.run_dir)
        journal, new_config = self._plan(config)
        if not journal.done("audit_checkpoint"):
            self._audit(journal)
        if not journal.done("stopped"):
            if not self._stop(journal):
                remove_journal(self.run_dir)
                return PivotOutcome(False, "cancelled before the trainer was stopped: nothing changed "
                                           "(the audit checkpoint stays, training goes on)")
        p = journal.final_step
        if not journal.done("archived"):
            dest = archive_sidecars(self.run_dir, journal)
            journal.advance("archived", str(dest.relative_to(self.run_dir)))
            write_journal(self.run_dir, journal)
        self.report("3", f"archived to {journal.archive}/")
        self.report("4", f"{LOSS_JSON} left in place, untouched")
        if not journal.done("config_written"):
            write_new_policy(self.run_dir, new_config)
            journal.advance("config_written")
            write_journal(self.run_dir, journal)
        self.report("5", "run.toml: " + policy_text(journal.new_policy))
        self._resume(journal)
        return PivotOutcome(True, f"pivot complete: the trainer resumed from step {p:,} with a fresh bandit; "
                                  f"archive {journal.archive}/", p, journal.archive)

    def _plan(self, config: RunConfig) -> tuple[PivotJournal, RunConfig]:
        journal, error = read_journal(self.run_dir)
        if error:
            raise PivotFailed(f"{error}; remove it, or roll back with --pivot-rollback")
        if journal is None:
            new_config = plan_policy(config, self.request.caps, self.request.floors, self.request.drop)
            journal = PivotJournal(stage="planned", started=time.time(), old_policy=config.policy(),
                                   new_policy=new_config.policy(), dropped=list(self.request.drop))
            journal.advance("planned", policy_text(journal.new_policy))
            write_journal(self.run_dir, journal)
            self.report("plan", "new policy: " + policy_text(journal.new_policy))
            return journal, new_config
        if journal.done("config_written"):
            new_config = config
        else:
            new_config = plan_policy(config, journal.new_policy["caps"], journal.new_policy["floors"], journal.dropped)
        if not self.request.empty and not _request_matches(self.request, journal):
            raise PivotFailed(f"an interrupted pivot (stopped after '{journal.stage}') is pending with policy "
                              f"{policy_text(journal.new_policy)}: run the pivot again without new caps or "
                              f"floors to complete it, or roll it back with --pivot-rollback")
        self.report("plan", f"resuming the interrupted pivot (last completed stage: {journal.stage}); "
                            f"policy {policy_text(journal.new_policy)}")
        return journal, new_config

    def _audit(self, journal: PivotJournal) -> None:
        v = verify_trainer(self.run_dir)
        if v.ok:
            self.report("1", "SIGUSR1 sent; waiting for the checkpoint ...", under_way=True)
            sent = supervise.send(self.run_dir, CHECKPOINT_SIGNAL)
            if not sent.ok:
                raise PivotFailed(f"step 1: {sent.message}")
            wait = supervise.wait_for_checkpoint(self.run_dir, sent, self.timeout, self.cancelled)
            if (info := wait.info) is None:
                why = wait.why or landed_text(wait) + (": no audit checkpoint left" if wait.pruned else
                                                       ": in the trainer's own format, none of andrea-train's")
                raise PivotFailed(f"step 1: {why}; the pivot stopped before anything changed")
            journal.audit_step = info.step
            self.report("1", f"landed at step {info.step:,}")
        elif v.state in ("stopped", "stale"):
            self.report("1", "no trainer running: the newest complete checkpoint is the audit point")
        else:
            raise PivotFailed(f"step 1: {supervise.refusal(v)}; the pivot never signals an unverified process")
        journal.advance("audit_checkpoint", f"step {journal.audit_step}")
        write_journal(self.run_dir, journal)

    def _stop(self, journal: PivotJournal) -> bool:
        v = verify_trainer(self.run_dir)
        if v.ok:
            assert v.record is not None
            if not self.confirm(f"Stop trainer pid {v.record.pid}? It writes its final checkpoint and exits."):
                self.report("2", "cancelled: the trainer keeps running")
                return False
            sent, description = self._send_stop_and_wait("2", PivotFailed)
            final = supervise.stop_checkpoint(self.run_dir, sent)
            if final is None:
                raise PivotFailed(f"step 2: the trainer died instead of checkpointing ({description}); "
                                  "nothing was archived; run the pivot again to continue from the newest "
                                  "complete checkpoint")
        elif v.state in ("stopped", "stale"):
            final = latest_resumable(self.run_dir)
            if final is None or final.status != "complete":
                raise PivotFailed("step 2: no trainer is running and there is no complete checkpoint to pivot from")
        else:
            raise PivotFailed(f"step 2: {supervise.refusal(v)}")
        journal.final_step = final.step
        journal.advance("stopped", f"P = {final.step}")
        write_journal(self.run_dir, journal)
        self.report("2", f"stopped; final checkpoint at step P = {final.step:,}")
        return True

    def _resume(self, journal: PivotJournal) -> None:
        p = journal.final_step
        assert p is not None
        checkpoint = checkpoint_path(self.run_dir, p)
        relaunch_and_wait(self.run_dir, journal, lambda: write_journal(self.run_dir, journal),
                          ["--resume", str(checkpoint), "--fresh-bandit"],
                          arrived=lambda history: _pivot_event(history, journal),
                          report=lambda text, under_way=False: self.report("6", text, under_way=under_way),
                          launching=f"launching the trainer from {checkpoint.name} with a fresh bandit ...",
                          awaited="the pivot", step="step 6", timeout=self.timeout, cancelled=self.cancelled,
                          confirm_launch=self.confirm,
                          retry="run the pivot again to retry step 6, or roll it back with --pivot-rollback")
        self._file_finished_journal(journal, PIVOT_RECORD, p)
        self.report("6", f"running again from step {p:,}, bandit fresh under the new policy")


def _request_matches(request: PivotRequest, journal: PivotJournal) -> bool:
    caps, floors = journal.new_policy.get("caps", {}), journal.new_policy.get("floors", {})
    return (all(caps.get(arm) == value for arm, value in request.caps.items())
            and all(floors.get(arm) == value for arm, value in request.floors.items())
            and set(request.drop) <= set(journal.dropped))


def _pivot_event(history: LossHistory, journal: PivotJournal) -> bool:
    return any(e.event == EVENT_PIVOT and e.data.get("archive") == journal.archive for e in reversed(history.events))


def rollback_pivot(run_dir: str | os.PathLike[str]) -> PivotOutcome:
    """Undo an interrupted pivot that has not resumed the trainer: archived files and the
    previous run.toml go back, the journal is removed. The trainer is not restarted."""
    run_dir = Path(run_dir)
    journal, error = read_journal(run_dir)
    if error:
        remove_journal(run_dir)
        return PivotOutcome(True, f"removed an unreadable pivot journal ({error}); nothing else changed")
    if journal is None:
        return PivotOutcome(False, "no interrupted pivot to roll back")
    if verify_trainer(run_dir).ok and journal.done("config_written"):
        return PivotOutcome(False, "the trainer already runs under the new policy: stop it before rolling back")
    restored = rollback_archive(run_dir, journal)
    remove_journal(run_dir)
    what = ", ".join(restored) if restored else "nothing had been archived"
    return PivotOutcome(True, f"rolled back the pivot from stage '{journal.stage}': restored {what}",
                        journal.final_step)


def pending_pivot(run_dir: str | os.PathLike[str]) -> str | None:
    """The one line of an interrupted pivot (:func:`rundir.pivot_files.unfinished_text`, as the
    problems and the overview say it), for the pivot screen, or None."""
    journal, error = read_journal(run_dir)
    if error:
        return error
    return unfinished_text(journal) if journal is not None else None


def parse_assignments(items: list[str], what: str) -> dict[str, float]:
    """``ARM=X`` strings into a mapping; raises ValueError naming the bad item."""
    out = {}
    for item in items:
        arm, sep, value = item.partition("=")
        if not sep or not arm:
            raise ValueError(f"--{what} {item!r}: expected ARM=VALUE")
        try:
            out[arm] = float(value)
        except ValueError:
            raise ValueError(f"--{what} {item!r}: {value!r} is not a number") from None
    return out

