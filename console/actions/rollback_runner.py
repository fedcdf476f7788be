"""The guided rollback past a loss spike, shared by the rollback screen (``r``) and ``--rollback``.

Built like the pivot (:mod:`console.actions.pivot_runner`): a plan that writes nothing, one
confirmation (which says what training is lost), then three steps, each checking its
precondition and verifying its result, recorded in the rollback journal
(``.rollback.json``) as they complete, so that a rollback interrupted anywhere is
completed by the next ``--rollback``:

1. SIGTERM: the trainer writes its final checkpoint (kept) and exits; verified gone.
2. The checkpoint X is verified (checksum); every checkpoint after X is set aside into
   ``archive/rollback_X_<UTC>/`` (moved, not deleted); X is then the newest.
3. Relaunch ``andrea-train RUN_DIR --resume step_X.bin --skip-batches N`` under the launch
   the run uses (run.toml's ``run.launch``, SLURM included); it appends a ``rollback`` event
   and the steps from X + 1. Done when it runs verified and the event is in the history.

The plan: X is ``--to STEP``'s complete checkpoint, else the newest complete checkpoint
at least ``alerts.rollback_margin`` steps before the newest spike's start. N defaults to
the batches from X to the spike's end, so that the resumed run draws none of the windows
that led into the spike.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rundir import (
    CheckpointInfo,
    ConfigError,
    LossHistory,
    checkpoint_path,
    inspect_checkpoint,
    latest_resumable,
    list_checkpoints,
    load_run_config,
    newest_complete_since,
    verify_checksum,
    verify_trainer,
)
from rundir.abandoned import abandoned_mask, live_pivot_steps
from rundir.config import AlertsConfig
from rundir.layout import EVENT_ROLLBACK, LOSS_JSON, ROLLBACK_RECORD, RUN_TOML
from rundir.pivot_files import read_journal as read_pivot_journal
from rundir.pivot_files import unfinished_text
from rundir.rollback_files import (
    Loss,
    RollbackError,
    RollbackJournal,
    check_skip_batches,
    choose_checkpoint,
    lost_training,
    read_rollback_journal,
    set_aside_checkpoints,
    write_rollback_journal,
)
from rundir.step_rows import search_steps
from rundir.text import counted

from ..model.findings import LISTED
from ..model.spikes import Spike, find_spikes
from . import supervise
from .guided_runner import JournalledRunner
from .relaunch import StepFailed, relaunch_and_wait

STEP_TITLES = {
    "1": "stop the trainer (SIGTERM)",
    "2": "set aside the checkpoints after step X",
    "3": "resume from step X, skipping N batches",
}


@dataclass
class RollbackRequest:
    """``--to STEP`` (None: before the newest spike), ``--skip-batches N`` (None: to the
    spike's end), and the spike detection's ``--spike-window``/``--spike-k`` (None: run.toml's)."""

    to_step: int | None = None
    skip_batches: int | None = None
    window: int | None = None
    k: float | None = None


@dataclass
class RollbackOutcome:
    ok: bool
    message: str
    to_step: int | None = None
    archive: str | None = None


@dataclass(frozen=True)
class RollbackProposal:
    """What a rollback would do, before anything is changed."""

    checkpoint: CheckpointInfo
    spike: Spike | None
    skip_batches: int
    loss: Loss
    margin: int
    pivots_past: tuple[int, ...] = ()      # the pivots after X the rollback goes back past

    @property
    def to_step(self) -> int:
        return self.checkpoint.step

    def describe(self) -> str:
        why = (f"the newest spike starts at step {self.spike.start:,} (peak {self.spike.peak_loss:.4g} at step "
               f"{self.spike.peak_step:,}, baseline {self.spike.baseline:.4g}); " if self.spike else "")
        return (f"{why}roll back to {self.checkpoint.path.name} (step {self.to_step:,}), each arm skipping its next "
                f"{counted(self.skip_batches, 'batch', 'batches')}; {self.loss.describe()}{self.pivot_warning()}")

    def pivot_warning(self) -> str:
        """``; WARNING: ...`` when X is before a pivot: the checkpoint holds the policy from before it."""
        if not self.pivots_past:
            return ""
        at = ", ".join(f"{p:,}" for p in self.pivots_past)
        return (f"; WARNING: step {self.to_step:,} is before the pivot at step {at}: its checkpoint holds the policy "
                "from before the pivot (caps, floors, arms), while run.toml holds the pivot's, so the trainer "
                "resumes NOT exactly and the pivot is abandoned")


def newest_spike(history: LossHistory, window: int, k: float) -> Spike | None:
    """The newest loss spike of the history, or None; a spike among the steps an earlier
    rollback or resume left behind is not a reason to go back again."""
    spikes = find_spikes(history.step, history.loss, window, k)
    abandoned = abandoned_mask(history.step, history.time, history.events, history.head_step)
    if abandoned is not None:
        index = search_steps(history.step, [s.start for s in spikes])
        spikes = [s for s, i in zip(spikes, index) if not abandoned[i]]
    return spikes[-1] if spikes else None


def propose_rollback(run_dir: str | os.PathLike[str], request: RollbackRequest) -> RollbackProposal:
    """Choose X and N and say what is lost; reads only. Raises :class:`RollbackError` (or
    ``ConfigError``) saying why there is nothing to roll back to."""
    run_dir = Path(run_dir)
    history = LossHistory(run_dir / LOSS_JSON)
    history.refresh()
    if not os.path.lexists(run_dir / RUN_TOML):
        raise RollbackError(_not_this_trainers_run(run_dir, history, request))
    alerts = load_run_config(run_dir).alerts
    spike = newest_spike(history, request.window or alerts.window, request.k or alerts.k)
    if request.to_step is not None and (isinstance(request.to_step, bool) or request.to_step < 0):
        raise RollbackError.about_choices(f"{{to}} {request.to_step!r}: expected a step number >= 0")
    checkpoints = list_checkpoints(run_dir)
    try:
        info = choose_checkpoint(checkpoints, spike_start=spike.start if spike else None,
                                 margin=alerts.rollback_margin, to_step=request.to_step)
    except RollbackError as err:
        foreign = sum(c.status == "foreign" for c in checkpoints)
        if not foreign or any(c.status == "complete" for c in checkpoints):
            raise
        here = "the checkpoint here is" if foreign == 1 else f"the {foreign:,} checkpoints here are"
        raise RollbackError(f"{err}; {here} foreign: {NEEDS_OWN_CHECKPOINT}") from None
    last = history.head_step
    if last is None or last <= info.step:
        raise RollbackError(f"the run is at step {'none' if last is None else f'{last:,}'}: nothing after "
                            f"step {info.step:,} to roll back")
    if request.skip_batches is not None:
        skip = check_skip_batches(request.skip_batches)
    else:
        skip = spike.end - info.step if spike is not None and spike.end > info.step else 0
    loss = lost_training(history, info.step, info.sidecar.tokens_seen if info.sidecar else None)
    past = tuple(p for p in live_pivot_steps(history.events) if info.step < p <= last)
    return RollbackProposal(info, spike, skip, loss, alerts.rollback_margin, past)


# Why another engine's run cannot be rolled back: what a resume reads.
NEEDS_OWN_CHECKPOINT = ("a rollback resumes andrea-train from one of its own complete checkpoints (the .bin with "
                        "its .json, which holds the step, the data position and the model config), under the run's "
                        "run.toml")


def _not_this_trainers_run(run_dir: Path, history: LossHistory, request: RollbackRequest) -> str:
    """What was found in a run without a run.toml (another engine's), and why it cannot be
    rolled back (the spike found with the default detection, or --spike-window/--spike-k)."""
    defaults = AlertsConfig()
    spike = newest_spike(history, request.window or defaults.window, request.k or defaults.k) \
        if history.last_step is not None else None
    checkpoints = list_checkpoints(run_dir)
    found = f"found {spike_span(spike)}" if spike else "found no loss spike"
    foreign = sum(c.status == "foreign" for c in checkpoints)
    of_them = "all" if foreign == len(checkpoints) else f"{foreign:,} of them"
    files = f"{counted(len(checkpoints), 'checkpoint')}, {of_them} foreign (weights, m and v only)" if foreign else \
        counted(len(checkpoints), 'checkpoint')
    return (f"{found} and {files}; but there is no run.toml, so this is not andrea-train's run (another "
            f"engine's, or one not started yet), and {NEEDS_OWN_CHECKPOINT}")


def spike_span(spike: Spike) -> str:
    """``the loss spike at steps 110,000–110,039 (peak 9.5 at step 110,002)``."""
    steps = f"step {spike.start:,}" if spike.end == spike.start else f"steps {spike.start:,}–{spike.end:,}"
    return f"the loss spike at {steps} (peak {spike.peak_loss:.4g} at step {spike.peak_step:,})"


def set_aside_text(steps: list[int]) -> str:
    """``steps 60, 80, 100``; past LISTED of them their count and span (a long run sets aside
    hundreds, and the step's line must stay a line or two at 80x24, its outcome in view)."""
    if len(steps) <= LISTED:
        return "steps " + (", ".join(f"{s:,}" for s in steps) or "none")
    return f"{len(steps):,} of them, steps {min(steps):,} to {max(steps):,}"


class RollbackRunner(JournalledRunner):
    """Runs (or completes) one rollback. ``confirm`` is asked once, before anything changes,
    with the proposal; ``report`` receives a live status line per step; ``cancelled`` is
    polled while waiting."""

    OUTCOME = RollbackOutcome
    FAILURES = (StepFailed, RollbackError, ConfigError)
    request: RollbackRequest

    def _run(self) -> RollbackOutcome:
        journal = self._plan()
        if journal is None:
            return RollbackOutcome(False, "cancelled: nothing changed (training goes on)")
        if not journal.done("stopped"):
            self._stop(journal)
        if not journal.done("set_aside"):
            self._set_aside(journal)
        self._resume(journal)
        skipping = counted(journal.skip_batches, "batch", "batches")
        return RollbackOutcome(True, f"rollback complete: the trainer resumed from step {journal.to_step:,} skipping "
                                     f"{skipping} per arm; checkpoints after it in {journal.archive}/",
                               journal.to_step, journal.archive)

    def _plan(self) -> RollbackJournal | None:
        journal, error = read_rollback_journal(self.run_dir)
        if error:
            raise StepFailed(f"{error}; remove it to start a new rollback")
        if journal is not None:
            asked = self.request
            if (asked.to_step is not None and asked.to_step != journal.to_step) or \
                    (asked.skip_batches is not None and asked.skip_batches != journal.skip_batches):
                raise StepFailed(f"an interrupted rollback to step {journal.to_step:,} "
                                 f"(skipping {journal.skip_batches:,} "
                                 f"batches; last completed stage: {journal.stage}) is pending: run --rollback "
                                 "again without --to and --skip-batches to complete it")
            self.report("plan", f"completing the interrupted rollback to step {journal.to_step:,} (last completed "
                                f"stage: {journal.stage})")
            return journal
        pivot, pivot_error = read_pivot_journal(self.run_dir)
        if pivot is not None or pivot_error:
            raise StepFailed(f"{unfinished_text(pivot)}; finish it first: nothing changed")
        proposal = propose_rollback(self.run_dir, self.request)
        self.report("plan", proposal.describe())
        skipping = counted(proposal.skip_batches, "batch", "batches")
        if not self.confirm(f"Roll back to step {proposal.to_step:,}, skipping {skipping} per arm? "
                            f"{proposal.loss.describe()}."):
            return None
        journal = RollbackJournal(stage="planned", started=time.time(), to_step=proposal.to_step,
                                  skip_batches=proposal.skip_batches,
                                  spike=proposal.spike.to_dict() if proposal.spike else None)
        journal.advance("planned", proposal.describe())
        write_rollback_journal(self.run_dir, journal)
        return journal

    def _stop(self, journal: RollbackJournal) -> None:
        v = verify_trainer(self.run_dir)
        if v.ok:
            sent, _ = self._send_stop_and_wait("1", after_timeout="; run --rollback again to continue")
            final = newest_complete_since(self.run_dir, sent.baseline)
            journal.final_step = final.step if final is not None else None
        elif v.state not in ("stopped", "stale"):
            raise StepFailed(f"step 1: {supervise.refusal(v)}; the rollback never signals an unverified process")
        if verify_trainer(self.run_dir).ok:                    # verified: nothing trains the run now
            raise StepFailed("step 1: a trainer runs the directory again; run --rollback again to continue")
        history = LossHistory(self.run_dir / LOSS_JSON)
        history.refresh()
        journal.from_step = history.head_step
        journal.advance("stopped", f"newest step {journal.from_step}, final checkpoint {journal.final_step}")
        write_rollback_journal(self.run_dir, journal)
        newest = "none" if journal.from_step is None else f"{journal.from_step:,}"
        if v.ok:
            final = f"; its final checkpoint at step {journal.final_step:,} is kept" \
                if journal.final_step is not None else ""
            self.report("1", f"stopped at step {newest}{final}")
        else:
            self.report("1", f"no trainer running, nothing to stop; the run is at step {newest}")

    def _set_aside(self, journal: RollbackJournal) -> None:
        x = journal.to_step
        target = inspect_checkpoint(checkpoint_path(self.run_dir, x))
        problem = target.reason if target.status != "complete" else verify_checksum(target)
        if problem:
            raise StepFailed(f"step 2: {target.path.name} cannot be resumed from ({problem}); nothing was moved; "
                             "the trainer is stopped: restart it with andrea-console --start")
        dest = set_aside_checkpoints(self.run_dir, journal)
        newest = latest_resumable(self.run_dir)
        if newest is None or newest.step != x:                  # verified: X is now the newest
            raise StepFailed(f"step 2: after setting aside, the newest checkpoint is "
                             f"{newest.path.name if newest else 'none'}, not step {x:,}; run --rollback again")
        journal.advance("set_aside", str(dest.relative_to(self.run_dir)))
        write_rollback_journal(self.run_dir, journal)
        moved = set_aside_text(journal.set_aside)
        self.report("2", f"checkpoints after step {x:,} ({moved}) moved to {journal.archive}/")

    def _resume(self, journal: RollbackJournal) -> None:
        checkpoint = checkpoint_path(self.run_dir, journal.to_step)
        relaunch_and_wait(self.run_dir, journal, lambda: write_rollback_journal(self.run_dir, journal),
                          ["--resume", str(checkpoint), "--skip-batches", str(journal.skip_batches)],
                          arrived=lambda history: rollback_event(history, journal) is not None,
                          report=lambda text, under_way=False: self.report("3", text, under_way=under_way),
                          launching=f"launching the trainer from {checkpoint.name} skipping "
                                    f"{counted(journal.skip_batches, 'batch', 'batches')} per arm ...",
                          awaited="the rollback", step="step 3", timeout=self.timeout, cancelled=self.cancelled,
                          confirm_launch=self.confirm,
                          retry="run --rollback again to retry step 3")
        self._file_finished_journal(journal, ROLLBACK_RECORD, journal.to_step)
        self.report("3", f"running again from step {journal.to_step:,}")


def rollback_event(history: LossHistory, journal: RollbackJournal) -> Any:
    """The ``rollback`` event the trainer wrote for this journal (same archive, step and
    skip), or None."""
    for ev in reversed(history.events):
        if ev.event == EVENT_ROLLBACK and ev.data.get("archive") == journal.archive:
            if ev.data.get("to_step") == journal.to_step and ev.data.get("skip_batches") == journal.skip_batches:
                return ev
    return None
