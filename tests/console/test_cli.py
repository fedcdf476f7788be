"""The scriptable twins, run as the operator runs them: a subprocess each."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.rundirs import DEAD_PID, EPOCH

ROOT = Path(__file__).resolve().parents[2]


def console(*args, timeout=60):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "console", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env=env)


def test_once_prints_the_dashboard_as_text(make_run_dir):
    run = make_run_dir(truncated=(200,), state_arms=("stdlib-code", "repo-docstrings"), trainer_record="stale")
    r = console(run, "--once")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "trainer      stale pid record" in out
    assert "step_000200.bin    step       200" in out and "invalid: truncated" in out
    assert "repo-docstrings" in out and "ZOMBIE: not in run.toml" in out
    assert "loss (raw + EMA" in out and "⣀" in out or "⠉" in out


def test_json_is_the_same_content(make_run_dir):
    run = make_run_dir(foreign=(100,), trainer_record="spoofed")
    r = console(run, "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["trainer"]["label"] == "not supervised" and data["trainer"]["pid"] == 1
    assert [(c["name"], c["status"]) for c in data["checkpoints"]] == [
        ("step_000100.bin", "foreign"), ("step_000200.bin", "complete"), ("step_000300.bin", "complete")]
    assert data["history"]["steps"] == 300 and len(data["arms"]) == 3


MODES = [(), ("--once",), ("--json",), ("--checkpoint",), ("--stop",), ("--pivot", "--yes"),
         ("--pivot", "--drop", "stdlib-code", "--yes"), ("--pivot-rollback",)]


@pytest.mark.parametrize("mode", MODES, ids=" ".join)
def test_a_missing_run_directory_is_one_clear_line_in_every_mode(tmp_path, mode):
    r = console(tmp_path / "nope", *mode)
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr == f"andrea-console: no such run directory: {tmp_path / 'nope'}\n"
    assert not (tmp_path / "nope").exists()


@pytest.mark.parametrize("mode", [*MODES, ("--start",)], ids=" ".join)
def test_a_file_for_a_run_directory_is_one_clear_line_in_every_mode(tmp_path, mode):
    path = tmp_path / "a-file"
    path.write_text("not a run\n")
    r = console(path, *mode)
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr == f"andrea-console: not a directory: {path} (a run directory holds the run's files)\n"
    assert path.read_text() == "not a run\n"


@pytest.mark.parametrize("start", [False, True])
def test_the_dashboard_without_a_terminal_says_so_and_suggests_once(run_dir, tmp_path, start):
    # stdout is a pipe here, as in `andrea-console RUN | less` or under cron.
    target = tmp_path / "new-run" if start else run_dir
    r = console(target, *(["--start"] if start else []))
    assert (r.returncode, r.stdout) == (2, "")
    assert "needs a terminal" in r.stderr and "--once" in r.stderr and len(r.stderr.splitlines()) == 1
    assert not (tmp_path / "new-run").exists()          # --start refused before anything was started


def test_a_pivot_dropping_an_arm_that_does_not_exist_is_refused_before_anything_happens(run_dir):
    before = {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()}
    r = console(run_dir, "--pivot", "--drop", "nosuch", "--yes", "--timeout", "5")
    assert r.returncode == 1
    assert "no arm named 'nosuch' in run.toml; arms: stdlib-code, stdlib-docstrings, pydoc-topics" in r.stderr
    assert "pivot: pivot:" not in r.stderr and r.stderr.count("\n") == 1
    assert {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()} == before   # no journal, no archive
    assert not (run_dir / "archive").exists()


def test_json_carries_rewinds_and_nonfinite_steps_through_the_prefetch(make_run_dir):
    run = make_run_dir(steps=500, checkpoints=(), nonfinite=(420,), restarts=((440, 400, 60.0, False),))
    r = console(run, "--json")
    assert r.returncode == 0, r.stderr
    h = json.loads(r.stdout)["history"]
    assert (h["nonfinite"], h["last_nonfinite_step"]) == (1, 420)
    assert h["rewinds_without_resume"] == {"count": 1, "last_steps": [401]}
    assert h["steps_per_s"] == pytest.approx(2.0)
    r = console(run, "--once")
    assert "went back to step 401 with no resume event" in r.stdout


def test_once_rounds_the_phase_counters_and_separates_thousands(make_run_dir):
    state = json.dumps({"version": 1, "step": 123456, "policy": {"caps": {}, "floors": {}}, "arms": {},
                        "phase": {"step": 123456, "explore": 0.40398253747994906, "greedy": True}})
    r = console(make_run_dir(state_text=state), "--once")
    assert r.returncode == 0, r.stderr
    assert "phase step=123,456, explore=0.404, greedy=true)" in r.stdout


def test_once_on_an_empty_directory(make_run_dir):
    r = console(make_run_dir(empty=True), "--once")
    assert r.returncode == 0 and "the run directory is empty" in r.stdout


def test_once_on_garbage_everywhere(make_run_dir):
    run = make_run_dir(state_text="\x00\x01", samples_text="{}", bad_lines=("{", "[]", '{"step": -4}'),
                       torn_tail="{\"st", trainer_record="garbage", garbage_files=("junk.bin", "step_12.bin"))
    r = console(run, "--once")
    assert r.returncode == 0, r.stderr
    assert ".state.json: not valid JSON" in r.stdout and "3 unreadable lines" in r.stdout
    assert "step_12.bin" in r.stdout and "file name is not step_NNNNNN.bin" in r.stdout
    assert ".trainer.json: not valid JSON" in r.stdout


@pytest.mark.parametrize("flag", ["--checkpoint", "--stop"])
@pytest.mark.parametrize("record, why", [
    (None, "no trainer is running"),
    ("stale", f"pid {DEAD_PID} is not running"),
    ("spoofed", "pid 1 (init)"),
    ("garbage", "not valid JSON"),
])
def test_signals_are_refused_without_a_verified_trainer(make_run_dir, flag, record, why):
    run = make_run_dir(trainer_record=record)
    r = console(run, flag, "--timeout", "2")
    assert r.returncode == 1
    assert "not sent" in r.stderr and why in r.stderr


def test_a_live_process_that_does_not_name_the_run_is_never_signalled(make_run_dir, tmp_path):
    # A real, live process with the right pid and create_time, whose command line names another
    # directory: verification fails and it must survive.
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", str(tmp_path / "elsewhere")])
    try:
        proc = psutil.Process(sleeper.pid)
        run = make_run_dir(trainer_record={"pid": sleeper.pid, "create_time": proc.create_time(),
                                           "host": socket.gethostname(), "argv": proc.cmdline(), "started": EPOCH})
        for flag in ("--stop", "--checkpoint"):
            r = console(run, flag, "--timeout", "2")
            assert r.returncode == 1 and "does not name this run directory" in r.stderr
        line = next(ln for ln in console(run, "--once").stdout.splitlines() if ln.startswith("trainer "))
        assert line.startswith("trainer      not supervised (pid ") and line.count(f"pid {sleeper.pid}") == 1, line
        time.sleep(0.2)
        assert sleeper.poll() is None
    finally:
        sleeper.kill()
        sleeper.wait()


def test_usage_errors(run_dir):
    assert console(run_dir, "--once", "--json").returncode == 2
    assert console(run_dir, "--once", "--preset", "tiny").returncode == 2
    assert console(run_dir, "--start", "--once").returncode == 2


def test_once_writes_every_step_with_thousands_separators(make_run_dir):
    """Every step the console itself writes reads 12,000, not 12000 (a sample's text, a
    trainer.log line and a file name are the run's own words, shown as they are)."""
    run = make_run_dir(steps=12_000, checkpoints=(10_000, 11_000), spikes={11_500: 30.0}, nonfinite=(11_200,),
                       restarts=((11_100, 11_000, 5.0, True),), trainer_record="stale",
                       events=({"event": "checkpoint_failed", "step": 11_900, "error": "disk full"},
                               {"event": "stop", "step": 11_950, "reason": "nonfinite", "in_a_row": 3}),
                       log_lines=("step 11990 loss 2.0",))
    r = console(run, "--once")
    assert r.returncode == 0, r.stderr
    ours = [line for line in r.stdout.splitlines()
            if not line.startswith("  step_") and "# sample at step" not in line and "step 11990 loss" not in line]
    said = "\n".join(ours)
    assert "checkpoint FAILED at step 11,900" in said and "diverged at step 11,950" in said
    assert "resume at 11,000" in said
    unseparated = [line for line in ours if re.search(r"\bsteps? \d{4,}", line) or re.search(r"=\d{4,}", line)]
    assert not unseparated, unseparated


def test_a_file_name_that_is_not_utf8_is_escaped_and_the_json_is_strict(make_run_dir):
    """``step_000500\\xff.bin``: --json, the overview's --json and --once show the byte as
    ``\\xff``; the JSON is strict UTF-8 (a lone surrogate in it was rejected by orjson)."""
    import orjson

    run = make_run_dir(checkpoints=(100,))
    odd = os.fsencode(run) + b"/step_000500\xff.bin"
    with open(odd, "wb") as fh:
        fh.write(b"junk")
    for out in (console(run, "--json").stdout, console(run.parent, "--json").stdout):
        orjson.loads(out.encode("utf-8"))                  # strict: raises on a lone surrogate
        assert "\\udcff" not in out
    names = [c["name"] for c in json.loads(console(run, "--json").stdout)["checkpoints"]] + \
        json.loads(console(run, "--json").stdout)["other_files"]
    assert "step_000500\\xff.bin" in names, names
    assert "step_000500\\xff.bin" in console(run, "--once").stdout


def _process_state(pid: int) -> str:
    """What the kernel says of a process that did not answer a signal: its state, its signal
    masks, where it sleeps, and its threads'; and the test process's own masks (a child
    inherits what is ignored or blocked)."""
    def status(path: str) -> str:
        try:
            lines = open(path).read().splitlines()
        except OSError as err:
            return str(err)
        return "; ".join(line for line in lines if line.startswith(("State", "Sig", "Shd", "Threads")))

    def wchan(path: str) -> str:
        try:
            return open(path).read()
        except OSError as err:
            return str(err)

    threads = sorted(os.listdir(f"/proc/{pid}/task")) if os.path.isdir(f"/proc/{pid}/task") else []
    return (f"child {status(f'/proc/{pid}/status')}; "
            + "; ".join(f"thread {t}: {wchan(f'/proc/{pid}/task/{t}/wchan')}" for t in threads)
            + f"; this process {status('/proc/self/status')}")


@pytest.mark.parametrize("mode", ["--checkpoint", "--stop"])
def test_ctrl_c_while_waiting_is_one_line_and_exit_130(tmp_path, mode):
    """Ctrl-C during --checkpoint or --stop: one line, exit 130, no traceback."""
    import signal as signals

    from rundir import write_trainer_record
    from tests.rundir.test_process import record_for, start_child

    run = tmp_path / "run"
    stand_in = start_child(run, tmp_path / "signals.txt", "--stay")     # verified, never answers
    try:
        write_trainer_record(run, record_for(stand_in.pid))
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        # Started as a shell starts a command in the foreground, Ctrl-C at its default: the test
        # runner may ignore it (a background job of a non-interactive shell does), and a child
        # inherits an ignored signal.
        proc = subprocess.Popen([sys.executable, "-m", "console", str(run), mode, "--timeout", "600"], cwd=ROOT,
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                preexec_fn=lambda: signals.signal(signals.SIGINT, signals.SIG_DFL))
        deadline = time.monotonic() + 60
        while "SIGUSR1" not in (tmp_path / "signals.txt").read_text() and "SIGTERM" not in \
                (tmp_path / "signals.txt").read_text():
            assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
            time.sleep(0.05)
        proc.send_signal(signals.SIGINT)
        try:
            out, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"no exit 60 s after Ctrl-C: {_process_state(proc.pid)}") from None
        assert proc.returncode == 130, err
        assert "Traceback" not in err and err.strip().splitlines()[-1].startswith("andrea-console: interrupted")
    finally:
        stand_in.kill()
        stand_in.wait()


def test_times_ahead_of_the_clock_are_said_so(make_run_dir):
    """A checkpoint written by a machine whose clock runs ahead: "in the future", never
    "in the future ago"; a token count that went back is no speed (it read -0.0 tok/s)."""
    run = make_run_dir(checkpoints=(100, 200, 300))
    ahead = time.time() + 3600
    os.utime(run / "step_000300.bin", (ahead, ahead))
    with open(run / ".loss.json", "a") as fh:
        for step, tokens in ((301, 1000), (302, 999)):
            fh.write(json.dumps({"step": step, "loss": 2.0, "lr": 3e-3, "grad_norm": 1.0, "arm": "a",
                                 "tokens": tokens, "time": EPOCH + 1000 + step}) + "\n")
    out = console(run, "--once").stdout
    assert "in the future ago" not in out and "in the future" in out, out
    [speed] = [line for line in out.splitlines() if line.startswith("step ")]
    assert "-0.0" not in speed and speed.endswith("· -"), speed           # no speed, rather than a wrong one


def test_a_stopped_run_shows_no_speed(tmp_path):
    """A run whose trainer logged its stop makes no progress: no steps/s, tok/s or ETA in
    --once, --json and the overview (it showed the last segment's 2.0 steps/s)."""
    from tests.rundirs import make_run

    run = make_run(tmp_path / "runs" / "run", steps=300, events=({"event": "stop", "step": 300, "reason": "signal"},))
    h = json.loads(console(run, "--json").stdout)["history"]
    assert (h["last_step"], h["steps_per_s"], h["tokens_per_s"], h["eta_s"]) == (300, None, None, None)
    [speed] = [line for line in console(run, "--once").stdout.splitlines() if line.startswith("step ")]
    assert "steps/s" not in speed.replace("- steps/s", "") and speed.endswith("· -"), speed
    [row] = json.loads(console(tmp_path / "runs", "--json").stdout)["runs"]
    assert row["last_step"] == 300 and row["steps_per_s"] is None
    with open(run / ".loss.json", "a") as fh:            # resumed: moving again, a speed again
        fh.write(json.dumps({"event": "resume", "step": 300, "from_step": 300, "time": EPOCH + 2000}) + "\n")
        for step in range(301, 321):
            fh.write(json.dumps({"step": step, "loss": 2.0, "lr": 3e-3, "grad_norm": 1.0, "arm": "a",
                                 "tokens": step * 10, "time": EPOCH + 2000 + step / 2}) + "\n")
    h = json.loads(console(run, "--json").stdout)["history"]
    assert h["steps_per_s"] == pytest.approx(2.0)
