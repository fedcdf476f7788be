"""Every rank seen, with real processes: ``andrea-train RUN --nproc 2`` (gloo on CPU) keeps a
record per rank, and the console names a rank stopped with SIGSTOP or killed with SIGKILL, with
its host, from ``--check`` (exit 2) within 10 s; ``--json`` lists both ranks."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil

from rundir.ranks import read_ranks
from rundir.trainer_record import read_trainer_record
from tests.trainer.trainer_runs import ROOT, stop_process, wait_for

NPROC = 2
ONSET_S = 10.0          # a rank's problem is named within this long of its onset


def start_launcher(run_dir: Path, *flags: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "trainer", str(run_dir), "--nproc", str(NPROC), *flags], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})})


def console(run_dir: Path, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "console", str(run_dir), *flags], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


def live_ranks(run_dir: Path) -> dict[int, int] | None:
    """{rank: pid} once both ranks of the launch .trainer.json names have finished a step."""
    record, _ = read_trainer_record(run_dir)
    if record is None or not record.launch:
        return None
    got = read_ranks(run_dir)
    if got.launch != record.launch or len(got.records) != NPROC or any(r.step is None for r in got.records):
        return None
    return {r.rank: r.pid for r in got.records}


def test_every_rank_keeps_a_record_of_its_launch_and_its_exit(trainer_run):
    run = trainer_run("ranks-recorded")
    proc = start_launcher(run, "--max-steps", "60")
    try:
        _, err = proc.communicate(timeout=180)
    finally:
        stop_process(proc)
    assert proc.returncode == 0, err[-3000:]
    got = read_ranks(run)
    assert [r.rank for r in got.records] == [0, 1] and got.earlier == 0
    assert {r.world_size for r in got.records} == {NPROC} and {r.host for r in got.records} == {socket.gethostname()}
    assert {r.exit_code for r in got.records} == {0} and {r.step for r in got.records} == {60}
    assert all(r.work_s and r.step_s and r.rss for r in got.records)
    assert len({r.pid for r in got.records}) == NPROC and len({r.launch for r in got.records}) == 1


def test_a_rank_stopped_by_a_signal_then_killed_is_named_with_its_host(trainer_run):
    run = trainer_run("ranks-faults")
    proc = start_launcher(run, "--checkpoint-every", "100000")
    host = socket.gethostname()
    try:
        pids = wait_for(lambda: live_ranks(run), timeout=120, what="both ranks' records")
        listed = json.loads(console(run, "--json").stdout)
        assert sorted(r["rank"] for r in listed["ranks"]) == [0, 1]
        assert {r["verdict"] for r in listed["ranks"]} <= {"ok", "straggling"}
        assert listed["ranks_summary"]["text"].startswith("2 ranks on 1 node")

        os.kill(pids[1], signal.SIGSTOP)
        onset = time.monotonic()
        check = wait_for(lambda: (c := console(run, "--check")).returncode == 2 and "rank 1" in c.stdout and c,
                         timeout=60, what="--check naming rank 1")
        assert time.monotonic() - onset < ONSET_S
        assert f"rank 1 on {host}: stopped" in check.stdout and f"kill -CONT {pids[1]}" in check.stdout
        assert "rank 0" not in check.stdout
        once = console(run, "--once").stdout
        assert "ranks        2 ranks on 1 node" in once and "stopped" in once
        stacks = console(run, "--stacks")      # rank 0 waits for rank 1 in a collective; rank 1 cannot answer
        assert stacks.returncode == 1, stacks.stdout + stacks.stderr
        [rank0] = [line for line in stacks.stdout.splitlines() if line.startswith("rank 0: ")]
        assert any(call in rank0 for call in ("all_reduce", "broadcast", "backward")), rank0
        assert f"rank 1 on {host}: no answer: stopped: stopped by a signal (state T)" in stacks.stdout
        overview = json.loads(console(run.parent, "--json").stdout)
        assert [r["problem_ranks"] for r in overview["runs"] if r["run"] == run.name] == [1]

        os.kill(pids[1], signal.SIGKILL)
        onset = time.monotonic()
        check = wait_for(lambda: (c := console(run, "--check")).returncode == 2 and "dead" in c.stdout and c,
                         timeout=60, what="--check naming rank 1 dead")
        assert time.monotonic() - onset < ONSET_S
        assert f"rank 1 on {host}: dead: pid {pids[1]} is gone" in check.stdout
    finally:
        for pid in psutil.Process(proc.pid).children(recursive=True) if proc.poll() is None else []:
            try:
                os.kill(pid.pid, signal.SIGCONT)
            except OSError:
                pass
        stop_process(proc)
