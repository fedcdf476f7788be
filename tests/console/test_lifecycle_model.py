"""A model-based test of a run's life: what happens to a run is written by a contract-following
writer, and after each rule every view's claims (the status's step and loss and speed, the
series table, the resume checks, --check's level, --json's history, checkpoints, external
checkpoints and pivots, the overview's row) must agree with a small reference model of what
is true.

Two kinds of run. An andrea-train run: the trainer's lines and events (train with its
checkpoint and eval cadence, SIGUSR1, a SIGTERM stop, a kill, a resume from the newest
checkpoint, a write killed mid-line, a full disk), the console's guided rollback (its
checkpoints after X set aside) and polish pivot (rundir/pivot_files.py's archive, journal and
run.toml, then the trainer's resume and ``pivot`` events). A run of the run API: a training
loop of its own (rundir.open_run) that logs a step in several calls, a step without loss,
saves its checkpoints over one file or to a new one each time, resumes from its newest, and
ends cleanly or with an error.

The trainer's start and resume events here carry no pid: there is no process to verify, so
the console cannot tell a running writer from one that is gone, and says neither."""

from __future__ import annotations

import atexit
import math
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from console.actions.alerts import check_report
from console.model.series_summary import series_row
from console.read.reader import RunReader
from console.read.run_summary import summarize_run
from console.text.overview_report import newest_of, trainer_label
from console.text.run_report import render_text, to_json
from rundir import LossHistoryWriter, RunConfig, open_run, write_checkpoint, write_run_config
from rundir.atomic import atomic_write_json
from rundir.config import engine_config_text, load_run_config
from rundir.layout import LOSS_JSON
from rundir.pivot_files import (
    PivotJournal,
    archive_sidecars,
    plan_policy,
    remove_journal,
    write_journal,
    write_new_policy,
)
from rundir.rollback_files import RollbackJournal, remove_rollback_journal, set_aside_checkpoints
from tests.mounts import fill, mount_tmpfs

TRAINER, RUN_API = "andrea-train", "run API"
CADENCE = 10                # the trainer's checkpoint_every (and eval_every, which follows it)
ARM = "stdlib-code"


def smooth_loss(step: int, segment: int) -> float:
    """A loss with no spike: each segment (a rollback starts one) a little apart."""
    return 3.0 - step / 1000 + segment / 10_000


_disk: list[Path | None] = []


def small_disk() -> Path | None:
    """A real 4 MiB tmpfs for the runs, mounted once (None where none can be: the full-disk
    rule is then left out)."""
    if not _disk:
        where = Path(tempfile.mkdtemp(prefix="lifecycle-")) / "disk"
        mounted = mount_tmpfs(where, "4m")
        if mounted:
            atexit.register(subprocess.run, ["umount", "-l", str(where)], capture_output=True)
        _disk.append(where if mounted else None)
    return _disk[0]


class RunLife(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.disk = small_disk()
        self.tmp = tempfile.TemporaryDirectory(dir=self.disk)
        self.run = Path(self.tmp.name) / "run"
        self.run.mkdir()
        self.writer: LossHistoryWriter | None = None
        self.clock = 0.0
        self.engine = TRAINER
        # The model: what the run holds now (step -> loss, None for a step without one; step
        # -> eval loss), where it is, whether a process is running and how the newest ended.
        self.losses: dict[int, float | None] = {}
        self.evals: dict[int, float] = {}
        self.head = 0
        self.segment = 0
        self.running = False
        self.fresh: set[int] = set()    # the steps the running process logged itself
        self.ended = "none"             # none (running, or gone without a stop) | clean | error
        self.started = False
        self.ours: set[int] = set()     # the trainer's complete checkpoints in the run directory
        self.externals: dict[str, int] = {}     # the run API's: path -> its newest step, oldest save first
        self.pivots: list[tuple[int, str]] = []     # the pivots the run stands on: (P, its archive)
        self.unreadable = 0             # torn lines a resumed writer ended (one unreadable line each)
        self.torn = 0                   # the bytes of a torn tail no writer has ended yet

    def teardown(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.tmp.cleanup()

    # -- how the writers write ----------------------------------------------------------------
    def _tick(self) -> float:
        """The writer's clock: never behind the wall clock (the run API stamps its lines with
        it) and never going back."""
        self.clock = max(self.clock + 0.001, time.time())
        return self.clock

    def _later(self) -> float:
        """An operation of the console's: a second later at least, so that two archives (named
        to the second) never share a name."""
        self.clock = max(self.clock + 1.0, time.time())
        return self.clock

    def _write(self, record: dict) -> None:
        assert self.writer is not None
        self.writer.append({**record, "time": self._tick()})

    def _new_process(self) -> None:
        """A trainer process starts: its own writer (which ends a torn line left before it)."""
        if self.writer is not None:
            self.writer.close()
        self.writer = LossHistoryWriter(self.run / LOSS_JSON)
        self.unreadable += 1 if self.torn else 0
        self.torn = 0
        self.running, self.ended, self.fresh = True, "none", set()

    def _step(self, step: int, loss: float | None, **more: float) -> None:
        self._write({"step": step, **({"loss": loss} if loss is not None else {}), "lr": 1e-3, **more})
        self.losses[step] = loss
        self.head = step
        self.fresh.add(step)

    def _trainer_step(self, step: int, loss: float) -> None:
        """One of andrea-train's steps: its line, and at the cadence an eval and a checkpoint."""
        self._step(step, loss, grad_norm=0.5, tokens=step * 128, arm=ARM)
        if step % CADENCE == 0:
            self.evals[step] = round(loss + 0.1, 6)
            self._write({"event": "eval", "step": step, "eval_loss": self.evals[step], "per_arm": {ARM: None},
                         "windows": 4})
            self._checkpoint("cadence")

    def _checkpoint(self, reason: str) -> None:
        """The trainer's checkpoint at the head: the .bin and .json, then the event."""
        weights = np.full(4, self.head, dtype=np.float32)
        write_checkpoint(self.run, self.head, weights, weights, weights)
        self._write({"event": "checkpoint", "step": self.head, "path": f"step_{self.head:06d}.bin",
                     "reason": reason})
        self.ours.add(self.head)

    def _signal_stop(self) -> None:
        """SIGTERM: the final checkpoint at the last step, the stop event, the process gone."""
        self._write({"event": "signal", "step": self.head, "signal": "SIGTERM", "action": "stop"})
        if self.head not in self.ours:          # never a second checkpoint at a step that has one
            self._checkpoint("final")
        self._write({"event": "stop", "step": self.head, "reason": "signal"})
        self.running, self.ended = False, "clean"

    def _resume_from(self, step: int, **more: object) -> None:
        """A new trainer process resumes from checkpoint ``step`` (the resume event, as
        andrea-train writes it: the steps after it up to the head are run again)."""
        self._new_process()
        rerun = {"from": step + 1, "to": self.head} if self.head > step else None
        self._write({"event": "resume", "step": step, "from_step": step, "checkpoint": f"step_{step:06d}.bin",
                     "exact": True, "fresh": [], "reset": [], "rerun": rerun, **more})

    # -- what happens to an andrea-train run ------------------------------------------------------
    @initialize(engine=st.sampled_from([TRAINER, RUN_API]))
    def make_run(self, engine: str) -> None:
        self.engine = engine
        if engine == TRAINER:
            write_run_config(self.run, RunConfig.from_preset("micro"))
        else:
            (self.run / "run.toml").write_text(engine_config_text("run", {"lr": 1e-3}))

    @precondition(lambda self: self.engine == TRAINER and not self.started)
    @rule()
    def start(self) -> None:
        self._new_process()
        self._write({"event": "start", "step": 0, "seed": 0, "preset": "micro"})
        self.started = True

    @precondition(lambda self: self.engine == TRAINER and self.started and not self.running)
    @rule()
    def resume(self) -> None:
        """From the newest checkpoint (with none, a new start at step 0): the steps after it
        are run again bit for bit (the same losses, evals and checkpoints)."""
        back = max((s for s in self.ours if s <= self.head), default=0)
        old_head = self.head
        if back:
            self._resume_from(back)
        else:
            self._new_process()
            self._write({"event": "start", "step": 0, "seed": 0, "preset": "micro"})
        for step in range(back + 1, old_head + 1):
            loss = self.losses.get(step)
            self._trainer_step(step, loss if loss is not None else smooth_loss(step, self.segment))

    @precondition(lambda self: self.running)
    @rule(n=st.integers(1, 15))
    def train(self, n: int) -> None:
        for step in range(self.head + 1, self.head + n + 1):
            self._trainer_step(step, smooth_loss(step, self.segment))

    @precondition(lambda self: self.running and self.head > 0 and self.head not in self.ours)
    @rule()
    def checkpoint_on_sigusr1(self) -> None:
        self._write({"event": "signal", "step": self.head, "signal": "SIGUSR1", "action": "checkpoint"})
        self._checkpoint("signal")

    @precondition(lambda self: self.running)
    @rule()
    def stop_on_sigterm(self) -> None:
        self._signal_stop()

    @precondition(lambda self: self.running)
    @rule()
    def killed(self) -> None:
        """kill -9: nothing more is written."""
        self.running = False

    @precondition(lambda self: self.running)
    @rule(cut=st.integers(1, 30))
    def killed_mid_line(self, cut: int) -> None:
        """A write cut by the writer's end (a crash of its host, a network filesystem's
        partial write): the first bytes of the next step's line, no newline."""
        line = f'{{"step": {self.head + 1}, "loss": 2.9, "lr": 0.001, "time": {self._tick()}}}'.encode()
        with open(self.run / LOSS_JSON, "ab") as fh:
            fh.write(line[:cut])
        self.torn += cut
        self.running = False

    @precondition(lambda self: self.running and self.disk is not None)
    @rule()
    def disk_fills(self) -> None:
        """The disk fills while the trainer trains: the lines that fit are logged; the append
        that does not raises (a short write taken back, or none at all), and the trainer stops
        there (SafetyStop: it would train unrecorded), its stop event unwritable."""
        assert self.disk is not None
        filler = fill(self.disk)
        try:
            for step in range(self.head + 1, self.head + 1000):
                loss = smooth_loss(step, self.segment)
                try:
                    self._write({"step": step, "loss": loss, "lr": 1e-3, "grad_norm": 0.5, "arm": ARM})
                except OSError:
                    break                           # the step was not logged
                self.losses[step], self.head = loss, step
                if step % CADENCE == 0:
                    break                           # its checkpoint does not fit, nor its failure's event
            else:
                raise AssertionError("a full disk took 1,000 lines")
        finally:
            filler.unlink()
        self.running = False

    @precondition(lambda self: self.running and any(s < self.head for s in self.ours))
    @rule(data=st.data())
    def rollback(self, data: st.DataObject) -> None:
        """The console's guided rollback to checkpoint X: the trainer stopped, the checkpoints
        after X set aside, the trainer resumed from X skipping batches (another segment of
        losses); the steps, evals and any pivot after X are abandoned."""
        self.rollback_to(data.draw(st.sampled_from(sorted(s for s in self.ours if s < self.head)), label="to"))

    def rollback_to(self, to: int) -> None:
        journal = RollbackJournal(stage="planned", started=self.clock, to_step=to, skip_batches=5)
        self._signal_stop()
        journal.from_step, journal.final_step = self.head, self.head
        journal.advance("stopped")
        set_aside_checkpoints(self.run, journal, now=self._later())
        journal.advance("set_aside")
        self.ours = {s for s in self.ours if s <= to}
        self._resume_from(to, skip_batches=5)
        self._write({"event": "rollback", "step": to, "from_step": journal.from_step, "to_step": to,
                     "skip_batches": 5, "spike": None, "archive": journal.archive, "set_aside": journal.set_aside})
        self._finish_journal(journal, "rollback.json")
        remove_rollback_journal(self.run)
        self.losses = {s: loss for s, loss in self.losses.items() if s <= to}
        self.evals = {s: loss for s, loss in self.evals.items() if s <= to}
        self.pivots = [(p, archive) for p, archive in self.pivots if p <= to]
        self.head, self.segment, self.fresh = to, self.segment + 1, set()

    @precondition(lambda self: self.running and self.head > 0)
    @rule(cap=st.sampled_from([0.7, 0.75, 0.8]))
    def pivot(self, cap: float) -> None:
        """The console's polish pivot (docs/contract.md#the-polish-pivot): the audit checkpoint
        (SIGUSR1), the trainer stopped at P (SIGTERM), the sidecars archived, the new caps in
        run.toml, the trainer resumed from P with a fresh bandit writing the pivot event."""
        config = load_run_config(self.run)
        new = plan_policy(config, caps={ARM: cap})
        journal = PivotJournal(stage="planned", started=self.clock, old_policy=config.policy(),
                               new_policy=new.policy())
        write_journal(self.run, journal)
        if self.head not in self.ours:
            self.checkpoint_on_sigusr1()
        journal.audit_step = self.head
        journal.advance("audit_checkpoint")
        write_journal(self.run, journal)
        self._signal_stop()
        journal.final_step = p = self.head
        journal.advance("stopped")
        write_journal(self.run, journal)
        archive = archive_sidecars(self.run, journal, now=self._later())
        journal.advance("archived", str(archive.relative_to(self.run)))
        write_journal(self.run, journal)
        write_new_policy(self.run, new)
        journal.advance("config_written")
        write_journal(self.run, journal)
        self._resume_from(p, fresh_bandit=True)
        self._write({"event": "pivot", "step": p, "archive": journal.archive, "policy": journal.new_policy,
                     "old_policy": journal.old_policy, "dropped": [], "audit_step": journal.audit_step})
        self._finish_journal(journal, "pivot.json")
        remove_journal(self.run)
        assert journal.archive is not None
        self.pivots.append((p, journal.archive))

    def _finish_journal(self, journal: PivotJournal | RollbackJournal, record: str) -> None:
        """The last stage, as the console's runner files it: the journal marked resumed becomes
        the archive's record."""
        journal.advance("resumed")
        assert journal.archive is not None
        atomic_write_json(self.run / journal.archive / record, {**journal.to_dict(), "finished": self._tick()})

    # -- what happens to a run of the run API ----------------------------------------------------
    @precondition(lambda self: self.engine == RUN_API)
    @rule(n=st.integers(1, 12), over_one_file=st.booleans(), again=st.booleans(), without_loss=st.booleans(),
          fails=st.booleans())
    def run_api_loop(self, n: int, over_one_file: bool, again: bool, without_loss: bool, fails: bool) -> None:
        """One process of a training loop of its own: it resumes from its newest checkpoint
        (from scratch without one), trains ``n`` steps (logging the last one's val_loss in a
        second call, and one step without loss), saves ``ckpt.pt`` (or ``ckpt_STEP.pt``), and
        ends; ``fails``: a ValueError in the loop after its save."""
        back = self.externals[next(reversed(self.externals))] if self.externals else 0
        try:
            with open_run(self.run) as run:
                if self.started:
                    run.resumed(back, self.run / "ckpt.pt")
                self.started, self.fresh = True, set()
                rerun = [(s, self.losses[s]) for s in range(back + 1, self.head + 1) if s in self.losses]
                new = [(s, smooth_loss(s, 0)) for s in range(self.head + 1, self.head + n + 1)]
                for step, loss in rerun + new:
                    run.log(step, loss=loss if not (without_loss and step == new[0][0]) else None, lr=1e-3)
                    self.losses[step], self.head = (None if without_loss and step == new[0][0] else loss), step
                    self.fresh.add(step)
                if again:                           # run.log(s, val_loss=...) after run.log(s, loss=...)
                    run.log(self.head, val_loss=2.5)
                path = self.run / ("ckpt.pt" if over_one_file else f"ckpt_{self.head}.pt")
                path.write_bytes(b"weights at step %d" % self.head)
                run.checkpoint_saved(self.head, path)
                self.externals.pop(path.name, None)
                self.externals[path.name] = self.head
                if fails:
                    raise ValueError("the loop failed")
        except ValueError:
            pass
        self.ended = "error" if fails else "clean"

    # -- what every view must say ------------------------------------------------------------
    @invariant()
    def views_agree_with_the_model(self) -> None:
        if not self.started:
            return
        snap, _ = RunReader(self.run, now=lambda: self.clock).read()
        h = snap.history
        with_loss = [s for s, loss in sorted(self.losses.items()) if loss is not None and s <= self.head]
        assert h.last_step == (self.head if self.losses else None)
        if with_loss:
            assert h.last_loss == self.losses[with_loss[-1]]
        assert h.nonfinite == 0                                 # an absent loss is never non-finite
        assert (h.bad_lines, h.torn_tail) == (self.unreadable, self.torn)     # never a cut line of a full disk
        assert not [c for c in h.resume_checks if c.verdict == "diverged"], [c.text() for c in h.resume_checks]
        if h.n_steps:
            row = series_row(h, "loss")                         # the series table: never an abandoned step
            assert row.last_step == (with_loss[-1] if with_loss else None)
            assert (row.last == self.losses[with_loss[-1]]) if with_loss else math.isnan(row.last)
            if self.evals:
                newest = max(self.evals)
                assert (series_row(h, "eval_loss").last_step, series_row(h, "eval_loss").last) == \
                    (newest, self.evals[newest])
        stopped = self.ended != "none"
        if stopped:
            assert h.steps_per_s is None and h.eta_s is None
        self._json_agrees(snap)
        self._once_agrees(snap)
        self._check_agrees(snap)
        self._overview_agrees(stopped)

    def _json_agrees(self, snap) -> None:
        report = to_json(snap)
        assert report["history"]["last_step"] == (self.head if self.losses else None)
        assert [(c["step"], c["status"]) for c in report["checkpoints"]] == [(s, "complete") for s in sorted(self.ours)]
        assert [(e["path"], e["step"]) for e in report["external_checkpoints"]] == list(self.externals.items())
        assert [(p["step"], p["archive"]) for p in report["pivots"]] == self.pivots
        assert report["pending_pivot"] is None and report["pending_rollback"] is None

    def _once_agrees(self, snap) -> None:
        """``--once``: the step line at the head, and steps an earlier segment left past it said
        (a rollback to step 0 leaves no step line at the head)."""
        lines = render_text(snap, now=self.clock, width=80).splitlines()
        step = f"{self.head:,}" if self.losses else "-"
        assert [line for line in lines if line.startswith("step ")][0].split()[1] == step
        ahead = [line for line in lines if "an earlier segment's" in line]
        assert len(ahead) == (1 if snap.history.steps_ahead else 0), ahead

    def _check_agrees(self, snap) -> None:
        code, lines = check_report(snap)
        expected = 2 if self.ended == "error" else 1 if self.unreadable or self.torn else 0
        assert code == expected, lines
        if self.ended == "error":
            assert lines[0] == (f"error: the trainer stopped with an error at step {self.head:,}: "
                                "ValueError (see its log)")

    def _overview_agrees(self, stopped: bool) -> None:
        row = summarize_run(self.run, now=self.clock)
        assert row.last_step == (self.head if self.losses else None)
        if stopped:
            assert row.steps_per_s is None
        assert trainer_label(row) == ("finished" if self.ended == "clean" else "stopped")
        newest = newest_of(row)
        expected = max(self.ours) if self.ours else self.externals[next(reversed(self.externals))] \
            if self.externals else None
        assert (newest.step if newest else None) == expected


def play(engine: str, *moves: tuple) -> None:
    """One life of a run, rule by rule (a rule's name and its arguments), every view checked
    against the model after each: the cases the search found, kept as examples."""
    life = RunLife()
    try:
        life.make_run(engine)
        for name, *args in moves:
            getattr(life, name)(*args)
            life.views_agree_with_the_model()
    finally:
        life.teardown()


def test_a_pivot_abandoned_by_a_rollback_and_done_again_at_the_same_step_is_the_one_listed():
    """The rollback to 10 abandons the pivot at 12; the pivot done again at 12 is the run's
    (the console dropped pivots by step: both or neither)."""
    play(TRAINER, ("start",), ("train", 12), ("pivot", 0.7), ("train", 3), ("rollback_to", 10), ("train", 2),
         ("pivot", 0.75), ("train", 1))


def test_the_overview_is_at_the_step_a_rollback_went_back_to():
    """Until the resumed trainer logs a step, the overview's row named the abandoned head."""
    play(TRAINER, ("start",), ("train", 14), ("rollback_to", 10))


def test_a_rollback_to_a_checkpoint_at_step_0():
    """No step line at or before the head: ``--once`` named the steps ahead "after step None"
    and raised."""
    play(TRAINER, ("start",), ("stop_on_sigterm",), ("resume",), ("train", 5), ("rollback_to", 0))


def test_a_run_that_stopped_with_an_error_is_not_finished():
    """The overview said "finished" of any stop event, an error's too."""
    play(RUN_API, ("run_api_loop", 3, True, False, False, True))


def test_a_full_disk_then_a_torn_tail_then_resumes():
    play(TRAINER, ("start",), ("train", 5), ("disk_fills",), ("resume",), ("train", 4), ("killed_mid_line", 9),
         ("resume",), ("train", 2))


def test_a_loop_saving_over_one_file_and_to_new_ones():
    play(RUN_API, ("run_api_loop", 4, True, True, True, False), ("run_api_loop", 3, False, False, False, False),
         ("run_api_loop", 2, True, False, False, False))


RunLife.TestCase.settings = settings(max_examples=100, stateful_step_count=20, deadline=None)
TestRunLife = RunLife.TestCase
