"""The console's view of a job's ranks: findings naming rank and host at their levels, --check's
exit status, --json's ranks and --once's lines, from real records and real processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import replace

import pytest

from console.actions.alerts import check_report
from console.read.reader import RunReader
from console.text.run_report import render_text, to_json
from rundir.atomic import atomic_write_json
from rundir.layout import rank_record_name
from rundir.ranks import Here, RankRecord
from rundir.trainer_record import read_boot_id, read_start_ticks
from tests.console.conftest import fixed_now
from tests.rundirs import RunSpec, make_run
from tests.trainer.trainer_runs import wait_for


def write_rank(run, rank: int, mtime: float | None = None, **fields) -> RankRecord:
    """A record as a rank writes it: the file dated its heartbeat (or ``mtime``: the server's clock)."""
    now = time.time()
    rec = RankRecord(rank=rank, world_size=3, local_rank=rank, host=Here.now().host, pid=os.getpid(), launch="L",
                     heartbeat=now, started=now - 5, start_ticks=read_start_ticks(os.getpid()), boot_id=read_boot_id(),
                     step=10, step_time=now, step_s=0.02, work_s=0.01, data_s=0.002)
    rec = replace(rec, **fields)
    atomic_write_json(run / rank_record_name(rank), rec.to_dict())
    stamp = rec.heartbeat if mtime is None else mtime
    os.utime(run / rank_record_name(rank), (stamp, stamp))
    return rec


def test_a_stopped_rank_and_a_silent_one_are_errors_naming_rank_and_host(tmp_path):
    run = make_run(tmp_path / "run", RunSpec(steps=20))
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        ticks = wait_for(lambda: read_start_ticks(child.pid), what="the child's start")
        write_rank(run, 0)
        write_rank(run, 1, pid=child.pid, start_ticks=ticks)
        write_rank(run, 2, host="node-b", heartbeat=time.time() - 60)
        os.kill(child.pid, signal.SIGSTOP)
        wait_for(lambda: open(f"/proc/{child.pid}/stat").read().split(") ")[1].startswith("T"), what="state T")
        snap, _ = RunReader(run).read()
        host = Here.now().host
        kinds = {f.kind: f for f in snap.problems if f.kind.startswith("rank_")}
        assert set(kinds) == {"rank_stopped", "rank_silent"}
        assert kinds["rank_stopped"].text.startswith(f"rank 1 on {host}: stopped")
        assert kinds["rank_silent"].text.startswith("rank 2 on node-b: silent: no heartbeat for 60 s")
        code, lines = check_report(snap)
        assert code == 2 and any(line.startswith(f"error: rank 1 on {host}: stopped") for line in lines)
        data = to_json(snap)
        assert [(r["rank"], r["verdict"]) for r in data["ranks"]] == [(1, "stopped"), (2, "silent"), (0, "ok")]
        assert data["ranks_summary"]["problems"] == 2 and data["ranks_summary"]["text"].startswith("3 ranks on 2 nodes")
        text = render_text(snap)
        assert "ranks        3 ranks on 2 nodes" in text and "stopped" in text
    finally:
        child.kill()
        child.wait()


def test_a_straggler_is_a_warning_and_an_earlier_launchs_records_are_not_read(tmp_path):
    run = make_run(tmp_path / "run", RunSpec(steps=20))
    write_rank(run, 0, work_s=0.010)
    write_rank(run, 1, work_s=0.050)
    write_rank(run, 2, work_s=0.011)
    snap, _ = RunReader(run).read()
    [finding] = [f for f in snap.problems if f.kind.startswith("rank_")]
    assert finding.kind == "rank_straggling" and finding.text.startswith("rank 1 on ")
    assert check_report(snap)[0] == 1
    assert "slowest rank 1, +" in snap.ranks.summary
    write_rank(run, 0, launch="M", started=time.time(), work_s=0.01)    # a new launch of one rank... and old ones
    snap, _ = RunReader(run).read()
    assert [s.record.rank for s in snap.ranks.statuses] == [0] and snap.ranks.earlier == 2
    assert not [f for f in snap.problems if f.kind.startswith("rank_")]


@pytest.mark.asyncio
async def test_the_status_pane_says_the_ranks_in_one_line_and_k_lists_them(tmp_path):
    from console.tui.screens.ranks_screen import RanksScreen
    from console.tui.widgets.ranks_pane import RanksPane
    from console.tui.widgets.status import StatusPane
    from tests.console.test_snapshots import app_for

    run = make_run(tmp_path / "run", RunSpec(steps=20))
    for rank, work in enumerate((0.010, 0.050, 0.011)):
        write_rank(run, rank, host="node-a", work_s=work, heartbeat=fixed_now() + 3600,  # clock ahead
                   mtime=fixed_now())
    app = app_for(run)
    async with app.run_test(size=(160, 48)) as pilot:
        await app.workers.wait_for_complete()
        await pilot.pause()
        status = " ".join(app.screen.query_one(StatusPane).content.plain.split())     # the pane wraps it
        assert "3 ranks on 1 node · slowest rank 1, +" in status and "1 with a problem" in status
        await pilot.press("k")
        await pilot.pause()
        assert isinstance(app.screen, RanksScreen)
        rows = app.screen.query_one(RanksPane).content.plain.splitlines()
        assert rows[2].startswith("1 ") and rows[2].split()[-4:] == ["ahead", "straggling", "·" * 24, "lead"]
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, RanksScreen)
