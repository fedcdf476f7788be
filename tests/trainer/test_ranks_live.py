"""Every rank seen, with real processes: ``andrea-train RUN --nproc 2`` (gloo on CPU) keeps a
record per rank, and the console names a rank stopped with SIGSTOP or killed with SIGKILL, with
its host, from ``--check`` (exit 2) within 10 s; ``--json`` lists both ranks."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from rundir.ranks import read_ranks
from rundir.trainer_record import read_trainer_record
from tests.trainer.test_ddp import console_on, free_port, start_node
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


def rank_verdicts(run: Path) -> dict[int, str]:
    return {r["rank"]: r["verdict"] for r in json.loads(console(run, "--json").stdout)["ranks"]}


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

        os.kill(pids[0], signal.SIGSTOP)         # the recorded process itself: once said "healthy"
        check = wait_for(lambda: (c := console(run, "--check")).returncode == 2 and "rank 0" in c.stdout and c,
                         timeout=60, what="--check naming rank 0")
        assert f"rank 0 on {host}: stopped" in check.stdout
        os.kill(pids[0], signal.SIGCONT)

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
        # Rank 1, stopped; and rank 0 only where it is straggling (its work per step against the
        # median of two, which a loaded machine moves), as the run's records say just before or after.
        before = rank_verdicts(run)
        overview = json.loads(console(run.parent, "--json").stdout)
        after = rank_verdicts(run)
        [counted] = [r["problem_ranks"] for r in overview["runs"] if r["run"] == run.name]
        assert before[1] == after[1] == "stopped", (before, after)
        assert counted == 1 or (counted == 2 and "straggling" in (before[0], after[0])), (counted, before, after)

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


def test_a_rank_slowed_by_a_fault_hook_is_named_straggling(trainer_run):
    run = trainer_run("ranks-straggler")
    proc = start_launcher(run, "--checkpoint-every", "100000", env={"ANDREA_TEST_SLOW_RANK": "1:0.05"})
    try:
        wait_for(lambda: live_ranks(run), timeout=120, what="both ranks' records")
        check = wait_for(lambda: (c := console(run, "--check")).returncode == 1 and "straggling" in c.stdout and c,
                         timeout=60, what="--check naming the straggler")
        assert f"warning: rank 1 on {socket.gethostname()}: straggling: " in check.stdout
        assert "rank 0" not in check.stdout
        assert "slowest rank 1, +" in json.loads(console(run, "--json").stdout)["ranks_summary"]["text"]
    finally:
        stop_process(proc)


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                    reason="simulating nodes needs unshare --uts, as root")
def test_a_frozen_rank_on_another_node_is_named_by_its_heartbeat_from_a_third(trainer_run):
    """Two "nodes" (UTS namespaces with their own host names) train one job in a shared run
    directory; a console on a third names rank 1, frozen, as silent by its heartbeat: its pid is
    never looked up from there. A console on rank 1's own node says it is stopped."""
    run = trainer_run("ranks-two-nodes")
    port = free_port()
    nodes = {name: start_node(name, run, port, "--checkpoint-every", "100000") for name in ("node0", "node1")}
    try:
        pids = wait_for(lambda: live_ranks(run), timeout=180, what="both nodes' ranks")
        records = {r.rank: r for r in read_ranks(run).records}
        listed = json.loads(console_on("node2", run, "--json").stdout)
        assert {(r["rank"], r["host"], r["local"]) for r in listed["ranks"]} == \
            {(0, records[0].host, False), (1, records[1].host, False)}
        assert listed["ranks_summary"]["text"].startswith("2 ranks on 2 nodes")
        os.kill(pids[1], signal.SIGSTOP)
        onset = time.monotonic()
        check = wait_for(lambda: (c := console_on("node2", run, "--check")).returncode == 2 and "silent" in c.stdout
                         and c, timeout=60, what="the third node naming rank 1 silent")
        assert time.monotonic() - onset < ONSET_S + 2       # the bound, and a console's start on a loaded machine
        assert f"rank 1 on {records[1].host}: silent: no heartbeat for " in check.stdout
        assert "not looked up from here" in check.stdout and "rank 0" not in check.stdout
        own = console_on(records[1].host, run, "--check")
        assert f"rank 1 on {records[1].host}: stopped" in own.stdout
    finally:
        for pid in (read_ranks(run).records and [r.pid for r in read_ranks(run).records]):
            try:
                os.kill(pid, signal.SIGCONT)
            except OSError:
                pass
        for proc in nodes.values():
            stop_process(proc)
