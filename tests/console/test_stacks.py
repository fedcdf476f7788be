"""Every rank's stacks through the run directory (rundir/stacks.py, ``--stacks``, the ``K`` key),
with real processes that keep rank records (rundir/rank_heartbeat.py): three ranks waiting in the
same function are folded into one line, a rank stopped with SIGSTOP is said with why, nothing is
signalled or attached."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from console.tui.screens.detail import DetailScreen
from rundir.layout import STACKS_REQUEST, rank_record_name
from rundir.ranks import read_ranks
from rundir.stacks import ask_stacks, fold_stacks, parse_answer
from tests.console.test_snapshots import app_for
from tests.rundirs import make_run
from tests.trainer.trainer_runs import ROOT, wait_for

WORLD = 4
RANK = """
import sys, time
from rundir.rank_heartbeat import RankHeartbeat

def wait_in_collective():
    time.sleep(120)

beat = RankHeartbeat(sys.argv[1], int(sys.argv[2]), {world}, int(sys.argv[2]), "L", interval=0.2).start()
beat.step_done(5)
beat.write()
wait_in_collective()
""".format(world=WORLD)


def start_job(run: Path) -> list[subprocess.Popen]:
    procs = [subprocess.Popen([sys.executable, "-c", RANK, str(run), str(rank)], cwd=ROOT,
                              env={**os.environ, "PYTHONPATH": str(ROOT)}) for rank in range(WORLD)]
    wait_for(lambda: len(read_ranks(run).records) == WORLD and all(r.step for r in read_ranks(run).records),
             what="every rank's record")
    return procs


def stop_job(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        proc.kill()
        proc.wait()


def test_identical_stacks_are_folded_and_a_stopped_rank_is_said_with_why(tmp_path):
    run = make_run(tmp_path / "run", steps=10)
    procs = start_job(run)
    try:
        os.kill(procs[3].pid, signal.SIGSTOP)
        wait_for(lambda: open(f"/proc/{procs[3].pid}/stat").read().split(") ")[1].startswith("T"), what="state T")
        report = ask_stacks(run)
        assert report.waited_s < 2.0 and [a.status.record.rank for a in report.unanswered] == [3]
        lines = fold_stacks(report)
        assert lines[0].startswith("ranks 0-2: wait_in_collective (")
        assert sum(line.startswith("rank") for line in lines) == 2       # one group and one rank that did not answer
        assert lines[-1].startswith("rank 3 on ") and "no answer: stopped: stopped by a signal (state T)" in lines[-1]
        assert not (run / STACKS_REQUEST).exists()                       # the request is withdrawn
        code = subprocess.run([sys.executable, "-m", "console", str(run), "--stacks"], cwd=ROOT, capture_output=True,
                              text=True, timeout=60)
        assert code.returncode == 1 and "stacks of 3 of 4 ranks" in code.stdout and "ranks 0-2: " in code.stdout
        assert all(proc.poll() is None for proc in procs)                # nothing was signalled
    finally:
        stop_job(procs)


def test_a_run_without_rank_records_is_one_line_and_exit_2(tmp_path):
    run = make_run(tmp_path / "run", steps=10)
    got = subprocess.run([sys.executable, "-m", "console", str(run), "--stacks"], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert got.returncode == 2 and len(got.stdout.splitlines()) == 1 and "no rank records" in got.stdout
    assert not (run / STACKS_REQUEST).exists()


def test_an_answer_leaves_out_the_thread_that_wrote_it():
    text = ("# stacks id=abc rank=1 pid=9 host=h time=1\n"
            "Thread 0x00007f01 (most recent call first):\n"
            '  File "/x/rundir/rank_heartbeat.py", line 10 in _run\n\n'
            "Current thread 0x00007f02 (most recent call first):\n"
            '  File "/x/rundir/rank_heartbeat.py", line 99 in write_stacks\n\n'
            "Thread 0x00007f03 (most recent call first):\n"
            '  File "/x/trainer/train.py", line 120 in _train\n')
    assert parse_answer(text) == ("abc", ((("/x/rundir/rank_heartbeat.py", 10, "_run"),),
                                          (("/x/trainer/train.py", 120, "_train"),)))


@pytest.mark.asyncio
async def test_the_stacks_key_shows_every_ranks_stacks(tmp_path):
    run = make_run(tmp_path / "run", steps=10)
    procs = start_job(run)
    try:
        app = app_for(run)
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause()
            await pilot.press("K")
            for _ in range(200):
                await pilot.pause(0.05)
                if isinstance(app.screen, DetailScreen):
                    break
            assert isinstance(app.screen, DetailScreen)
            body = str(app.screen.body)
            assert "stacks of 4 of 4 ranks" in body and "ranks 0-3: wait_in_collective (" in body
    finally:
        stop_job(procs)
    assert (run / rank_record_name(0)).exists()
