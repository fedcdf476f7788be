"""A stepped system clock (NTP, a paused VM) moves every computed process start time. The
record of a live trainer whose ``create_time`` is 20 s off, but whose ticks since boot and
boot id are its own, is the live trainer everywhere: the dashboard raises no alert,
``--check`` says nothing of a dead trainer, ``--json`` says running, ``--checkpoint`` lands."""

from __future__ import annotations

import dataclasses
import json

import pytest

from console.tui.app import ConsoleApp
from console.tui.options import ConsoleOptions
from console.tui.widgets import EventLog
from rundir import read_trainer_record, verify_trainer, write_trainer_record
from tests.console.conftest import until
from tests.console.test_cli import console
from tests.console.trainer_proc import Trainer


def step_the_clock(run) -> None:
    """What a 20 s clock step does to the record as the console now computes it."""
    record, error = read_trainer_record(run)
    assert record is not None and record.start_ticks is not None and record.boot_id, error
    write_trainer_record(run, dataclasses.replace(record, create_time=record.create_time - 20.0))


@pytest.mark.asyncio
async def test_a_live_trainer_stays_live_after_a_clock_step(tmp_path):
    run = tmp_path / "live"
    with Trainer(run):
        step_the_clock(run)
        assert verify_trainer(run).ok

        r = console(run, "--json")
        assert json.loads(r.stdout)["trainer"]["state"] == "running", r.stdout[-2000:]
        r = console(run, "--check")
        assert r.returncode != 2 and "gone" not in r.stdout and "stale" not in r.stdout, r.stdout
        r = console(run, "--checkpoint", "--timeout", "120", timeout=180)
        assert r.returncode == 0 and r.stdout.strip().endswith(".bin"), r.stderr

        app = ConsoleApp(run, ConsoleOptions(tick=0.5))
        async with app.run_test(size=(140, 45)) as pilot:
            def log() -> str:
                return "\n".join(app.dashboard.query_one(EventLog).texts)
            await until(pilot, lambda: app.snapshot is not None and app.snapshot.trainer.state == "running",
                        what="the dashboard showing the trainer running", detail=log)
            # Four more reads while it trains: each says running, and no alert is raised.
            seen: list[str] = []

            def four_more_reads() -> bool:
                if not seen or app.snapshot.taken != float(seen[-1].split()[0]):
                    seen.append(f"{app.snapshot.taken} {app.snapshot.trainer.state}")
                return len(seen) > 4
            await until(pilot, four_more_reads, what="four more reads", detail=log)
            assert all(entry.endswith(" running") for entry in seen), seen
            assert "ALERT" not in log() and "stale" not in log(), log()
