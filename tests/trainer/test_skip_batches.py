"""``--skip-batches N``: after a resume each arm's sampler skips the windows of its next N
batches, the same ones on every run; and the test-only loss fault that makes a spike."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import orjson

from rundir.layout import TRAINER_LOG, checkpoint_name, sidecar_name
from tests.trainer.trainer_runs import ROOT, events, run_trainer, step_lines, trainer_cmd, without_time
from trainer.data import ArmData, ArmSampler
from trainer.faults import LOSS_FAULT_ENV


def _arm(tmp_path: Path, text: str = "hello world, " * 40) -> ArmData:
    (tmp_path / "a.txt").write_text(text)
    return ArmData.load("a", "a.txt", tmp_path, block_size=8)


def test_skipped_windows_are_the_next_batches_a_sampler_would_draw(tmp_path):
    data = _arm(tmp_path)
    skipping, drawing = ArmSampler(data, 8, 4, seed=7), ArmSampler(data, 8, 4, seed=7)
    for _ in range(3):
        assert np.array_equal(skipping.next_windows(), drawing.next_windows())
    n = 2 * skipping.n_windows // 4 + 1                     # across epoch boundaries
    skipped = skipping.skip_batches(n)
    drawn = np.concatenate([drawing.next_windows() for _ in range(n)])
    assert np.array_equal(skipped, drawn) and len(skipped) == n * 4
    assert skipping.state_dict() == drawing.state_dict()    # and they go on alike
    assert np.array_equal(skipping.next_windows(), drawing.next_windows())
    assert len(skipping.skip_batches(0)) == 0


def _resumed_copy(base: Path, trainer_run, name: str, step: int) -> Path:
    run = trainer_run(name)
    for file in (checkpoint_name(step), sidecar_name(checkpoint_name(step))):
        (run / file).write_bytes((base / file).read_bytes())
    return run


def _sampler_states(run: Path, step: int) -> dict:
    return orjson.loads((run / sidecar_name(checkpoint_name(step))).read_bytes())["samplers"]


def test_skip_batches_is_reproducible_and_skips_exactly_n_batches_per_arm(trainer_run):
    base = trainer_run("base")
    r = run_trainer(base, "--max-steps", "60", "--checkpoint-every", "60")
    assert r.returncode == 0, r.stderr
    skipped_a, skipped_b, plain = (_resumed_copy(base, trainer_run, name, 60) for name in ("a", "b", "plain"))
    for run in (skipped_a, skipped_b):
        r = run_trainer(run, "--resume", checkpoint_name(60), "--skip-batches", "7", "--max-steps", "90")
        assert r.returncode == 0, r.stderr
    assert run_trainer(plain, "--resume", checkpoint_name(60), "--max-steps", "90").returncode == 0

    assert without_time(step_lines(skipped_a)) == without_time(step_lines(skipped_b))
    assert [s["loss"] for s in step_lines(skipped_a)] != [s["loss"] for s in step_lines(plain)]
    [resume] = events(skipped_a, "resume")
    assert resume["skip_batches"] == 7 and resume["from_step"] == 60
    assert "skips the windows of its next 7 batches" in (skipped_a / TRAINER_LOG).read_text()
    assert events(plain, "resume")[0]["skip_batches"] == 0

    # Each arm: the windows of 7 batches skipped, then one batch per pull: the sampler at
    # step 90 is where a sampler from step 60 stands after skip_batches(7) and those draws.
    before, after = _sampler_states(base, 60), _sampler_states(skipped_a, 90)
    pulls = {arm: sum(1 for s in step_lines(skipped_a) if s["arm"] == arm) for arm in before}
    for arm, state in before.items():
        data = ArmData.load(arm, state["source"], skipped_a, state["block_size"])
        sampler = ArmSampler(data, state["block_size"], state["batch_size"], seed=0)
        sampler.load_state_dict(state)
        sampler.skip_batches(7)
        for _ in range(pulls[arm]):
            sampler.next_windows()
        assert sampler.state_dict() == after[arm]
        assert after[arm]["windows_drawn"] == state["windows_drawn"] + (7 + pulls[arm]) * state["batch_size"]


def test_skip_batches_without_a_checkpoint_is_refused(trainer_run):
    run = trainer_run()
    r = run_trainer(run, "--skip-batches", "5", "--max-steps", "10")
    assert r.returncode == 2
    assert "--skip-batches needs a checkpoint to resume from" in r.stderr
    assert not (run / ".loss.json").exists()
    r = run_trainer(run, "--skip-batches", "-1")
    assert r.returncode == 2 and "--skip-batches" in r.stderr


def test_loss_fault_multiplies_the_loss_of_its_steps_only(trainer_run):
    clean, faulted = trainer_run("clean"), trainer_run("faulted")
    assert run_trainer(clean, "--max-steps", "25").returncode == 0
    r = subprocess.run(trainer_cmd(faulted, "--max-steps", "25"), cwd=ROOT, capture_output=True, text=True,
                       timeout=120, env={**os.environ, LOSS_FAULT_ENV: "20:3:8"})
    assert r.returncode == 0, r.stderr
    a, b = step_lines(clean), step_lines(faulted)
    assert [s["loss"] for s in a[:19]] == [s["loss"] for s in b[:19]]
    assert [b[i]["loss"] for i in (19, 20, 21)] == [8 * a[19]["loss"], b[20]["loss"], b[21]["loss"]]
    assert all(b[i]["loss"] > 4 * a[i]["loss"] for i in (19, 20, 21))
    assert b[22]["loss"] < 2 * a[22]["loss"]
