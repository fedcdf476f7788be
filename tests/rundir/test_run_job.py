"""The run API in a job of several processes (rundir/job.py), without a process group: the
rank read from the launcher's environment, a member that joins rank 0's directory writing
nothing, a member no rank 0 of its launch waits for refused in one line, and a loop with
no process group told in one line what it needs. (The job itself, under torchrun:
tests/console/test_run_api_ddp.py.)"""

from __future__ import annotations

import os

import pytest

from rundir import RunError, SlurmPlacement, open_run, read_trainer_record
from rundir.job import JobError, JobRanks, job_ranks
from rundir.layout import TRAINER_JSON, rank_record_name
from rundir.ranks import read_ranks


def test_the_rank_comes_from_the_launchers_environment():
    assert job_ranks({}) == JobRanks()
    assert job_ranks({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1"}) == JobRanks(1, 2, 1, "RANK/WORLD_SIZE")
    assert job_ranks({"RANK": "0", "WORLD_SIZE": "1"}) == JobRanks()
    srun = {"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0", "SLURM_PROCID": "3", "SLURM_STEP_NUM_TASKS": "4",
            "SLURM_LOCALID": "1", "SLURM_NTASKS": "4"}
    assert job_ranks(srun) == JobRanks(3, 4, 1, "SLURM_PROCID/SLURM_STEP_NUM_TASKS")
    batch = {k: v for k, v in srun.items() if k != "SLURM_STEP_ID"} | {"SLURM_PROCID": "0"}
    assert job_ranks(batch) == JobRanks()             # the batch script's process is one process
    assert job_ranks({**srun, "RANK": "0", "WORLD_SIZE": "2"}).source == "RANK/WORLD_SIZE"   # torchrun under srun
    with pytest.raises(JobError, match="RANK='2' is not a rank of WORLD_SIZE=2"):
        job_ranks({"RANK": "2", "WORLD_SIZE": "2"})
    with pytest.raises(JobError, match="WORLD_SIZE=2 but RANK is not set: initialize torch.distributed's process"):
        job_ranks({"WORLD_SIZE": "2", "LOCAL_RANK": "0", "NODE_RANK": "0"})     # Lightning's launcher, before init


def test_a_member_joins_rank_0s_directory_and_writes_nothing(tmp_path, monkeypatch):
    run_dir = tmp_path / "x"
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    owner = open_run(run_dir, config={"lr": 1.0})
    try:
        assert owner.is_owner and (owner.rank, owner.world_size) == (0, 2)
        assert owner.record.world_size == 2 and owner.record.rank == 0 and owner.record.launch
        before = rank_0s_files(run_dir)
        monkeypatch.setenv("RANK", "1")
        member = open_run(run_dir, join_timeout=5)
        try:
            assert not member.is_owner and (member.rank, member.world_size) == (1, 1 + 1)
            assert rank_0s_files(run_dir) == before
            assert [(r.rank, r.pid) for r in read_ranks(run_dir).records] == [(0, os.getpid()), (1, os.getpid())]
            with pytest.raises(RunError) as err:        # no process group: said in one line
                member.log(1, loss=1.0)
            assert "\n" not in str(err.value) and "init_process_group()" in str(err.value), err.value
        finally:
            member.finish()
        assert rank_0s_files(run_dir) == before
    finally:
        owner.finish()
    assert not (run_dir / TRAINER_JSON).exists()


def rank_0s_files(run_dir):
    """Every file of the run directory and when it last changed, but the member's own rank record."""
    return {p.name: p.stat().st_mtime_ns for p in run_dir.iterdir() if p.name != rank_record_name(1)}


def test_a_member_that_no_rank_0_of_its_launch_waits_for_is_refused_in_one_line(tmp_path, monkeypatch):
    run_dir = tmp_path / "x"
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    with pytest.raises(RunError) as err:
        open_run(run_dir, join_timeout=0.3)
    assert "\n" not in str(err.value) and "rank 1 of 2" in str(err.value) and "no .trainer.json" in str(err.value)
    monkeypatch.delenv("RANK")
    monkeypatch.delenv("WORLD_SIZE")
    with open_run(run_dir) as alone:                # a trainer of one process: another launch
        monkeypatch.setenv("WORLD_SIZE", "2")
        monkeypatch.setenv("RANK", "1")
        with pytest.raises(RunError) as err:
            open_run(run_dir, join_timeout=0.3)
        assert f"names pid {alone.record.pid}" in str(err.value) and "not rank 0 of this launch" in str(err.value)


def test_rank_0_without_a_process_group_is_told_what_it_needs(tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    with open_run(tmp_path / "x") as run:
        with pytest.raises(RunError) as err:
            run.log(1, loss=1.0)
    assert str(err.value) == ("run.log: this process is rank 0 of 2 (RANK/WORLD_SIZE), but torch.distributed's "
                              "process group is not initialized: call torch.distributed.init_process_group() before "
                              "the loop's first step")


def test_the_record_names_the_slurm_job_as_andrea_trains_does(tmp_path, monkeypatch):
    for name, value in {"SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "0", "SLURM_CLUSTER_NAME": "c1",
                        "SLURMD_NODENAME": "node7", "SLURM_JOB_NAME": "train", "SLURM_JOB_USER": "ana",
                        "SLURM_PROCID": "0", "SLURM_STEP_NUM_TASKS": "1"}.items():
        monkeypatch.setenv(name, value)
    with open_run(tmp_path / "x") as run:
        record, _ = read_trainer_record(tmp_path / "x")
        assert record is not None and record.slurm == SlurmPlacement.from_env() == run.record.slurm
        assert (record.slurm.job_id, record.slurm.step_id, record.slurm.node) == ("4242", "0", "node7")
        assert record.world_size is None and run.world_size == 1       # one task: one process
