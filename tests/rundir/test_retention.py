"""Retention (docs/contract.md#retention): which checkpoints a prune keeps, and the prune itself."""

from __future__ import annotations

import os
import time

import numpy as np
import orjson
import pytest

from rundir import LossHistory, ResumeState, list_checkpoints, write_checkpoint
from rundir.checkpoint import sidecar_path
from rundir.layout import LOSS_JSON, checkpoint_name
from rundir.pivot_files import PivotJournal, write_journal
from rundir.retention import (
    EVERY,
    FOREIGN,
    INVALID,
    LAST,
    NEWEST,
    PIVOT,
    RESUMED,
    ROLLBACK,
    RetentionPolicy,
    finish_interrupted_prune,
    plan_retention,
    protected_steps,
    remove_checkpoints,
)


def write_steps(run_dir, steps, n=16):
    w = np.arange(n, dtype=np.float32)
    for step in steps:
        write_checkpoint(run_dir, step, w, w, w, ResumeState(config={}))


def kept(verdicts):
    return {v.info.step: v.keep for v in verdicts if v.keep}


def test_the_issue_example_keeps_exactly_500_1000_1100_1200(tmp_path):
    write_steps(tmp_path, range(100, 1201, 100))
    verdicts = plan_retention(list_checkpoints(tmp_path), RetentionPolicy(keep_last=3, keep_every=500))
    assert kept(verdicts) == {500: (EVERY,), 1000: (LAST, EVERY), 1100: (LAST,), 1200: (NEWEST, LAST)}


def test_foreign_invalid_pivot_rollback_and_resumed_checkpoints_are_never_removed(tmp_path):
    write_steps(tmp_path, range(100, 801, 100))
    sidecar_path(tmp_path / checkpoint_name(200)).unlink()                     # foreign: no .json
    with open(tmp_path / checkpoint_name(300), "r+b") as fh:                   # invalid: truncated
        fh.truncate(100)
    write_journal(tmp_path, PivotJournal("stopped", time.time(), {}, {}, audit_step=400, final_step=500))
    rollback = LossHistory(tmp_path / LOSS_JSON)
    (tmp_path / LOSS_JSON).write_bytes(orjson.dumps({"event": "rollback", "step": 800, "to_step": 600}) + b"\n")
    rollback.refresh()
    protected = protected_steps(tmp_path, rollback.events)
    assert protected == {400: PIVOT, 500: PIVOT, 600: ROLLBACK}
    verdicts = plan_retention(list_checkpoints(tmp_path), RetentionPolicy(keep_last=1), protected, resumed_step=700)
    assert kept(verdicts) == {200: (FOREIGN,), 300: (INVALID,), 400: (PIVOT,), 500: (PIVOT,), 600: (ROLLBACK,),
                              800: (NEWEST, LAST)}
    # Resumed from 800 with nothing newer: kept as resumed too; from 700, 800 is newer and complete.
    assert RESUMED in kept(plan_retention(list_checkpoints(tmp_path), RetentionPolicy(1), {}, resumed_step=800))[800]


def test_keep_last_zero_keeps_everything_and_newest_survives_any_policy(tmp_path):
    write_steps(tmp_path, (10, 20, 30))
    assert len(kept(plan_retention(list_checkpoints(tmp_path), RetentionPolicy(keep_last=0)))) == 3
    assert set(kept(plan_retention(list_checkpoints(tmp_path), RetentionPolicy(keep_last=1, keep_every=7)))) == {30}


def test_remove_checkpoints_frees_both_files(tmp_path):
    write_steps(tmp_path, (10, 20, 30))
    doomed = [v for v in plan_retention(list_checkpoints(tmp_path), RetentionPolicy(1)) if v.removed_next]
    size = sum(v.bytes for v in doomed)
    result = remove_checkpoints(tmp_path, doomed)
    assert result.steps == (10, 20) and result.bytes_freed == size and not result.errors
    assert sorted(os.listdir(tmp_path)) == [checkpoint_name(30), checkpoint_name(30)[:-4] + ".json"]


def test_an_interrupted_prune_is_finished_only_for_what_it_listed(tmp_path):
    write_steps(tmp_path, (10, 20, 30, 40))
    when = time.time() + 1
    history = tmp_path / LOSS_JSON
    history.write_bytes(orjson.dumps({"event": "prune", "step": 40, "time": when, "steps": [10, 20, 30]}) + b"\n")
    for step in (10, 20):                 # killed after their .json went, before the .bin
        sidecar_path(tmp_path / checkpoint_name(step)).unlink()
    sidecar_path(tmp_path / checkpoint_name(40)).unlink()          # a bare .bin the prune never listed
    reader = LossHistory(history)
    reader.refresh()
    removed = finish_interrupted_prune(tmp_path, reader.events)
    assert sorted(p.name for p in removed) == [checkpoint_name(10), checkpoint_name(20)]
    names = sorted(os.listdir(tmp_path))
    assert checkpoint_name(30) in names and checkpoint_name(40) in names       # whole / never listed


def test_a_bin_written_again_after_the_prune_is_not_its_leftover(tmp_path):
    write_steps(tmp_path, (10,))
    sidecar_path(tmp_path / checkpoint_name(10)).unlink()
    history = tmp_path / LOSS_JSON
    history.write_bytes(orjson.dumps({"event": "prune", "step": 10, "time": time.time() - 60, "steps": [10]}) + b"\n")
    reader = LossHistory(history)
    reader.refresh()
    assert finish_interrupted_prune(tmp_path, reader.events) == []


@pytest.mark.parametrize("policy, text", [(RetentionPolicy(5, 0), "keep the last 5"),
                                          (RetentionPolicy(0, 1000), "keep all and every multiple of 1,000 steps")])
def test_policy_description(policy, text):
    assert policy.describe() == text
