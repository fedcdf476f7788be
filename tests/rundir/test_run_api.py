"""The run API (rundir.open_run): what it writes, the signals and requests it answers, each
bad use's one line, and a kill -9 of a trainer that uses it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import rundir
from rundir import LossHistory, RunConfig, RunError, load_run_config, open_run, verify_trainer, write_run_config
from rundir.checkpoint_request import write_request
from rundir.external import external_checkpoints
from rundir.layout import LOSS_JSON, TRAINER_JSON
from tests.processes import until
from tests.rundirs import read_history as history

ROOT = Path(__file__).resolve().parents[2]


def test_a_run_writes_the_contract_and_finishes_cleanly(tmp_path):
    run_dir = tmp_path / "x"
    with open_run(run_dir, config={"lr": 3e-4, "layers": [1, 2], "skip": None, "nested": {"dtype": object}}) as run:
        record = json.loads((run_dir / TRAINER_JSON).read_text())
        assert record["pid"] == os.getpid()
        run.log(1, loss=2.5, lr=1e-3, grad_norm=0.5, tokens=64)
        run.log(2, loss=float("nan"), lr=1e-3, tokens=128.0, arm="web", mfu=0.31)
    assert not (run_dir / TRAINER_JSON).exists()                # removed on a clean finish
    config = load_run_config(run_dir)
    assert config.config is not None and config.config["lr"] == 3e-4 and config.config["layers"] == [1, 2]
    assert "skip" not in config.config and config.config["nested"]["dtype"] == str(object)
    assert not config.arms
    h = history(run_dir)
    assert list(h.step) == [1, 2] and h.loss[0] == 2.5 and h.nonfinite == 1 and h.bad_lines == 0
    lines = [json.loads(line) for line in (run_dir / LOSS_JSON).read_text().splitlines()]
    assert lines[2]["tokens"] == 128 and lines[2]["arm"] == "web" and lines[2]["mfu"] == 0.31
    assert [e.event for e in h.events] == ["start", "stop"] and h.events[-1].data["reason"] == "finished"
    with open_run(run_dir) as again:                            # the same run, on: its config kept
        assert again.last_step == 2
    assert load_run_config(run_dir).config["lr"] == 3e-4


def test_signals_and_the_request_file_set_flags_answered_by_a_saved_checkpoint(tmp_path):
    run_dir = tmp_path / "x"
    with open_run(run_dir) as run:
        run.log(1, loss=1.0)
        assert not run.checkpoint_requested and not run.stop_requested
        os.kill(os.getpid(), signal.SIGUSR1)
        until(lambda: run.checkpoint_requested, what="SIGUSR1 seen")
        saved = run_dir / "checkpoints" / "step-1"
        saved.mkdir(parents=True)
        (saved / "model.bin").write_bytes(b"x" * 1000)
        run.checkpoint_saved(1, saved, checksum="sha256:00")
        assert not run.checkpoint_requested
        write_request(run_dir, run.record)                     # a console on another node
        until(lambda: run.checkpoint_requested, what="the request taken")
        run.log(2, loss=0.9)
        (run_dir / "own.pt").write_bytes(b"y" * 10)
        run.checkpoint_saved(2, run_dir / "own.pt")
        os.kill(os.getpid(), signal.SIGTERM)
        until(lambda: run.stop_requested, what="SIGTERM seen")
        assert run.checkpoint_requested                         # a stop asks for a checkpoint first
    h = history(run_dir)
    found = external_checkpoints(h.events)
    assert [(e.step, e.path, e.size, e.checksum, e.reason) for e in found] == [
        (1, "checkpoints/step-1", 1000, "sha256:00", "signal"), (2, "own.pt", 10, None, "signal")]
    signals = [e.data["signal"] for e in h.events if e.event == "signal"]
    assert signals == ["SIGUSR1", "checkpoint request", "SIGTERM"]
    assert h.events[-1].event == "stop" and h.events[-1].data["reason"] == "signal"
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL      # the handlers put back


def test_a_stop_after_the_checkpoint_look_of_a_step_is_the_next_steps(tmp_path):
    """The loop reads checkpoint_requested, then stop_requested (examples/train_loop.py, the
    integrations): a SIGTERM between the two reads is answered at the next step, checkpoint and
    stop together, not by a stop without the checkpoint (a Hugging Face run stopped so once)."""
    run_dir = tmp_path / "x"
    with open_run(run_dir) as run:
        run.log(1, loss=1.0)
        assert not run.checkpoint_requested
        os.kill(os.getpid(), signal.SIGTERM)
        assert not run.stop_requested
        run.log(2, loss=0.9)                                    # not ended as a stop the loop ignored
        assert run.checkpoint_requested and run.stop_requested
        (run_dir / "own.pt").write_bytes(b"y" * 10)
        run.checkpoint_saved(2, run_dir / "own.pt")
    h = history(run_dir)
    assert [(e.step, e.reason) for e in external_checkpoints(h.events)] == [(2, "signal")]
    assert [e.data["signal"] for e in h.events if e.event == "signal"] == ["SIGTERM"]
    assert h.events[-1].event == "stop" and h.events[-1].data["reason"] == "signal"


def test_a_run_that_leaves_sigusr1_to_a_framework_is_asked_through_the_request_file(tmp_path):
    """Lightning's SLURM requeue keeps SIGUSR1: the run puts the previous handler back, its
    record says so, and the console's checkpoint request (signal_trainer, SIGUSR1) becomes the
    request file, taken as before; SIGUSR1 itself reaches the framework's handler only."""
    run_dir, got = tmp_path / "x", []
    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: got.append(signum))
    try:
        with open_run(run_dir) as run:
            run.log(1, loss=1.0)
            run.leave_checkpoint_signal()
            assert json.loads((run_dir / TRAINER_JSON).read_text())["checkpoint_requests"] == "file"
            os.kill(os.getpid(), signal.SIGUSR1)
            until(lambda: got, what="the framework's handler")
            assert not run.checkpoint_requested
            console = subprocess.run([sys.executable, "-c", "import rundir, signal, sys; v = rundir.signal_trainer("
                                      "sys.argv[1], signal.SIGUSR1); print(v.ok, v.requested, v.reason)", str(run_dir)],
                                     capture_output=True, text=True, timeout=60, cwd=ROOT)
            assert console.stdout.startswith("True True"), console.stdout + console.stderr
            until(lambda: run.checkpoint_requested, what="the request taken")
            (run_dir / "own.pt").write_bytes(b"y" * 10)
            run.checkpoint_saved(1, run_dir / "own.pt")
        assert len(got) == 1 and signal.getsignal(signal.SIGUSR1) is not signal.SIG_DFL     # the framework's, kept
    finally:
        signal.signal(signal.SIGUSR1, previous)
    signals = [e.data["signal"] for e in history(run_dir).events if e.event == "signal"]
    assert signals == ["checkpoint request"]


def test_a_second_ctrl_c_interrupts_a_loop_that_does_not_look(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        with open_run(tmp_path / "x"):
            os.kill(os.getpid(), signal.SIGINT)                # the first only asks for a stop
            time.sleep(0.05)
            os.kill(os.getpid(), signal.SIGINT)
            until(lambda: False, timeout=10, what="the second SIGINT")
    assert history(tmp_path / "x").events[-1].data["reason"] == "interrupted"


def _one_line(err: pytest.ExceptionInfo) -> str:
    text = str(err.value)
    assert "\n" not in text and text
    return text


def test_each_bad_use_is_one_clear_line(tmp_path):
    run_dir = tmp_path / "x"
    with open_run(run_dir) as run:
        with pytest.raises(RunError) as err:
            open_run(run_dir)
        assert "another trainer is training this run directory" in _one_line(err)
        with pytest.raises(RunError) as err:
            run.log(1, loss="low")
        assert "loss = 'low' is not a number" in _one_line(err)
        with pytest.raises(RunError) as err:
            run.log(1, loss=1.0, extra=[1, 2])
        assert "extra" in _one_line(err)
        with pytest.raises(RunError) as err:
            run.log(1.5, loss=1.0)
        assert "is not an integer from 0 to 2**63 - 1" in _one_line(err)
        run.log(5, loss=1.0)
        with pytest.raises(RunError) as err:
            run.log(3, loss=1.0)
        assert "step 3 goes back" in _one_line(err) and "run.resumed" in str(err.value)
        run.resumed(2, run_dir / "somewhere.pt")
        run.log(3, loss=1.0)                                    # after the resume event, allowed
        with pytest.raises(RunError) as err:
            run.checkpoint_saved(3, run_dir / "missing.pt")
        assert "missing.pt" in _one_line(err)
        with pytest.raises(RunError) as err:
            run.agree(-1)
        assert _one_line(err) == "run.agree: step -1 is not an integer from 0 to 2**63 - 1"
    with pytest.raises(RunError) as err:
        run.log(6, loss=1.0)
    assert "finished" in _one_line(err)
    resume = [e for e in history(run_dir).events if e.event == "resume"]
    assert resume[0].data["from_step"] == 2 and resume[0].data["rerun"] == {"from": 3, "to": 5}
    ours = tmp_path / "ours"
    ours.mkdir()
    write_run_config(ours, RunConfig.from_preset("micro"))
    with pytest.raises(RunError) as err:
        open_run(ours, config={"lr": 1})
    assert "andrea-train's run" in _one_line(err)


LOOP = """
import sys, rundir
run = rundir.open_run(sys.argv[1], config={"lr": 1e-3})
step = run.last_step or 0
while True:
    step += 1
    run.log(step, loss=1.0 / step, lr=1e-3, grad_norm=0.5, tokens=step * 64, note=float(step))
"""


def test_a_kill_9_leaves_a_history_read_with_at_most_a_torn_tail(tmp_path):
    run_dir = tmp_path / "x"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", LOOP, str(run_dir)], env=env)
    try:
        until(lambda: (run_dir / LOSS_JSON).exists() and (run_dir / LOSS_JSON).stat().st_size > 200_000,
              what="a history being written")
        assert verify_trainer(run_dir).ok                       # verified though its argv names no trainer
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    h = history(run_dir)
    assert h.bad_lines == 0 and h.error is None and len(h.step) > 1000
    assert h.torn_tail < 200                                    # at most a part of one line
    assert verify_trainer(run_dir).state == "stale"
    r = subprocess.run([sys.executable, "-m", "console", str(run_dir), "--json"], capture_output=True, text=True,
                       env=env, cwd=ROOT, timeout=120)
    report = json.loads(r.stdout)
    assert report["trainer"]["state"] == "stale" and report["history"]["steps"] == len(h.step)
    with open_run(run_dir) as run:                              # the lock went with the process
        assert run.last_step == int(h.step[-1])
        run.log(run.last_step + 1, loss=0.5)
    again = history(run_dir)
    # A SIGKILL can cut a write between pages; the next writer ends that torn line first, so it
    # is one unreadable line (docs/contract.md), never glued onto the resumed step.
    assert again.bad_lines == (1 if h.torn_tail else 0) and int(again.step[-1]) == int(h.step[-1]) + 1
    assert len(again.step) == len(h.step) + 1


def test_importing_rundir_imports_no_framework():
    code = ("import sys, rundir, rundir.integrations.lightning, rundir.integrations.transformers; "
            "rundir.open_run; bad = [m for m in ('torch', 'lightning', 'transformers') if m in sys.modules]; "
            "assert not bad, bad")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr
    assert rundir.open_run is open_run


def test_external_checkpoint_events_are_read_with_care(tmp_path):
    """Another writer's events: only a step and a path make one; a bad size or time is dropped."""
    from rundir import LossHistoryWriter

    path = tmp_path / LOSS_JSON
    with LossHistoryWriter(path) as writer:
        writer.event("external_checkpoint", step=5, time=10.0, path="a.pt", size=7, checksum="c", reason="signal")
        writer.event("external_checkpoint", step=6, time=float("inf"), path="b\x1b[31m", size=-1)
        writer.event("external_checkpoint", step=7, time=1.0, size=3)             # no path: not one
        writer.event("external_checkpoint", path="c.pt", size=3)                  # no step: not one
        writer.event("checkpoint", step=8, path="step_000008.bin")                # ours: not external
    h = LossHistory(path)
    h.refresh()
    found = external_checkpoints(h.events)
    assert [(e.step, e.path, e.size, e.time, e.checksum, e.reason) for e in found] == [
        (5, "a.pt", 7, 10.0, "c", "signal"), (6, "b\x1b[31m", None, None, None, "")]


def test_a_run_whose_lock_was_taken_over_writes_nothing_more(tmp_path):
    """What the lock's heartbeat says when another trainer took the run (this one frozen past
    the bound): every later call refuses in one line, and finishing leaves the new holder's
    record and history alone."""
    run = open_run(tmp_path / "x", config={"lr": 1e-3})
    run.log(1, loss=2.0)
    run._lock.on_lost("x/.lock-owner.json is no longer this trainer's lock (it names pid 7 on gpu-node-7)")
    with pytest.raises(RunError, match="another trainer took this run over") as refused:
        run.log(2, loss=1.9)
    assert "\n" not in str(refused.value)
    size = (tmp_path / "x" / ".loss.json").stat().st_size
    run.finish()
    assert (tmp_path / "x" / ".loss.json").stat().st_size == size        # no stop event of ours
    assert (tmp_path / "x" / ".trainer.json").exists()                    # not ours to remove any more


def test_a_step_logged_in_several_calls_is_one_step_whose_fields_merge(tmp_path):
    """run.log(s, loss=...) then run.log(s, val_loss=...): one step with both (the newest line,
    written with the fields of the calls before it); no rewind, no non-finite loss, no resume
    check compares the two lines; a step with no loss at all is absent, not non-finite."""
    from console.actions.alerts import check_report
    from console.read.reader import RunReader

    run_dir = tmp_path / "x"
    with open_run(run_dir) as run:
        for s in range(1, 201):
            run.log(s, loss=3.0 - s / 100 if s % 10 == 0 else None, lr=1e-3)
            if s % 50 == 0:
                run.log(s, val_loss=2.5)
    with open_run(run_dir) as run:                          # a second process: a resume from 150
        run.resumed(150)
        for s in range(151, 211):
            run.log(s, loss=3.0 - s / 100 if s % 10 == 0 else None, lr=1e-3)
            if s % 50 == 0:
                run.log(s, val_loss=2.4)
                run.log(s, loss=0.5)                        # a later call's value wins
    h = history(run_dir)
    assert h.nonfinite == 0 and h.rewind_count == 1         # the resume's, none for a repeated step
    at = {int(s): i for i, s in enumerate(h.step)}
    assert h.loss[at[200]] == 0.5 and h.loss[at[100]] == pytest.approx(2.0)
    lines = [json.loads(line) for line in (run_dir / LOSS_JSON).read_text().splitlines()]
    last_100 = [rec for rec in lines if rec.get("step") == 100 and "event" not in rec][-1]
    assert last_100["loss"] == pytest.approx(2.0) and last_100["val_loss"] == 2.5
    snap, _ = RunReader(run_dir).read()
    assert snap.history.last_step == 210 and snap.history.last_loss == pytest.approx(0.9)
    assert [c.verdict for c in snap.history.resume_checks if c.verdict == "diverged"] == []
    code, lines = check_report(snap)
    assert code == 0, lines


def test_hostile_inputs_are_each_one_clear_line_and_write_nothing(tmp_path):
    run_dir = tmp_path / "x"
    with open_run(run_dir) as run:
        run.log(1, loss=2.0)
        before = (run_dir / LOSS_JSON).read_bytes()
        cases = [
            (lambda: run.log(2, loss=1.0, m=2**64), "run.log: m = 18446744073709551616 is past 64 bits"),
            (lambda: run.log(2**63, loss=1.0),
             "run.log: step 9223372036854775808 is not an integer from 0 to 2**63 - 1"),
            (lambda: run.checkpoint_saved(2**64, run_dir / LOSS_JSON),
             "run.checkpoint_saved: step 18446744073709551616"),
            (lambda: run.checkpoint_saved(2, bytes(run_dir / LOSS_JSON)), "run.checkpoint_saved: path b'"),
            (lambda: run.log(2, loss=1.0, event=3.0), "run.log: a metric may not be named 'event'"),
            (lambda: run.log(2, loss=1.0, time=3.0), "run.log: a metric may not be named 'time'"),
            (lambda: run.log(2, loss=1.0, **{'a"b': 1.0}), "run.log: metric name 'a\"b' is empty or holds a quote"),
            (lambda: run.log(2, loss=1.0, **{"a\\b": 1.0}), "holds a quote, a backslash or a control character"),
            (lambda: run.log(2, loss=1.0, **{"a\x01b": 1.0}), "holds a quote, a backslash or a control character"),
        ]
        for call, says in cases:
            with pytest.raises(RunError) as caught:
                call()
            assert says in str(caught.value) and "\n" not in str(caught.value), (says, str(caught.value))
        assert (run_dir / LOSS_JSON).read_bytes() == before          # nothing written
        run.log(2, loss=1.0, m=2**62)                                # the run goes on
    looped: dict = {}
    looped["self"] = looped
    deep: dict = {}
    node = deep
    for _ in range(1000):
        node["k"] = {}
        node = node["k"]
    for config in (looped, deep):
        with pytest.raises(RunError, match=r"^open_run: the config is nested more than 32 levels deep \(or holds "
                                           r"itself\)$"):
            open_run(tmp_path / "y", config=config)
    with pytest.raises(RunError, match=r"^open_run: path b'.* is not text \(a str or a pathlib.Path\)$"):
        open_run(bytes(tmp_path / "z"))
    assert not (tmp_path / "z").exists()


def test_a_checkpoint_saved_over_one_path_is_one_checkpoint(tmp_path, monkeypatch):
    """nanoGPT saves over one ckpt.pt: one checkpoint, its newest step, in the listing (the
    console's --json and --once read it); another path is another. A directory too big to be one
    checkpoint ("/") is refused in one line, not walked whole."""
    from rundir import external
    from tests.console.test_cli import console

    run_dir = tmp_path / "x"
    with open_run(run_dir) as run:
        for step in (100, 200, 300):
            run.log(step, loss=2.0)
            (run_dir / "ckpt.pt").write_bytes(b"w" * step)
            run.checkpoint_saved(step, run_dir / "ckpt.pt")
        (run_dir / "best.pt").write_bytes(b"b")
        run.checkpoint_saved(250, run_dir / "best.pt")
        big = tmp_path / "big"
        big.mkdir()
        for i in range(60):
            (big / str(i)).write_bytes(b"")
        monkeypatch.setattr(external, "MAX_CHECKPOINT_ENTRIES", 50)
        with pytest.raises(RunError, match="holds more than 50 entries: not one checkpoint"):
            run.checkpoint_saved(300, big)
    listed = external_checkpoints(history(run_dir).events)
    assert [(e.path, e.step, e.size) for e in listed] == [("ckpt.pt", 300, 300), ("best.pt", 250, 1)]
    data = json.loads(console(run_dir, "--json").stdout)
    assert [(e["path"], e["step"]) for e in data["external_checkpoints"]] == [("ckpt.pt", 300), ("best.pt", 250)]
    assert data["newest_checkpoint"] == "best.pt"             # the one --once names, as --once does
    once = console(run_dir, "--once").stdout
    assert "checkpoints (2)" in once and "checkpoint   best.pt (step 250, " in once


def test_a_new_config_keeps_what_the_operator_set_in_run_toml(tmp_path):
    """open_run(config=...) on a run whose run.toml an operator extended (max_steps for the ETA,
    retention, alert thresholds) replaces [config] only: [run] and [alerts] stay as written."""
    run_dir = tmp_path / "x"
    with open_run(run_dir, config={"lr": 1e-3}) as run:
        run.log(1, loss=1.0)
    text = (run_dir / "run.toml").read_text().replace('preset = "custom"', 'preset = "custom"\nmax_steps = 500\n'
                                                      'keep_last = 2')
    (run_dir / "run.toml").write_text(text + "\n[alerts]\nk = 4.0\n")
    with open_run(run_dir, config={"lr": 2e-3}) as run:
        run.log(2, loss=0.9)
    config = load_run_config(run_dir)
    assert (config.run.name, config.run.max_steps, config.run.keep_last) == ("x", 500, 2)
    assert config.alerts.k == 4.0 and config.config == {"lr": 2e-3}
