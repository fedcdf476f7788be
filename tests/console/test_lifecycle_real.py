"""A run's life with the real trainer (``python -m trainer``, micro preset, a real process and
real signals): train, a checkpoint on SIGUSR1, a stop on SIGTERM, a resume, a guided rollback
through the console's ``--rollback``, a stop through ``--stop``. At each point where nothing
moves (the trainer stopped), ``--json``, ``--check``, ``--once`` and the overview say what the
run directory's files say, read here without the console: the step and loss of the newest
step line, the complete checkpoints, a clean end."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from console.cli import main
from console.model.format import format_float
from rundir import verify_trainer
from tests.console.trainer_proc import ROOT
from tests.processes import stop_processes_naming
from tests.trainer.trainer_runs import events, history, make_trainer_run, start_trainer, step_lines, wait_for

CADENCE = 20
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


@contextlib.contextmanager
def trainer_of(run: Path):
    """``andrea-train RUN`` started; on leaving, killed if it still runs, and its pipes read."""
    trainer = start_trainer(run)
    try:
        yield trainer
    finally:
        if trainer.poll() is None:
            trainer.kill()
        trainer.communicate()


def console_out(*args: object) -> tuple[int, str]:
    """The console's command line, as ``andrea-console ARGS`` runs it (its exit status and stdout)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main([str(a) for a in args])
    return code, out.getvalue()


def complete_checkpoints(run: Path) -> list[int]:
    """The steps of the checkpoints whose .bin and .json are both there (the trainer writes the
    .json last)."""
    return sorted(int(p.name[5:-4]) for p in run.glob("step_*.bin") if p.with_suffix(".json").exists())


def truth(run: Path) -> dict:
    """What the files say: the newest step line (where the run is), whether the last line is a
    clean stop, the complete checkpoints."""
    lines = history(run)
    newest = step_lines(run)[-1]
    return {"step": newest["step"], "loss": newest["loss"], "checkpoints": complete_checkpoints(run),
            "stopped": lines[-1].get("event") == "stop" and lines[-1].get("reason") == "signal"}


def views_agree(run: Path) -> dict:
    """Every view against the files, the trainer stopped; returns what the files say."""
    true = truth(run)
    assert true["stopped"]
    code, text = console_out(run, "--json")
    report = json.loads(text)
    assert code == 0 and report["trainer"]["state"] == "stopped"
    assert (report["history"]["last_step"], report["history"]["last_loss"]) == (true["step"], true["loss"])
    assert [c["step"] for c in report["checkpoints"] if c["status"] == "complete"] == true["checkpoints"]
    assert report["newest_checkpoint"].endswith(f"step_{true['checkpoints'][-1]:06d}.bin")
    # Every step a resume ran again equals the line it replaced, bit for bit (a rerun the run
    # stopped short of is still pending, never diverged).
    checks = report["history"]["resume_checks"]
    assert all(c["identical"] and c["verdict"] in ("verified", "pending") for c in checks), checks
    code, text = console_out(run, "--check")
    assert code == 0, text
    code, text = console_out(run, "--once")
    assert f"step         {true['step']:,} · loss {format_float(true['loss'])}" in text
    code, text = console_out(run.parent, "--json")
    row = next(r for r in json.loads(text)["runs"] if r["run"] == run.name)
    assert row["last_step"] == true["step"] and row["trainer"]["label"] == "finished" and row["problems"] == []
    assert row["newest_checkpoint"]["step"] == true["checkpoints"][-1]
    return true


@pytest.fixture
def run(tmp_path):
    run = make_trainer_run(tmp_path / "runs" / "life", checkpoint_every=CADENCE, sample_every=1000, keep_last=0)
    yield run
    stop_processes_naming(run)


def steps_past(run: Path, step: int) -> bool:
    lines = step_lines(run)
    return bool(lines) and lines[-1]["step"] > step


def rolled_back_and_past(run: Path, step: int) -> bool:
    """The resumed trainer logged ``step`` after the newest rollback event."""
    lines = history(run)
    at = max(i for i, r in enumerate(lines) if r.get("event") == "rollback")
    return any("event" not in r and r["step"] >= step for r in lines[at:])


def test_train_checkpoint_stop_resume_rollback_stop(run):
    with trainer_of(run) as trainer:
        wait_for(lambda: steps_past(run, 2 * CADENCE + 5), 120, "steps past two checkpoints")
        # SIGUSR1: a checkpoint off the cadence, the run goes on.
        asked = len(events(run, "checkpoint"))
        trainer.send_signal(signal.SIGUSR1)
        # (A request at a cadence step is answered by that step's checkpoint, said with its cadence.)
        wait_for(lambda: len(events(run, "checkpoint")) > asked, 120, "the requested checkpoint")
        wait_for(lambda: steps_past(run, events(run, "checkpoint")[-1]["step"] + 3), 60, "steps after it")
        # SIGTERM: the final checkpoint, a clean stop.
        trainer.send_signal(signal.SIGTERM)
        assert trainer.wait(60) == 0
    first = views_agree(run)
    assert first["checkpoints"][-1] == first["step"]          # the stop's own checkpoint

    # A resume from it: the same run goes on; stopped again, every view at its new head.
    with trainer_of(run) as trainer:
        wait_for(lambda: steps_past(run, first["step"] + 10), 120, "steps after the resume")
        trainer.send_signal(signal.SIGTERM)
        assert trainer.wait(60) == 0
    resumed = views_agree(run)
    assert events(run, "resume")[-1]["from_step"] == first["step"]

    # A rollback to the second cadence checkpoint through the console's command line (the
    # trainer is relaunched detached, as run.launch says), then a stop through --stop.
    x = 2 * CADENCE
    with trainer_of(run) as trainer:
        wait_for(lambda: verify_trainer(run).ok and steps_past(run, resumed["step"] + 2), 120, "the trainer again")
        done = subprocess.run([sys.executable, "-m", "console", str(run), "--rollback", "--to", str(x), "--yes",
                               "--timeout", "120"], capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
        assert trainer.wait(60) == 0                           # the rollback's stop
    rollback = events(run, "rollback")[-1]
    assert rollback["to_step"] == x and rollback["from_step"] >= resumed["step"]
    wait_for(lambda: rolled_back_and_past(run, x + 5), 120, "the new segment")
    code, said = console_out(run, "--stop", "--timeout", "60")
    assert code == 0, said
    wait_for(lambda: not verify_trainer(run).ok, 60, "the relaunched trainer gone")
    after = views_agree(run)
    # The new segment is where the run is; every checkpoint after x is its own (the earlier
    # segment's are set aside in the archive).
    assert after["step"] > x
    assert all((run / f"step_{s:06d}.bin").stat().st_mtime >= rollback["time"] - 1
               for s in after["checkpoints"] if s > x)
