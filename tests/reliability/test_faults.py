"""A full disk during a checkpoint write, a run that diverges, and a trainer that stalls:
each is logged, shown by the console and handled by a documented policy (trainer/guard.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from rundir import list_checkpoints, open_checkpoint, verify_checksum
from rundir.atomic import ENOSPC_AFTER_ENV, ENOSPC_WRITES_ENV
from rundir.layout import TMP_PREFIX
from tests.mounts import mount_tmpfs
from tests.reliability.lines import events, lines, step_lines
from tests.trainer.trainer_runs import ROOT, run_trainer, snapshot, start_trainer, stop_process, trainer_cmd, wait_for
from trainer.faults import INF_ENV, NAN_ENV
from trainer.guard import EXIT_SAFETY_STOP

FLAGS = ("--checkpoint-every", "10", "--threads", "1")


def console(*args, timeout=60):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "console", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env=env)


def run_with(run: Path, env: dict[str, str], *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run(trainer_cmd(run, *FLAGS, *flags), cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, **env})


def no_temporaries(run: Path) -> bool:
    return not [p for p in run.iterdir() if p.name.startswith(TMP_PREFIX)]


def assert_checkpoints_intact(run: Path) -> list[int]:
    steps = []
    for info in list_checkpoints(run):
        assert info.status == "complete", (info.path.name, info.reason)
        assert verify_checksum(info) is None
        steps.append(info.step)
    return steps


# -- disk full -------------------------------------------------------------------------

@pytest.mark.parametrize("async_checkpoint", [True, False])
def test_enospc_keeps_the_previous_checkpoint_and_retries_at_the_next_cadence(trainer_run, reliability_report,
                                                                             async_checkpoint):
    """ENOSPC inside a checkpoint write: in the background (the default) and synchronously."""
    run = trainer_run("enospc", async_checkpoint=async_checkpoint)
    assert run_trainer(run, *FLAGS, "--max-steps", "10").returncode == 0
    before = (run / "step_000010.bin").read_bytes()
    # The disk is "full" for the next two checkpoint writes (steps 20 and 30), then has room.
    r = run_with(run, {ENOSPC_AFTER_ENV: "100000", ENOSPC_WRITES_ENV: "2"}, "--max-steps", "40")
    assert r.returncode == 0, r.stderr
    failed = events(run, "checkpoint_failed")
    assert [(e["step"], e["reason"], e["errno"]) for e in failed] == [(20, "cadence", 28), (30, "cadence", 28)]
    assert all(e["background"] is async_checkpoint for e in failed)
    assert all("ENOSPC" in e["error"] and "free space" in e["error"] for e in failed)
    log = (run / "trainer.log").read_text()
    assert log.count("FAILED: ENOSPC") == 2 and "the newest checkpoint is step_000010.bin, intact" in log
    assert "training continues and the next checkpoint retries" in log
    assert no_temporaries(run)
    assert assert_checkpoints_intact(run) == [10, 40]               # 20 and 30 never appeared under a final name
    assert (run / "step_000010.bin").read_bytes() == before
    assert [s["step"] for s in step_lines(run)] == list(range(1, 41))  # no history line lost

    # Resolved by the checkpoint at step 40: the console no longer raises it.
    assert "checkpoint FAILED" not in console(run, "--once").stdout
    if async_checkpoint:
        reliability_report("disk full (write hook)", failed_writes=len(failed), lost_history_lines=0)


def steps_since_resume(run: Path, nth: int) -> int:
    """How many step lines follow the ``nth`` resume event (0 while there is none)."""
    seen, count = 0, 0
    for line in lines(run):
        if line.get("event") == "resume":
            seen += 1
        elif seen >= nth and "event" not in line:
            count += 1
    return count


def test_enospc_on_the_final_checkpoint_exits_3_with_the_previous_one_intact(trainer_run):
    run = trainer_run("enospc-final")
    assert run_trainer(run, *FLAGS, "--max-steps", "10").returncode == 0
    r = run_with(run, {ENOSPC_AFTER_ENV: "100000"}, "--max-steps", "25")
    assert r.returncode == EXIT_SAFETY_STOP
    assert "the final checkpoint at step 25 could not be written; the newest checkpoint is step_000010.bin, intact" \
        in r.stderr
    assert assert_checkpoints_intact(run) == [10] and no_temporaries(run)
    assert [s["step"] for s in step_lines(run)] == list(range(1, 26))
    assert not (run / ".trainer.json").exists()
    # A SIGTERM's checkpoint that cannot be written: the same, and the run resumes from step 10.
    env = {**os.environ, ENOSPC_AFTER_ENV: "100000", "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(trainer_cmd(run, *FLAGS), cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        # A step of this process: the lines after its resume event (the last run's step 25 is older).
        wait_for(lambda: steps_since_resume(run, 2) >= 2, what="training")
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        stop_process(proc)
    assert proc.returncode == EXIT_SAFETY_STOP, err
    assert "the stop checkpoint at step" in err and "step_000010.bin, intact" in err
    assert assert_checkpoints_intact(run) == [10] and no_temporaries(run)
    # Unresolved: the console raises it.
    out = console(run, "--once").stdout
    assert "checkpoint FAILED at step" in out and "ENOSPC" in out
    r = run_trainer(run, *FLAGS, "--max-steps", "12")
    assert r.returncode == 0 and events(run, "resume")[-1]["from_step"] == 10


def test_a_real_full_disk(tmp_path, reliability_report):
    """The same on a real 2.1 MiB tmpfs (needs root and mount; skipped elsewhere): three
    checkpoints fit, the fourth does not. Then the disk is filled to the last byte, so that
    not even a history line fits: the trainer stops with exit 3, nothing written is damaged,
    and once space is freed it resumes."""
    disk = tmp_path / "disk"
    if not mount_tmpfs(disk, "2150k"):
        pytest.skip("cannot mount a tmpfs here (not root, or no mount permission)")
    try:
        from tests.trainer.trainer_runs import make_trainer_run
        run = make_trainer_run(disk / "run")
        proc = start_trainer(run, *FLAGS)
        try:
            wait_for(lambda: len(events(run, "checkpoint_failed")) >= 2, what="the disk filling up")
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=60)
        finally:
            stop_process(proc)
        assert proc.returncode == EXIT_SAFETY_STOP, err
        assert "could not be written" in err
        first = events(run, "checkpoint_failed")[0]
        assert first["errno"] == 28 and "No space left on device" in first["error"]
        kept = assert_checkpoints_intact(run)
        assert kept == [10, 20, 30] and first["step"] == 40 and no_temporaries(run)
        steps = [s["step"] for s in step_lines(run)]
        assert steps == list(range(1, steps[-1] + 1))

        # Not a byte left: the next history line cannot be appended.
        proc = start_trainer(run, *FLAGS)
        try:
            wait_for(lambda: len(events(run, "resume")) == 1, what="the resume")
            fd = os.open(disk / "filler", os.O_WRONLY | os.O_CREAT, 0o644)
            try:
                while True:
                    os.write(fd, b"\0" * 4096)
            except OSError:
                pass
            finally:
                os.close(fd)
            _, err = proc.communicate(timeout=60)
        finally:
            stop_process(proc)
        assert proc.returncode == EXIT_SAFETY_STOP, err
        assert "cannot append to .loss.json: ENOSPC" in err and "Traceback" not in err
        (disk / "filler").unlink()
        assert assert_checkpoints_intact(run) == kept and no_temporaries(run)
        for old in run.glob("step_000010.*"):        # room for one more checkpoint
            old.unlink()
        r = run_trainer(run, *FLAGS, "--max-steps", "35")
        assert r.returncode == 0, r.stderr
        assert events(run, "resume")[-1]["from_step"] == 30 and events(run, "resume")[-1]["exact"]

        # Full again (20, 30 and 35 on disk): with a policy that keeps two, the disk guard prunes
        # before the write instead of failing, and the run goes on.
        failed_before = len(events(run, "checkpoint_failed"))
        r = run_trainer(run, *FLAGS, "--max-steps", "60", "--keep-last", "2")
        assert r.returncode == 0, r.stderr
        assert len(events(run, "checkpoint_failed")) == failed_before
        first_prune = next(e for e in events(run, "prune") if e["step"] > 35)
        assert first_prune["steps"] == [20] and first_prune["step"] == 40       # before step 40's write
        assert assert_checkpoints_intact(run) == [50, 60] and no_temporaries(run)
        reliability_report("disk full (real tmpfs)", checkpoints_kept=len(kept), failed_checkpoint_writes=len(
            events(run, "checkpoint_failed")), stopped_on_history_append=1)
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)


# -- divergence ------------------------------------------------------------------------

def test_a_single_nan_or_inf_is_recorded_skipped_and_raised_by_the_console(trainer_run):
    run = trainer_run("blip")
    r = run_with(run, {NAN_ENV: "15", INF_ENV: "17"}, "--max-steps", "30")
    assert r.returncode == 0, r.stderr
    lines = {s["step"]: s for s in step_lines(run)}
    raw = (run / ".loss.json").read_bytes()
    assert b'"loss":null' in raw and b"NaN" not in raw        # docs/contract.md#lossjson-the-history: null + nonfinite
    assert lines[15]["loss"] is None and lines[15]["nonfinite"] == "nan" and lines[15]["skipped"] == "nonfinite loss"
    assert lines[17]["loss"] is None and lines[17]["nonfinite"] == "inf"
    assert all(lines[s]["loss"] is not None for s in lines if s not in (15, 17))
    data = json.loads(console(run, "--json").stdout)
    assert data["history"]["nonfinite"] == 2 and data["history"]["last_nonfinite_step"] == 17
    assert any("2 non-finite loss values, the last at step 17" in p for p in data["problems"])

    from console.read.reader import RunReader
    reader = RunReader(run)
    _, notices = reader.read()
    assert any(n.level == "error" and "non-finite loss at step 15, 17" in n.text for n in notices)


def test_divergence_stops_with_a_checkpoint_of_the_last_good_state(trainer_run, reliability_report):
    run = trainer_run("diverged", max_nonfinite=5)
    r = run_with(run, {NAN_ENV: "23-1000"}, "--max-steps", "100")
    assert r.returncode == EXIT_SAFETY_STOP
    assert "5 non-finite steps in a row (run.max_nonfinite = 5): the run diverged" in r.stderr
    assert "the checkpoint at step 27 holds weights, m and v of step 22" in r.stderr
    [stop] = events(run, "stop")
    assert stop["reason"] == "nonfinite" and stop["step"] == 27 and stop["last_good_step"] == 22
    assert [s["step"] for s in step_lines(run)] == list(range(1, 28))
    assert assert_checkpoints_intact(run) == [10, 20, 27]
    assert not (run / ".trainer.json").exists()
    # Nothing non-finite reached the weights or the moments.
    last = open_checkpoint(run / "step_000027.bin")
    for arr in (last.weights, last.m, last.v):
        assert np.isfinite(arr).all()
    out = console(run, "--once").stdout
    assert "trainer stopped: the run diverged at step 27 (5 non-finite steps in a row)" in out
    reliability_report("divergence", nonfinite_steps=5, exit_status=r.returncode)


def test_max_nonfinite_zero_never_stops(trainer_run):
    run = trainer_run("tolerant", max_nonfinite=0)
    r = run_with(run, {NAN_ENV: "3-14"}, "--max-steps", "20")
    assert r.returncode == 0, r.stderr
    assert sum(1 for s in step_lines(run) if s["loss"] is None) == 12


# -- a stalled trainer, and a second trainer that changes nothing -----------------------

def test_a_stopped_process_is_shown_suspended_and_a_second_trainer_changes_nothing(trainer_run, reliability_report):
    run = trainer_run("stalled")
    proc = start_trainer(run, "--checkpoint-every", "100000")
    try:
        wait_for(lambda: step_lines(run) and step_lines(run)[-1]["step"] >= 20, what="training")
        data = json.loads(console(run, "--json", "--stall-after", "1").stdout)
        assert data["trainer"]["state"] == "running" and not data["trainer"]["stalled"]
        os.kill(proc.pid, signal.SIGSTOP)
        try:
            time.sleep(1.5)
            data = json.loads(console(run, "--json", "--stall-after", "1").stdout)
            t = data["trainer"]
            # Stalled, and why: the kernel stopped it (it used to say only "stalled").
            assert t["state"] == "running" and t["label"] == "suspended" and t["stalled"] and t["stalled_for"] > 1
            assert t["stall_threshold"] == 1 and t["suspended"].startswith("stopped by a signal (state T")
            assert any(p.startswith("trainer STALLED: no new step for") and "stopped by a signal (state T" in p
                       for p in data["problems"])
            once = console(run, "--once", "--stall-after", "1").stdout
            assert "trainer      suspended · pid" in once and "(STALLED: no new step for" in once
            # The default threshold (60 s) is not reached.
            assert not json.loads(console(run, "--json").stdout)["trainer"]["stalled"]

            # While the first trainer holds the lock, a second one refuses and touches nothing.
            before = snapshot(run)
            r = run_trainer(run, "--max-steps", "5")
            assert r.returncode == 2 and "another trainer is training this run directory" in r.stderr
            assert r.stderr.count("\n") == 1
            assert snapshot(run) == before
        finally:
            os.kill(proc.pid, signal.SIGCONT)
        step = step_lines(run)[-1]["step"]
        wait_for(lambda: step_lines(run)[-1]["step"] > step, what="training after SIGCONT")
        assert not json.loads(console(run, "--json", "--stall-after", "1").stdout)["trainer"]["stalled"]
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        stop_process(proc)
    assert proc.returncode == 0, err
    reliability_report("stall", detected_after_s=1.5)


def test_stall_after_must_be_positive(tmp_path):
    r = console(tmp_path, "--once", "--stall-after", "0")
    assert r.returncode == 2 and "--stall-after" in r.stderr
