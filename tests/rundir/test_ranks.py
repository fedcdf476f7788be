"""The ranks' records (rundir/ranks.py, rundir/rank_heartbeat.py): written by a real heartbeat
thread, read back by launch, and judged against real processes (stopped with SIGSTOP, gone)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from rundir.atomic import atomic_write_json
from rundir.layout import STACKS_REQUEST, rank_record_name, stacks_answer_name
from rundir.rank_heartbeat import RankHeartbeat
from rundir.ranks import (
    SILENT_AFTER_S,
    Here,
    RankRecord,
    fold_ranks,
    judge_ranks,
    local_process_state,
    read_ranks,
    summary_line,
)
from rundir.trainer_record import TrainerRecord, read_boot_id, read_start_ticks, write_trainer_record
from tests.trainer.trainer_runs import wait_for

HERE = Here.now()


def record(rank: int, launch: str = "L", world: int = 2, **fields) -> RankRecord:
    now = time.time()
    base = RankRecord(rank=rank, world_size=world, local_rank=rank, host=HERE.host, pid=os.getpid(), launch=launch,
                      heartbeat=now, started=now - 10, start_ticks=read_start_ticks(os.getpid()),
                      boot_id=read_boot_id(), step=100, step_time=now, step_s=0.02, work_s=0.01, data_s=0.001)
    return replace(base, **fields)


def write(run_dir: Path, rec: RankRecord) -> None:
    atomic_write_json(run_dir / rank_record_name(rec.rank), rec.to_dict())


def by_rank(statuses):
    return {s.record.rank: s for s in statuses}


def test_a_heartbeat_keeps_its_record_fresh_and_its_last_write_says_the_exit(tmp_path):
    beat = RankHeartbeat(tmp_path, 1, 2, 1, "launch-a", interval=0.2).start()
    try:
        beat.step_begins()
        beat.batch_drawn()
        beat.work_done()
        beat.step_done(7)
        first = read_ranks(tmp_path, "launch-a").records[0].heartbeat
        got = wait_for(lambda: (r := read_ranks(tmp_path, "launch-a").records) and r[0].heartbeat > first and r[0],
                       what="a second beat")
        assert (got.rank, got.world_size, got.pid, got.step, got.host) == (1, 2, os.getpid(), 7, HERE.host)
        assert got.rss and got.rss > 0 and got.work_s is not None and got.exit_code is None
    finally:
        beat.close(3)
    assert read_ranks(tmp_path, "launch-a").records[0].exit_code == 3


def test_records_of_an_earlier_launch_are_never_read_as_this_ones(tmp_path):
    for rank in range(3):
        write(tmp_path, record(rank, "old", world=3, heartbeat=time.time() + 100, started=time.time() - 100))
    for rank in range(2):
        write(tmp_path, record(rank, "new"))
    write_trainer_record(tmp_path, TrainerRecord.for_this_process(rank=0, world_size=2, launch="new"))
    got = read_ranks(tmp_path)
    assert got.launch == "new" and [r.rank for r in got.records] == [0, 1] and got.earlier == 1
    (tmp_path / ".trainer.json").unlink()
    assert read_ranks(tmp_path).launch == "new"      # no record of a launch: the one started last
    (tmp_path / rank_record_name(2)).write_text("{not json")
    assert read_ranks(tmp_path).errors


def test_a_stopped_rank_and_a_dead_one_are_named_from_their_processes():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        ticks = wait_for(lambda: read_start_ticks(child.pid), what="the child's start")
        live = record(1, pid=child.pid, start_ticks=ticks)
        assert local_process_state(live) == "running"
        os.kill(child.pid, signal.SIGSTOP)
        wait_for(lambda: local_process_state(live) == "stopped", what="state T")
        statuses = by_rank(judge_ranks([record(0), live]))
        assert statuses[1].verdict == "stopped" and f"kill -CONT {child.pid}" in statuses[1].why
        assert statuses[0].verdict == "ok"
        assert judge_ranks([record(0), live])[0].record.rank == 1      # worst first
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        assert by_rank(judge_ranks([record(0), live]))[1].verdict == "dead"
        reused = record(1, pid=os.getpid(), start_ticks=(read_start_ticks(os.getpid()) or 0) + 1)
        assert by_rank(judge_ranks([reused]))[1].verdict == "dead"       # its pid is another process now
    finally:
        child.kill()
        child.wait()


def test_a_rank_of_another_host_is_judged_by_its_heartbeat_and_its_pid_is_never_looked_up():
    def never(rec):
        raise AssertionError("another host's pid was looked up")

    now = time.time()
    fresh = record(1, host="elsewhere", heartbeat=now - 1)
    quiet = record(2, host="elsewhere", heartbeat=now - SILENT_AFTER_S - 1)
    statuses = by_rank(judge_ranks([fresh, quiet], now=now, here=Here(HERE.host, HERE.boot_id),
                                   process_state=never))
    assert statuses[1].verdict == "ok" and statuses[2].verdict == "silent" and "elsewhere" in statuses[2].why
    other_boot = record(3, boot_id="another-boot", heartbeat=now - 60)
    assert judge_ranks([other_boot], now=now, process_state=never)[0].verdict == "silent"


def test_a_straggler_and_a_rank_behind_are_named_and_the_summary_names_the_slowest():
    now = time.time()
    ranks = [record(0, work_s=0.010), record(1, work_s=0.040), record(2, work_s=0.011), record(3, work_s=0.012)]
    statuses = by_rank(judge_ranks(ranks, now=now, process_state=lambda r: "running"))
    assert statuses[1].verdict == "straggling" and [s.verdict for s in (statuses[0], statuses[2])] == ["ok", "ok"]
    assert "slowest rank 1, +" in summary_line(statuses.values())
    assert summary_line(statuses.values()).startswith("4 ranks on 1 node")
    behind = [record(0, step=500, step_time=now), record(1, step=420, step_time=now - 20)]
    got = by_rank(judge_ranks(behind, now=now, process_state=lambda r: "running"))
    assert got[1].verdict == "behind" and got[1].behind_by == 80 and got[0].verdict == "ok"
    even = [record(0, step=500, step_time=now), record(1, step=499, step_time=now - 0.1)]
    assert {s.verdict for s in judge_ranks(even, now=now, process_state=lambda r: "running")} == {"ok"}


@pytest.mark.parametrize("ranks, text", [([0, 2, 3, 4, 5, 6, 7], "0, 2-7"), ([1], "1"), ([0, 1], "0, 1"),
                                         ([3, 1, 2, 9], "1-3, 9")])
def test_ranks_fold_into_ranges(ranks, text):
    assert fold_ranks(ranks) == text


def test_a_stacks_request_is_answered_by_the_heartbeat_thread_with_every_threads_stack(tmp_path):
    beat = RankHeartbeat(tmp_path, 3, 4, 3, "L", interval=0.2).start()
    try:
        atomic_write_json(tmp_path / STACKS_REQUEST, {"version": 1, "id": "req-1"})
        answer = tmp_path / stacks_answer_name(3)
        text = wait_for(lambda: answer.exists() and answer.read_text(), what="the answer")
        assert text.startswith("# stacks id=req-1 rank=3 ")
        assert "test_a_stacks_request_is_answered" in text and "_run" in text      # the main thread and its own
        answer.unlink()
        time.sleep(0.6)
        assert not answer.exists()                   # one request, one answer
    finally:
        beat.close(0)


def test_rank_files_are_known_names_of_their_own_kind():
    from rundir.layout import RANKS, STACKS_REQUEST, is_known, kind_of, stacks_answer_name

    for name in (rank_record_name(3), stacks_answer_name(12), STACKS_REQUEST):
        assert is_known(name) and kind_of(name) == RANKS
    assert not is_known(".rank-3.json") and kind_of(".rank-3.json") != RANKS       # not the 5-digit spelling


def test_a_heartbeat_whose_lock_may_be_lost_writes_nothing_and_goes_on(tmp_path):
    from rundir import fence

    def lost():
        raise fence.LockLostError("taken over")

    beat = RankHeartbeat(tmp_path, 0, 2, 0, "L")
    fence.register(lost)
    try:
        beat.write()
        assert beat.write_errors == 1 and not (tmp_path / rank_record_name(0)).exists()
    finally:
        fence.unregister(lost)
    beat.write()
    assert (tmp_path / rank_record_name(0)).exists()
