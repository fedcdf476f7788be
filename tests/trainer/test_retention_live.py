"""Retention with a real trainer: the policy after every durable checkpoint, --prune, and
what no policy removes (pivot, resumed and foreign checkpoints)."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from rundir import RunLock, list_checkpoints, write_checkpoint
from rundir.checkpoint import sidecar_path
from rundir.layout import TRAINER_LOG, checkpoint_name
from rundir.pivot_files import PivotJournal, write_journal
from tests.trainer.trainer_runs import ROOT, events, run_trainer


def steps_on_disk(run_dir):
    return sorted(c.step for c in list_checkpoints(run_dir))


@pytest.mark.parametrize("async_checkpoint", [True, False])
def test_keep_last_3_keep_every_500_leaves_500_1000_1100_1200(trainer_run, async_checkpoint):
    run = trainer_run(async_checkpoint=async_checkpoint)
    r = run_trainer(run, "--max-steps", "1200", "--checkpoint-every", "100", "--keep-last", "3",
                    "--keep-every", "500", timeout=300)
    assert r.returncode == 0, r.stderr
    assert steps_on_disk(run) == [500, 1000, 1100, 1200]
    assert all(c.status == "complete" for c in list_checkpoints(run))
    prunes = events(run, "prune")
    removed = sorted(s for e in prunes for s in e["steps"])
    assert removed == [100, 200, 300, 400, 600, 700, 800, 900]
    assert all(e["bytes"] > 0 and e["policy"] == {"keep_last": 3, "keep_every": 500} for e in prunes)
    log = (run / TRAINER_LOG).read_text()
    assert "prune: removed step_000100.json and step_000100.bin" in log
    # A prune follows the checkpoint that made it possible (never before a newer one is durable).
    checkpoints = {e["step"] for e in events(run, "checkpoint")}
    assert all(e["step"] in checkpoints for e in prunes)


def test_pivot_resumed_and_foreign_checkpoints_survive(trainer_run):
    run = trainer_run()
    assert run_trainer(run, "--max-steps", "40", "--checkpoint-every", "10", "--keep-last", "0").returncode == 0
    assert steps_on_disk(run) == [10, 20, 30, 40]
    # A foreign .bin (another engine's, no .json) at step 5, and a pivot that names 10 and 20.
    w = np.zeros(list_checkpoints(run)[0].n_params, np.float32)
    write_checkpoint(run, 5, w, w, w)
    sidecar_path(run / checkpoint_name(5)).unlink()
    write_journal(run, PivotJournal("stopped", 0.0, {}, {}, audit_step=10, final_step=20))
    # Resume from 30 (not the newest) with keep-last 1: 30 stays until a newer checkpoint is complete.
    r = run_trainer(run, "--resume", str(run / checkpoint_name(30)), "--max-steps", "60", "--checkpoint-every", "10",
                    "--keep-last", "1")
    assert r.returncode == 0, r.stderr
    assert steps_on_disk(run) == [5, 10, 20, 60]
    assert [c.status for c in list_checkpoints(run)] == ["foreign", "complete", "complete", "complete"]


def prune(run, *flags):
    return subprocess.run([sys.executable, "-m", "trainer", str(run), "--prune", *flags], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def test_prune_dry_run_then_prune_without_a_trainer(trainer_run):
    run = trainer_run()
    assert run_trainer(run, "--max-steps", "50", "--checkpoint-every", "10", "--keep-last", "0").returncode == 0
    before = sorted(os.listdir(run))
    r = prune(run, "--dry-run", "--keep-last", "2")
    assert r.returncode == 0, r.stderr
    assert sorted(os.listdir(run)) == before                  # a dry run removes nothing
    assert "would remove: not kept by the policy" in r.stdout and "newest, last" in r.stdout
    assert "3 checkpoints would be removed" in r.stdout
    r = prune(run, "--keep-last", "2")
    assert r.returncode == 0, r.stderr
    assert steps_on_disk(run) == [40, 50]
    assert "removed 3 checkpoints" in r.stdout
    assert events(run, "prune")[-1]["steps"] == [10, 20, 30]
    assert "prune (andrea-train --prune): removed 3 checkpoints" in (run / TRAINER_LOG).read_text()
    # The run resumes from its newest checkpoint as if nothing happened.
    assert run_trainer(run, "--max-steps", "60", "--checkpoint-every", "10").returncode == 0


def test_prune_refuses_while_a_trainer_holds_the_lock(trainer_run):
    run = trainer_run()
    assert run_trainer(run, "--max-steps", "20", "--checkpoint-every", "10", "--keep-last", "0").returncode == 0
    with RunLock(run):
        r = prune(run, "--keep-last", "1")
    assert r.returncode == 2 and "another trainer is training this run directory" in r.stderr
    assert steps_on_disk(run) == [10, 20]


def test_prune_needs_no_torch(trainer_run):
    run = trainer_run()
    assert run_trainer(run, "--max-steps", "20", "--checkpoint-every", "10", "--keep-last", "0").returncode == 0
    from tests.console.test_no_torch import NO_TORCH

    code = NO_TORCH + "from trainer.entry import main; sys.exit(main([sys.argv[1], '--prune', '--keep-last', '1']))"
    r = subprocess.run([sys.executable, "-c", code, str(run)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert steps_on_disk(run) == [20]
