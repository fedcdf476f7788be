"""Every key, and the scriptable twins, against a real ``andrea-train --preset micro``."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from console.actions.supervise import start_trainer
from console.tui.app import ConsoleApp
from console.tui.options import ConsoleOptions
from console.tui.screens import ConfirmScreen, HelpScreen, PivotScreen
from console.tui.widgets import EventLog, LossPlot
from rundir import RunConfig, list_checkpoints, verify_trainer, write_run_config
from tests.console.conftest import until as wait_until
from tests.console.trainer_proc import ROOT, Trainer, train_command

SIZE = (140, 45)


def log_text(app: ConsoleApp) -> str:
    return "\n".join(app.dashboard.query_one(EventLog).texts)


async def until(pilot, condition, timeout: float = 60.0, what: str = "") -> None:
    await wait_until(pilot, condition, timeout, what, detail=lambda: log_text(pilot.app))


def running(app: ConsoleApp) -> bool:
    return app.snapshot is not None and app.snapshot.trainer.state == "running"


@pytest.mark.asyncio
async def test_keys_c_l_w_e_help_pivot_cancel_and_quit(tmp_path):
    run = tmp_path / "live"
    with Trainer(run) as trainer:
        app = ConsoleApp(run, ConsoleOptions(tick=0.5))
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: running(app), what="the trainer verified as running")
            assert not list_checkpoints(run)

            # c: SIGUSR1, and the new checkpoint lands and is shown.
            await pilot.press("c")
            await until(pilot, lambda: "requested checkpoint landed" in log_text(app), what="checkpoint landed")
            await until(pilot, lambda: any(c.status == "complete" for c in app.snapshot.checkpoints),
                        what="the checkpoint in the table")
            assert "SIGUSR1 sent to trainer pid" in log_text(app)
            assert trainer.proc.poll() is None

            plot = app.dashboard.query_one(LossPlot)
            await pilot.press("l")
            assert plot.log_y
            await pilot.press("l")
            assert not plot.log_y
            await pilot.press("w")
            assert plot.window == app.options.window
            await pilot.press("w")
            assert plot.window is None
            before = plot.smoothing
            await pilot.press("e")
            assert plot.smoothing != before

            await pilot.press("question_mark")
            await pilot.pause()
            assert isinstance(app.screen, HelpScreen)
            await pilot.press("x")                 # a stray key does not close the help
            await pilot.pause()
            assert isinstance(app.screen, HelpScreen)
            await pilot.press("escape")
            await pilot.pause()
            assert app.screen is app.dashboard

            await pilot.press("p")
            await until(pilot, lambda: isinstance(app.screen, PivotScreen), what="the pivot screen")
            await pilot.press("escape")
            await pilot.pause()
            assert app.screen is app.dashboard

            # s, then anything but y/Enter: cancelled, nothing sent.
            for key in ("n", "escape"):
                await pilot.press("s")
                await pilot.pause()
                assert isinstance(app.screen, ConfirmScreen)
                await pilot.press(key)
                await pilot.pause()
                assert app.screen is app.dashboard
            assert log_text(app).count("stop cancelled") == 2 and "SIGTERM" not in log_text(app)

            # q: the console quits, training continues.
            await pilot.press("q")
        assert app.return_code in (0, None)
        time.sleep(0.5)
        assert trainer.proc.poll() is None and verify_trainer(run).ok


@pytest.mark.parametrize("confirm_key", ["y", "enter"])
@pytest.mark.asyncio
async def test_stop_confirmed_trainer_exits_0_with_a_final_checkpoint(tmp_path, confirm_key):
    run = tmp_path / "live"
    with Trainer(run) as trainer:
        app = ConsoleApp(run, ConsoleOptions(tick=0.5))
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: running(app), what="the trainer verified as running")
            # An earlier checkpoint first: the exit must name the final one, not this one.
            await pilot.press("c")
            await until(pilot, lambda: "requested checkpoint landed" in log_text(app), what="checkpoint landed")
            await pilot.press("s")
            await pilot.pause()
            assert isinstance(app.screen, ConfirmScreen)
            await pilot.press(confirm_key)
            await until(pilot, lambda: "exited" in log_text(app) and "final checkpoint" in log_text(app),
                        what="the exit in the event log")
            await until(pilot, lambda: app.snapshot.trainer.state == "stopped", what="status: stopped")
            assert "stop confirmed" in log_text(app) and "SIGTERM sent to trainer pid" in log_text(app)
            await pilot.pause(1.5)                  # a tick and a read later: still one line
            exits = [line for line in log_text(app).splitlines() if "exited" in line]
        assert trainer.proc.wait(30) == 0
        final = [c for c in list_checkpoints(run) if c.status == "complete"]
        assert final and not (run / ".trainer.json").exists()
        assert len(exits) == 1 and f"final checkpoint {final[-1].path.name}" in exits[0], exits


def process_state(pid: int) -> str | None:
    """The process's state letter (``Z``: a zombie), or None once it is gone (reaped)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return None


@pytest.mark.asyncio
async def test_a_trainer_the_console_started_is_reaped_when_it_exits(tmp_path):
    # As after the pivot's restart: the console started the trainer, and it is stopped by a
    # signal and a wait that do not hold its process (another console's --stop). The
    # dashboard reaps it: it is not a zombie until the console quits.
    from console.actions.supervise import send, wait_for_exit
    from rundir.layout import STOP_SIGNAL

    run = tmp_path / "started"
    run.mkdir()
    config = RunConfig.from_preset("micro")
    config.run.launch = train_command(Path("{run_dir}"))
    write_run_config(run, config)
    child = start_trainer(run).child
    try:
        app = ConsoleApp(run, ConsoleOptions(tick=0.5))
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: running(app), what="the trainer verified as running")
            result = send(run, STOP_SIGNAL)
            assert result.ok, result.message
            exited, text = wait_for_exit(run, result, 60)
            assert exited, text
            await until(pilot, lambda: process_state(child.pid) is None, what="the exited trainer reaped")
        assert child.poll() == 0                        # its exit code is still there to read
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def console(*args, timeout=120):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "console", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env=env)


def test_cli_checkpoint_then_stop(tmp_path):
    run = tmp_path / "live"
    with Trainer(run) as trainer:
        r = console(run, "--checkpoint", "--timeout", "60")
        assert r.returncode == 0, r.stderr
        path = Path(r.stdout.strip())
        assert path.parent == run and path.exists()
        # Said on stderr as the dashboard and the overview say a landing (console.read.landing).
        assert f"checkpoint landed: {path.name} (step " in r.stderr and r.stderr.rstrip().endswith(", complete)")
        assert [c.status for c in list_checkpoints(run) if c.path == path] == ["complete"]
        assert trainer.proc.poll() is None
        r = console(run, "--stop", "--timeout", "60")
        assert r.returncode == 0, r.stderr
        assert "exited" in r.stdout and "cleanly" in r.stdout and "final checkpoint" in r.stdout
        assert trainer.proc.wait(30) == 0
        # Nothing verified is left to signal.
        r = console(run, "--stop", "--timeout", "5")
        assert r.returncode == 1 and "no trainer is running" in r.stderr


def test_start_launches_detached_with_output_in_trainer_log(tmp_path):
    run = tmp_path / "started"
    run.mkdir()
    # run.toml's launch command wins over the default; --preset is passed through.
    config = RunConfig.from_preset("micro")
    config.run.launch = [a for a in train_command(Path("{run_dir}")) if a not in ("--preset", "micro")]
    write_run_config(run, config)
    child = start_trainer(run, preset="micro").child
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not verify_trainer(run).ok:
            assert child.poll() is None, (run / "trainer.log").read_text()
            time.sleep(0.1)
        assert verify_trainer(run).ok
        assert os.getsid(child.pid) == child.pid            # its own session: the console's exit cannot stop it
        log = (run / "trainer.log").read_text()
        assert "andrea-console --start" in log and "--preset micro" in log
        r = console(run, "--stop", "--timeout", "60")
        assert r.returncode == 0, r.stderr
        assert child.wait(30) == 0
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
