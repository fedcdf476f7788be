"""Subprocess: SIGUSR1 checkpoints and continues; SIGTERM checkpoints and exits 0; the
re-run continues without a gap to the bytes of a run that never stopped; a signal that
lands during a checkpoint write is honoured after the write, never by abandoning it."""

from __future__ import annotations

import os
import signal
import subprocess

import pytest

from rundir import inspect_checkpoint, read_trainer_record
from rundir.checkpoint import SLOW_WRITE_ENV
from tests.trainer.trainer_runs import (
    ROOT,
    events,
    run_trainer,
    start_trainer,
    step_lines,
    stop_process,
    trainer_cmd,
    wait_for,
    without_time,
)


def last_step(run_dir) -> int:
    lines = step_lines(run_dir)
    return lines[-1]["step"] if lines else 0


def test_usr1_continues_term_exits_and_rerun_matches_a_run_that_never_stopped(trainer_run):
    run = trainer_run("signalled")
    # No cadence checkpoint within reach: every checkpoint here is one a signal asked for.
    proc = start_trainer(run, "--checkpoint-every", "100000")
    try:
        wait_for(lambda: last_step(run) >= 20, what="20 steps")
        record, _ = read_trainer_record(run)
        assert record is not None and record.pid == proc.pid

        os.kill(proc.pid, signal.SIGUSR1)
        os.kill(proc.pid, signal.SIGUSR1)            # two in a row: at most one checkpoint per step
        [usr1] = wait_for(lambda: events(run, "checkpoint"), what="the SIGUSR1 checkpoint")
        assert usr1["reason"] == "signal"
        assert inspect_checkpoint(run / usr1["path"]).status == "complete"
        assert [e["signal"] for e in events(run, "signal")][:1] == ["SIGUSR1"]
        # It keeps training.
        wait_for(lambda: last_step(run) >= usr1["step"] + 20, what="training after SIGUSR1")
        assert proc.poll() is None
        assert len({e["step"] for e in events(run, "checkpoint")}) == len(events(run, "checkpoint"))

        os.kill(proc.pid, signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        stop_process(proc)
    assert proc.returncode == 0, err
    assert not (run / ".trainer.json").exists()
    stopped_at = last_step(run)
    final = events(run, "checkpoint")[-1]
    assert final["step"] == stopped_at and final["reason"] == "signal"     # the last completed step
    assert events(run, "stop")[-1]["reason"] == "signal"
    assert inspect_checkpoint(run / final["path"]).status == "complete"

    target = stopped_at + 30
    r = run_trainer(run, "--max-steps", str(target))
    assert r.returncode == 0, r.stderr
    assert [s["step"] for s in step_lines(run)] == list(range(1, target + 1))     # no gap, no repeat
    assert events(run, "resume")[-1]["from_step"] == stopped_at and events(run, "resume")[-1]["exact"]

    never_stopped = trainer_run("never-stopped")
    r = run_trainer(never_stopped, "--max-steps", str(target))
    assert r.returncode == 0, r.stderr
    name = f"step_{target:06d}.bin"
    assert (run / name).read_bytes() == (never_stopped / name).read_bytes()
    assert without_time(step_lines(run)) == without_time(step_lines(never_stopped))


def test_second_trainer_on_the_same_directory_is_refused(trainer_run):
    run = trainer_run()
    proc = start_trainer(run)
    try:
        wait_for(lambda: last_step(run) >= 1, what="the first trainer training")
        record_before = (run / ".trainer.json").read_bytes()
        r = run_trainer(run, "--max-steps", "5")
        assert r.returncode == 2
        assert r.stderr.count("\n") == 1 and "another trainer is training this run directory" in r.stderr
        assert f"pid {proc.pid}" in r.stderr
        assert (run / ".trainer.json").read_bytes() == record_before
        assert proc.poll() is None
    finally:
        stop_process(proc)
    assert proc.returncode == 0


@pytest.mark.parametrize("async_checkpoint", [False, True])
def test_signal_during_a_checkpoint_write_is_honoured_after_it(trainer_run, async_checkpoint):
    run = trainer_run(async_checkpoint=async_checkpoint)
    # The library's test hook slows the checkpoint write so the signal lands inside it.
    env = {**os.environ, SLOW_WRITE_ENV: "0.3"}
    proc = subprocess.Popen(trainer_cmd(run, "--checkpoint-every", "50"), cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: any(p.name.startswith(".tmp-step_000050.bin") for p in run.iterdir()),
                 what="the step-50 checkpoint being written")
        os.kill(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        stop_process(proc)
    assert proc.returncode == 0, err
    [sig] = events(run, "signal")
    stopped_at = last_step(run)
    assert sig["signal"] == "SIGTERM" and sig["step"] == stopped_at and sig["during_checkpoint"] is True
    assert events(run, "stop")[-1]["reason"] == "signal"
    assert inspect_checkpoint(run / "step_000050.bin").status == "complete"
    if async_checkpoint:
        # The loop trained on while step 50's checkpoint was written in the background: the
        # stop waited for that write, then checkpointed the last completed step.
        assert stopped_at > 50
        assert [(e["step"], e["reason"]) for e in events(run, "checkpoint")] == \
            [(50, "cadence"), (stopped_at, "signal")]
    else:
        assert stopped_at == 50 and [(e["step"], e["reason"]) for e in events(run, "checkpoint")] == [(50, "cadence")]
    assert not any(p.name.startswith(".tmp-") for p in run.iterdir())
