"""Signals under pressure, against a real trainer: two consoles at once, a SIGUSR1 storm,
SIGTERM during sample generation, SIGINT twice during a checkpoint write. (SIGTERM during a
checkpoint write and the lock against a second trainer are in tests/trainer/test_cli_signals.py;
a second trainer that changes nothing is in test_faults.py.)"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest

from rundir import list_checkpoints, load_run_config, read_samples, verify_checksum, write_run_config
from rundir.checkpoint import SLOW_WRITE_ENV
from tests.trainer.trainer_runs import (
    ROOT,
    events,
    start_trainer,
    step_lines,
    stop_cleanly,
    stop_process,
    trainer_cmd,
    wait_for,
)


def last_step(run) -> int:
    lines = step_lines(run)
    return lines[-1]["step"] if lines else 0


def console_proc(*args) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "console", *map(str, args)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def all_complete(run) -> int:
    infos = list_checkpoints(run)
    for info in infos:
        assert info.status == "complete" and verify_checksum(info) is None, (info.path.name, info.reason)
    return len(infos)


def one_checkpoint_per_step(run) -> list[int]:
    steps = [e["step"] for e in events(run, "checkpoint")]
    assert all(n == 1 for n in Counter(steps).values()), steps
    return steps


def test_two_consoles_at_once_are_harmless(trainer_run):
    run = trainer_run("two-consoles")
    proc = start_trainer(run, "--checkpoint-every", "100000")
    try:
        wait_for(lambda: last_step(run) >= 10 and (run / ".trainer.json").exists(), what="training")
        procs = [console_proc(run, "--once"), console_proc(run, "--once"),
                 console_proc(run, "--checkpoint", "--timeout", "60"),
                 console_proc(run, "--checkpoint", "--timeout", "60")]
        results = [(p.wait(timeout=120), *p.communicate()) for p in procs]
        for code, out, err in results:
            assert code == 0, err
        for code, out, err in results[:2]:
            assert "trainer      running" in out
        paths = [out.strip() for _, out, _ in results[2:]]
        # One checkpoint each, or one for both (two SIGUSR1 within one step coalesce).
        assert all(p.endswith(".bin") for p in paths)
        assert 1 <= len(set(paths)) <= 2
        steps = one_checkpoint_per_step(run)
        assert 1 <= len(steps) <= 2
        err = stop_cleanly(proc)
    finally:
        stop_process(proc)
    assert proc.returncode == 0, err
    all_complete(run)


def test_a_sigusr1_storm_gives_at_most_one_checkpoint_per_step(trainer_run, reliability_report):
    run = trainer_run("storm", keep_last=0)        # every checkpoint stays, to be counted
    proc = start_trainer(run, "--checkpoint-every", "100000")
    try:
        wait_for(lambda: last_step(run) >= 5 and (run / ".trainer.json").exists(), what="training")
        start = time.monotonic()
        for _ in range(100):
            os.kill(proc.pid, signal.SIGUSR1)
            time.sleep(0.0095)
        elapsed = time.monotonic() - start        # about 1 s; more on a loaded machine (reported, not asserted)
        wait_for(lambda: events(run, "signal") and last_step(run) > max(e["step"] for e in events(run, "signal")),
                 what="training after the storm")
        err = stop_cleanly(proc)
    finally:
        stop_process(proc)
    assert proc.returncode == 0, err
    steps = one_checkpoint_per_step(run)
    received = sum(1 for e in events(run, "signal") if e["signal"] == "SIGUSR1")
    # The kernel may merge a pending SIGUSR1 with the next one: received <= 100.
    assert 1 <= received <= 100
    assert steps[-1] == last_step(run) and events(run, "stop")[-1]["reason"] == "signal"
    n = all_complete(run)
    reliability_report("SIGUSR1 storm", sent=100, received=received, checkpoints=n,
                       steps_spanned=last_step(run), storm_s=round(elapsed, 2))


def test_sigterm_during_sample_generation_finishes_it_then_checkpoints_and_exits_0(trainer_run):
    run = trainer_run("sampling", sample_every=25, checkpoint_every=100000)
    config = load_run_config(run)
    config.samples.max_new_tokens = 4000          # about a second of generation per audit
    write_run_config(run, config)
    proc = start_trainer(run)
    try:
        wait_for(lambda: last_step(run) >= 25, what="step 25 (its sample audit starts)", timeout=120)
        proc.send_signal(signal.SIGTERM)
        # The audit of step 25 had not been written yet when the signal was sent.
        assert not [s for s in (read_samples(run).value or []) if s.step == 25]
        _, err = proc.communicate(timeout=60)
    finally:
        stop_process(proc)
    assert proc.returncode == 0, err
    assert last_step(run) == 25
    samples = [s for s in read_samples(run).value if s.step == 25]
    assert len(samples) == 3 and all(len(s.completion) for s in samples)       # the audit completed
    [ckpt] = events(run, "checkpoint")
    assert ckpt["step"] == 25 and ckpt["reason"] == "signal"
    [sig] = events(run, "signal")
    assert sig["signal"] == "SIGTERM" and sig["step"] == 25
    assert all_complete(run) == 1 and not (run / ".trainer.json").exists()


@pytest.mark.parametrize("async_checkpoint", [False, True])
def test_sigint_twice_during_a_checkpoint_write_exits_0_after_it(trainer_run, async_checkpoint):
    run = trainer_run("sigint", async_checkpoint=async_checkpoint)
    env = {**os.environ, SLOW_WRITE_ENV: "0.3", "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(trainer_cmd(run, "--checkpoint-every", "30"), cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: any(p.name.startswith(".tmp-step_000030.bin") for p in run.iterdir()),
                 what="the step-30 checkpoint being written")
        proc.send_signal(signal.SIGINT)
        time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        stop_process(proc)
    assert proc.returncode == 0, err
    assert "KeyboardInterrupt" not in err
    stopped_at = last_step(run)
    expected = [(30, "cadence")] + ([(stopped_at, "signal")] if async_checkpoint else [])
    assert stopped_at > 30 if async_checkpoint else stopped_at == 30
    assert [(e["step"], e["reason"]) for e in events(run, "checkpoint")] == expected
    sigs = events(run, "signal")
    assert 1 <= len(sigs) <= 2 and all(s["signal"] == "SIGINT" and s["step"] == stopped_at for s in sigs)
    assert sigs[0]["during_checkpoint"] is True
    assert events(run, "stop")[-1]["reason"] == "signal"
    assert all_complete(run) == len(expected) and not [p for p in run.iterdir() if p.name.startswith(".tmp-")]
