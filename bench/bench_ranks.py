"""Every rank seen (issue 44): what the per-rank records cost a trainer, what the console pays to
read and show 64 of them, and how fast ``--stacks`` answers for 8 ranks.

Targets: the records cost <= 0.5% of a step (the loop's four stamps per step, plus the
heartbeat's write every 2 s, which holds the GIL while it builds the record, amortized over
those 2 s; the step time is a real ``andrea-train --nproc 2`` micro run's, the smallest preset
and so the worst case); the ranks' part of a refresh with 64 ranks' records (read, judged
against this host's process table, the pane's text drawn) <= 30 ms; ``--stacks`` on 8 local
ranks (real processes, each with its heartbeat thread) answered within 2 s.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import Result, median_time
from rundir.atomic import atomic_write_json
from rundir.layout import rank_record_name
from rundir.rank_heartbeat import RankHeartbeat
from rundir.ranks import HEARTBEAT_S, Here, RankRecord, judge_ranks, read_ranks
from rundir.stacks import ask_stacks
from rundir.trainer_record import read_boot_id, read_start_ticks

ROOT = Path(__file__).resolve().parents[1]
STAMPS = 20_000


def _step_time(tmp: Path) -> float:
    """The median step time (s) of a real 2-process micro run, from its ranks' records."""
    sys.path.insert(0, str(ROOT))
    from tests.trainer.trainer_runs import make_trainer_run

    run = make_trainer_run(tmp / "ddp")
    subprocess.run([sys.executable, "-m", "trainer", str(run), "--nproc", "2", "--max-steps", "300",
                    "--checkpoint-every", "100000"], cwd=ROOT, check=True, capture_output=True, timeout=600)
    return statistics.median(r.step_s for r in read_ranks(run).records if r.step_s)


def _record_cost(tmp: Path) -> Result:
    beat = RankHeartbeat(tmp, 0, 2, 0, "bench")
    started = time.perf_counter()
    for step in range(STAMPS):
        beat.step_begins()
        beat.batch_drawn()
        beat.work_done()
        beat.step_done(step)
    stamps = (time.perf_counter() - started) / STAMPS
    beat.proc.cpu_percent(None)
    write = median_time(beat.write, repeat=50)
    step = _step_time(tmp)
    cost = stamps + write * step / HEARTBEAT_S       # per step: the stamps, and a share of one write per 2 s
    share = cost / step
    return Result("ranks", f"record cost per step, {share * 100:.2f}% of it (stamps {stamps * 1e6:.1f} us, a write "
                           f"{write * 1e3:.2f} ms every {HEARTBEAT_S:g} s)", cost * 1e3, "ms", step * 1e3,
                  "a micro step, andrea-train --nproc 2", share, "<= 0.005x", share <= 0.005)


def _refresh(tmp: Path) -> Result:
    """64 records of this host (each judged against the process table: the costliest case)."""
    from console.model.snapshot import RanksView
    from console.tui.widgets.ranks_pane import ranks_text

    run = tmp / "run64"
    run.mkdir()
    now, here = time.time(), Here.now()
    for rank in range(64):
        rec = RankRecord(rank=rank, world_size=64, local_rank=rank % 8, host=here.host, pid=os.getpid(), launch="L",
                         heartbeat=now, started=now - 60, start_ticks=read_start_ticks(os.getpid()),
                         boot_id=read_boot_id(), step=1000 - rank % 3, step_time=now, step_s=0.05,
                         work_s=0.02 + rank * 1e-4, data_s=0.002, cpu_percent=99.0, rss=1 << 30)
        atomic_write_json(run / rank_record_name(rank), rec.to_dict())

    def refresh() -> None:
        got = read_ranks(run)
        view = RanksView(judge_ranks(got.records), got.launch, got.earlier, got.errors)
        ranks_text(view, time.time(), 156)

    value = median_time(refresh, repeat=15)
    return Result("ranks", "ranks' refresh: 64 records read, judged, drawn", value * 1e3, "ms",
                  target="<= 30 ms", met=value <= 0.030)


RANK = """
import sys, time
from rundir.rank_heartbeat import RankHeartbeat
beat = RankHeartbeat(sys.argv[1], int(sys.argv[2]), 8, int(sys.argv[2]), "L").start()
beat.step_done(1)
beat.write()
time.sleep(600)
"""


def _stacks(tmp: Path) -> Result:
    run = tmp / "stacks8"
    run.mkdir()
    procs = [subprocess.Popen([sys.executable, "-c", RANK, str(run), str(rank)], cwd=ROOT,
                              env={**os.environ, "PYTHONPATH": str(ROOT)}) for rank in range(8)]
    try:
        deadline = time.monotonic() + 120
        while len([r for r in read_ranks(run).records if r.step]) < 8 and time.monotonic() < deadline:
            time.sleep(0.05)
        times = []
        for _ in range(5):
            report = ask_stacks(run)
            assert not report.unanswered, report.unanswered
            times.append(report.waited_s)
        value = statistics.median(times)
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    return Result("ranks", "--stacks: 8 local ranks, every answer in", value, "s", target="<= 2 s", met=value <= 2.0)


def run() -> list[Result]:
    with tempfile.TemporaryDirectory(prefix="andrea-bench-ranks-") as tmp:
        return [_record_cost(Path(tmp)), _refresh(Path(tmp)), _stacks(Path(tmp))]
