"""The ranks screen (``k``), compared with accepted SVG snapshots: 2 and 64 ranks at 80x24 and
160x48 (the step-lag strip). The records are of other hosts (nothing of this machine's process
table is read), the clock is fixed, and nothing on screen names a pid or a path."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rundir.atomic import atomic_write_json
from rundir.layout import rank_record_name
from rundir.ranks import RankRecord
from tests.console.conftest import fixed_now
from tests.console.test_snapshots import BIG, NARROW, app_for, live_probe, pressing
from tests.rundirs import make_run


def job(tmp_path: Path, world: int) -> Path:
    """A run whose job has ``world`` ranks on 8-rank nodes: rank 1 straggles, and with 64 ranks
    rank 9 fell silent, rank 17 is behind."""
    run = make_run(tmp_path / "run", steps=300)
    now = fixed_now()
    for rank in range(world):
        step, beat, work = 3000, now - 1, 0.020 + 0.0001 * (rank % 5)
        if rank == 1:
            work = 0.031
        if rank == 9:
            step, beat = 2850, now - 40
        if rank == 17:
            step = 2700
        rec = RankRecord(rank=rank, world_size=world, local_rank=rank % 8, host=f"node-{rank // 8:02d}",
                         pid=1000 + rank, launch="L", heartbeat=beat, started=now - 600, step=step,
                         step_time=now - 1 - (3000 - step) * 0.05, step_s=0.05, work_s=work, data_s=0.004,
                         cpu_percent=97.0 + rank % 3, rss=(2000 + rank) << 20)
        atomic_write_json(run / rank_record_name(rank), rec.to_dict())
        os.utime(run / rank_record_name(rank), (beat, beat))          # written at its heartbeat
    return run


@pytest.mark.parametrize("world", [2, 64])
@pytest.mark.parametrize("size", [NARROW, BIG], ids=["80x24", "160x48"])
def test_ranks_screen(snap_compare, tmp_path, size, world):
    app = app_for(job(tmp_path, world), live_probe)
    assert snap_compare(app, terminal_size=size, run_before=pressing("k"))
