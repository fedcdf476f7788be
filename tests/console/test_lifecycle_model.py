"""A model-based test of a run's life: what happens to a run (train, a step logged in several
calls, a step without loss, a clean stop, a crash, a resume, a rollback) is written by a
contract-following writer, and after each rule every view's claims (the status's step and
loss and speed, the series table, the resume checks, --check's level, the overview's row)
must agree with a small reference model of what is true."""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from console.actions.alerts import check_report
from console.model.series_summary import series_row
from console.read.reader import RunReader
from rundir import LossHistoryWriter
from rundir.config import engine_config_text
from rundir.run_summary import summarize_run


def smooth_loss(step: int, segment: int) -> float:
    """A loss with no spike: each segment (a rollback starts one) a little apart."""
    return 3.0 - step / 1000 + segment / 10_000


class RunLife(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = tempfile.TemporaryDirectory()
        self.run = Path(self.tmp.name) / "run"
        self.run.mkdir()
        (self.run / "run.toml").write_text(engine_config_text("run", {"lr": 1e-3}))    # as the run API writes it
        self.writer = LossHistoryWriter(self.run / ".loss.json")
        self.clock = 1_000_000.0
        # The model: what the run holds now (step -> loss, None for a step without one), where
        # it is, whether a process is running and how the newest one ended.
        self.losses: dict[int, float | None] = {}
        self.head = 0
        self.segment = 0
        self.running = False
        self.fresh: set[int] = set()    # the steps the running process logged itself
        self.ended = "none"             # none | clean | error
        self.started = False

    def teardown(self) -> None:
        self.writer.close()
        self.tmp.cleanup()

    def _write(self, record: dict) -> None:
        self.clock += 1.0
        self.writer.append({**record, "time": self.clock})

    def _step(self, step: int, loss: float | None, **more: float) -> None:
        self._write({"step": step, **({"loss": loss} if loss is not None else {}), "lr": 1e-3, **more})
        self.losses[step] = loss
        self.head = step
        self.fresh.add(step)

    # -- what happens to a run ------------------------------------------------------------
    @precondition(lambda self: not self.running)
    @rule()
    def start_or_resume(self) -> None:
        if not self.started:
            self._write({"event": "start", "step": 0})
            self.started = True
        else:                               # from the checkpoint of its stop: nothing to run again
            self._write({"event": "resume", "step": self.head, "from_step": self.head, "rerun": None})
        self.running, self.ended, self.fresh = True, "none", set()

    @precondition(lambda self: self.running)
    @rule(n=st.integers(1, 15))
    def train(self, n: int) -> None:
        for step in range(self.head + 1, self.head + n + 1):
            self._step(step, smooth_loss(step, self.segment))

    @precondition(lambda self: self.running and self.head in self.fresh)
    @rule()
    def log_the_step_again(self) -> None:
        """run.log(s, val_loss=...) after run.log(s, loss=...): one line with both."""
        self._step(self.head, self.losses[self.head], val_loss=2.5)

    @precondition(lambda self: self.running)
    @rule()
    def a_step_without_loss(self) -> None:
        self._step(self.head + 1, None)

    @precondition(lambda self: self.running)
    @rule(crashed=st.booleans())
    def stop(self, crashed: bool) -> None:
        self._write({"event": "stop", "step": self.head, "reason": "error: ValueError" if crashed else "finished"})
        self.running, self.ended = False, "error" if crashed else "clean"

    @precondition(lambda self: self.running and self.head > 2)
    @rule(data=st.data())
    def crash_and_resume(self, data) -> None:
        """Killed; the next process resumes from an earlier step and runs the steps after it
        again, bit for bit (the same losses)."""
        back = data.draw(st.integers(1, self.head - 1))
        old_head = self.head
        self._write({"event": "resume", "step": back, "from_step": back, "rerun": {"from": back + 1, "to": old_head}})
        self.fresh = set()
        for step in range(back + 1, old_head + 1):
            self._step(step, self.losses[step])

    @precondition(lambda self: self.running and self.head > 2)
    @rule(data=st.data())
    def rollback(self, data) -> None:
        """A guided rollback to an earlier step: the steps after it are abandoned; the resumed
        trainer skips batches (another segment of losses)."""
        to = data.draw(st.integers(1, self.head - 1))
        self._write({"event": "rollback", "step": to, "from_step": self.head, "to_step": to, "skip_batches": 5})
        self._write({"event": "resume", "step": to, "from_step": to, "skip_batches": 5, "rerun": None})
        for step in [s for s in self.losses if s > to]:
            del self.losses[step]
        self.head, self.segment, self.fresh = to, self.segment + 1, set()

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
        assert not [c for c in h.resume_checks if c.verdict == "diverged"], [c.text() for c in h.resume_checks]
        if h.n_steps:
            row = series_row(h, "loss")                         # the series table: never an abandoned step
            assert row.last_step == (with_loss[-1] if with_loss else None)
            assert (row.last == self.losses[with_loss[-1]]) if with_loss else math.isnan(row.last)
        stopped = self.ended != "none"
        if stopped:
            assert h.steps_per_s is None and h.eta_s is None
            assert summarize_run(self.run).steps_per_s is None
        code, lines = check_report(snap)
        assert code == (2 if self.ended == "error" else 0), lines
        if self.ended == "error":
            assert lines == [f"error: the trainer stopped with an error at step {self.head:,}: ValueError (see its log)"]
            assert [p.level for p in snap.problems] == ["error"]


RunLife.TestCase.settings = settings(max_examples=30, stateful_step_count=12, deadline=None)
TestRunLife = RunLife.TestCase
