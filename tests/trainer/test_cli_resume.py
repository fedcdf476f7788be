"""Black box: ``andrea-train`` stopped and re-run reaches the bytes of a run that never stopped."""

from __future__ import annotations

import pytest

from rundir import inspect_checkpoint, read_samples, read_state, verify_trainer
from rundir.layout import checkpoint_name
from tests.trainer.trainer_runs import events, run_trainer, step_lines, without_time


@pytest.mark.parametrize("async_checkpoint", [True, False])
def test_300_in_one_go_equals_200_then_300(trainer_run, async_checkpoint):
    straight = trainer_run("straight", async_checkpoint=async_checkpoint)
    stopped = trainer_run("stopped", async_checkpoint=async_checkpoint)
    r = run_trainer(straight, "--max-steps", "300")
    assert r.returncode == 0, r.stderr
    r = run_trainer(stopped, "--max-steps", "200")
    assert r.returncode == 0, r.stderr
    assert not (stopped / "step_000300.bin").exists()
    r = run_trainer(stopped, "--max-steps", "300")          # the same command again, further
    assert r.returncode == 0, r.stderr

    assert (straight / "step_000300.bin").read_bytes() == (stopped / "step_000300.bin").read_bytes()
    lines_straight = [s for s in step_lines(straight) if s["step"] > 200]
    lines_stopped = [s for s in step_lines(stopped) if s["step"] > 200]
    assert len(lines_stopped) == 100
    assert without_time(lines_straight) == without_time(lines_stopped)
    # No gap: every step once, in order.
    assert [s["step"] for s in step_lines(stopped)] == list(range(1, 301))

    [resume] = events(stopped, "resume")
    assert resume["from_step"] == 200 and resume["checkpoint"] == "step_000200.bin"
    assert resume["exact"] is True and resume["fresh"] == [] and resume["rerun"] is None
    assert resume["overrides"] == {"max_steps": 300}
    assert [e["reason"] for e in events(stopped, "checkpoint")] == ["cadence", "final", "final"]
    assert [e["reason"] for e in events(stopped, "stop")] == ["max_steps", "max_steps"]
    assert len(events(stopped, "start")) == 1


@pytest.mark.parametrize("async_checkpoint", [True, False])
def test_a_cadence_checkpoint_resumes_exactly(trainer_run, async_checkpoint):
    """Resumed from step 100's cadence checkpoint (written in the background by default),
    the run reaches step 300's bytes as one that never stopped."""
    straight = trainer_run("straight", async_checkpoint=async_checkpoint)
    assert run_trainer(straight, "--max-steps", "300", "--keep-last", "0").returncode == 0
    resumed = trainer_run("resumed", async_checkpoint=async_checkpoint)
    for suffix in (".bin", ".json"):
        name = checkpoint_name(100)[:-4] + suffix
        (resumed / name).write_bytes((straight / name).read_bytes())
    [cadence] = [e for e in events(straight, "checkpoint") if e["step"] == 100]
    assert cadence["reason"] == "cadence" and cadence["background"] is async_checkpoint
    r = run_trainer(resumed, "--max-steps", "300")
    assert r.returncode == 0, r.stderr
    assert events(resumed, "resume")[0]["exact"] is True
    name = checkpoint_name(300)
    assert (straight / name).read_bytes() == (resumed / name).read_bytes()


def test_sidecars_after_a_run(trainer_run):
    run = trainer_run(sample_every=50)
    r = run_trainer(run, "--max-steps", "150")
    assert r.returncode == 0, r.stderr
    assert verify_trainer(run).state == "stopped"          # .trainer.json removed on a clean exit
    state = read_state(run)
    assert state.ok and state.value.step == 150
    assert set(state.value.arms) == {"prose", "code", "notes"}
    assert sum(a.pulls for a in state.value.arms.values()) == 150
    samples = read_samples(run).value
    assert [(s.step, s.arm) for s in samples] == [(step, arm) for step in (50, 100, 150)
                                                  for arm in ("prose", "code", "notes")]
    assert all(s.temperature == 0.8 and s.completion for s in samples)
    log = (run / "trainer.log").read_text()
    assert "step 150 loss" in log and "checkpoint step_000150.bin (final); held training" in log
    # Plain lines on a pipe.
    assert "step 10 loss" in r.stdout


def test_rerun_at_max_steps_is_nothing_to_do(trainer_run):
    run = trainer_run()
    assert run_trainer(run, "--max-steps", "20").returncode == 0
    before = (run / ".loss.json").read_bytes()
    r = run_trainer(run, "--max-steps", "20")
    assert r.returncode == 0 and "nothing to do" in r.stderr
    assert (run / ".loss.json").read_bytes() == before


def test_fresh_bandit_keeps_weights_and_history_and_restarts_the_bandit(trainer_run):
    run = trainer_run()
    assert run_trainer(run, "--max-steps", "40").returncode == 0
    weights_at_40 = inspect_checkpoint(run / "step_000040.bin")
    assert weights_at_40.status == "complete"
    r = run_trainer(run, "--max-steps", "60", "--fresh-bandit")
    assert r.returncode == 0, r.stderr
    resume = events(run, "resume")[-1]
    # Asked for, the fresh bandit is a reset on purpose, not a loss: the rest resumes exactly.
    assert resume["fresh_bandit"] is True and resume["exact"] is True and resume["fresh"] == []
    assert resume["reset"] == ["the bandit (--fresh-bandit: the new caps and floors start from uniform probabilities)"]
    said = r.stdout + r.stderr
    assert "NOT exactly" not in said
    assert ("resume from step_000040.bin exactly: weights, optimizer moments, data samplers and RNG restored bit "
            "for bit; reset on purpose: the bandit (--fresh-bandit" in said)
    state = read_state(run).value
    assert state.phase["started_step"] == 40 and state.phase["updates"] == 20
    assert sum(a.pulls for a in state.arms.values()) == 20
    assert [s["step"] for s in step_lines(run)] == list(range(1, 61))
