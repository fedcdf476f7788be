"""The polish pivot against a real micro trainer: through --pivot, through the screen, and
interrupted after each step then completed by a second run."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from console.tui.app import ConsoleApp
from console.tui.options import ConsoleOptions
from console.tui.screens import ConfirmScreen, PivotScreen
from console.tui.widgets import EventLog
from rundir import list_checkpoints, load_run_config, read_state, verify_trainer
from rundir.checkpoint import file_checksum
from rundir.pivot_files import STAGES, read_journal
from tests.console.conftest import until
from tests.console.test_hostile_text import pane_lines
from tests.console.trainer_proc import ROOT, train_command
from tests.processes import stop_processes_naming

CONSOLE = [sys.executable, "-m", "console"]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def wait_for(condition, timeout: float = 90.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def history(run: Path) -> list[dict]:
    """Every whole line (the trainer may be writing the last one)."""
    data = (run / ".loss.json").read_bytes()
    return [orjson.loads(line) for line in data[:data.rfind(b"\n") + 1].splitlines() if line.strip()]


def steps_seen(run: Path) -> int:
    return sum(1 for r in history(run) if "step" in r and "event" not in r)


class LiveRun:
    """A trainer sampling every 10 steps and checkpointing only when asked (or pivoted)."""

    def __init__(self, run: Path):
        self.run = run
        run.mkdir(parents=True, exist_ok=True)
        subprocess.Popen(train_command(run, "--sample-every", "10"), stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True, env=ENV, cwd=ROOT)
        wait_for(lambda: verify_trainer(run).ok and (run / ".samples.json").exists(), what="a verified trainer")

    def stop(self) -> None:
        # Whichever trainer runs now, the first or one a pivot resumed, verified yet or
        # still starting: every process that names the run directory.
        stop_processes_naming(self.run)


@pytest.fixture
def live(tmp_path):
    runs = []

    def start(name: str = "live") -> LiveRun:
        runs.append(LiveRun(tmp_path / name))
        return runs[-1]

    yield start
    for r in runs:
        r.stop()


def check_pivot(run: Path, before: bytes, archive: str, caps: dict, floors: dict) -> int:
    """Everything a completed pivot promises; returns P."""
    after = (run / ".loss.json").read_bytes()
    assert after.startswith(before), "the history before the pivot was changed"
    dest = run / archive
    assert sorted(os.listdir(dest)) == [".samples.json", ".state.json", "pivot.json", "run.toml"]
    assert not list(dest.rglob(".loss.json"))
    pivot = orjson.loads((dest / "pivot.json").read_bytes())
    p = pivot["final_step"]
    assert pivot["stage"] == "resumed" and pivot["new_policy"]["caps"] == caps
    assert read_journal(run) == (None, None)
    # The steps continue P, P+1 with the resume and pivot events between them.
    records = history(run)
    idx = next(i for i, r in enumerate(records) if r.get("event") == "pivot" and r.get("archive") == archive)
    assert records[idx]["step"] == p
    prior_steps = [r["step"] for r in records[:idx] if "event" not in r]
    assert prior_steps[-1] == p
    resume = next(r for r in reversed(records[:idx]) if r.get("event") == "resume")
    assert resume["from_step"] == p and resume["fresh_bandit"]
    # Weights, m and v resumed equal step_P.bin's bytes.
    assert resume["restored_checksum"] == file_checksum(run / f"step_{p:06d}.bin")
    wait_for(lambda: any(r.get("step") == p + 1 and "event" not in r for r in history(run)[idx:]),
             what="step P+1")
    # A fresh bandit under the new policy.
    wait_for(lambda: read_state(run).ok and read_state(run).value.step > p, what="a fresh .state.json")
    state = read_state(run).value
    assert state.caps == caps and state.floors == floors
    assert sum(a.pulls for a in state.arms.values()) <= state.step - p
    config = load_run_config(run)
    assert {a: c.cap for a, c in config.arms.items()} == caps
    return p


def test_pivot_cli_of_a_live_run(live):
    r = live()
    wait_for(lambda: steps_seen(r.run) >= 20, what="20 steps")
    before = (r.run / ".loss.json").read_bytes()
    out = subprocess.run([*CONSOLE, str(r.run), "--pivot", "--cap", "stdlib-code=0.5", "--floor",
                          "pydoc-topics=0.2", "--yes", "--timeout", "120"],
                         capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=240)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert [line.split("]")[0] + "]" for line in lines[:1]] == ["[plan]"]
    assert lines[0].startswith("[plan] new policy: stdlib-code [0.1, 0.5]"), lines[0]   # not "[plan] plan: ..."
    for key in "123456":
        assert any(line.startswith(f"[{key}]") for line in lines), key
    archive = lines[-1].rsplit("archive ", 1)[1].rstrip("/")
    caps = {"stdlib-code": 0.5, "stdlib-docstrings": 0.8, "pydoc-topics": 0.8}
    floors = {"stdlib-code": 0.1, "stdlib-docstrings": 0.1, "pydoc-topics": 0.2}
    p = check_pivot(r.run, before, archive, caps, floors)
    # The fresh bandit was asked for: the log says what was restored and what was reset, not "NOT exactly".
    log = (r.run / "trainer.log").read_text()
    assert "reset on purpose: the bandit" in log and "NOT exactly" not in log
    listed = orjson.loads(subprocess.run([*CONSOLE, str(r.run), "--json"], capture_output=True, env=ENV, cwd=ROOT,
                                         timeout=60).stdout)
    assert [(x["step"], x["archive"], x["stage"]) for x in listed["pivots"]] == [(p, archive, "resumed")]
    assert listed["pending_pivot"] is None
    audit = [c.step for c in list_checkpoints(r.run)]
    # The audit checkpoint, then P: the same file when SIGTERM came before another step completed.
    assert audit[-1] == p and len(audit) in (1, 2) and audit[0] <= p


def test_pivot_cli_refuses_bad_policy_and_changes_nothing(live):
    r = live()
    before = {p.name: p.read_bytes() for p in r.run.iterdir() if p.name in ("run.toml", ".state.json")}
    out = subprocess.run([*CONSOLE, str(r.run), "--pivot", "--floor", "stdlib-code=0.9", "--yes"],
                         capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=60)
    assert out.returncode == 1 and "floor = 0.9 is not allowed" in out.stderr
    assert verify_trainer(r.run).ok and read_journal(r.run) == (None, None)
    assert (r.run / "run.toml").read_bytes() == before["run.toml"]
    out = subprocess.run([*CONSOLE, str(r.run), "--pivot", "--cap", "stdlib-code=half"],
                         capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=60)
    assert out.returncode == 2 and "'half' is not a number" in out.stderr


@pytest.mark.asyncio
async def test_pivot_screen_of_a_live_run(live):
    r = live()
    before = (r.run / ".loss.json").read_bytes()
    app = ConsoleApp(r.run, ConsoleOptions(tick=0.5))
    async with app.run_test(size=(80, 24)) as pilot:         # an SSH session's size: the compact screen
        await until(pilot, lambda: app.snapshot is not None and app.snapshot.trainer.state == "running", 30,
                    "the trainer verified running")
        await pilot.press("p")
        # pushed and composed (a loaded machine is slow)
        await until(pilot, lambda: isinstance(app.screen, PivotScreen) and app.screen.query("#cap-0"), 30,
                    "the pivot screen composed")
        screen = app.screen
        screen.query_one("#cap-0").value = "0.6"
        await pilot.pause()
        assert screen.request is not None
        await pilot.press("ctrl+s")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), 60, "the confirmation")
        await pilot.pause()
        # The question stands over the form: step 1's "landed at step N" stays in view under it.
        box, step_1 = app.screen.query_one("#confirm-box").region, screen.query_one("#step-1").region
        assert box.bottom <= screen.query_one("#pivot-steps").region.y and step_1.bottom <= 23
        assert "landed at step" in "".join(pane_lines(screen.query_one("#step-1")))
        await pilot.press("y")
        await until(pilot, lambda: screen.outcome is not None, 180, "the pivot's outcome")
        assert screen.outcome.ok, screen.outcome
        assert screen.query_one("#pivot-outcome").region.bottom <= 23          # above the key bar
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen is app.dashboard
        archive = screen.outcome.archive
        said = [text for text in app.dashboard.query_one(EventLog).texts if "pivot complete" in text]
        assert said and not any("pivot: pivot" in text for text in said), said
    caps = {"stdlib-code": 0.6, "stdlib-docstrings": 0.8, "pydoc-topics": 0.8}
    floors = {"stdlib-code": 0.1, "stdlib-docstrings": 0.1, "pydoc-topics": 0.1}
    check_pivot(r.run, before, archive, caps, floors)


def test_pivot_killed_after_each_step_is_completed_by_the_next(live):
    """The console is SIGKILLed as soon as the journal records each stage in turn; a second
    --pivot completes that pivot. Each round pivots the same run again."""
    r = live()
    caps = {"stdlib-code": 0.8, "stdlib-docstrings": 0.8, "pydoc-topics": 0.8}
    floors = {"stdlib-code": 0.1, "stdlib-docstrings": 0.1, "pydoc-topics": 0.1}
    for round_, stage in enumerate(["audit_checkpoint", "stopped", "archived", "config_written"]):
        cap = round(0.5 + 0.1 * round_, 2)
        caps["stdlib-code"] = cap
        wait_for(lambda: verify_trainer(r.run).ok, what="the trainer running")
        before = (r.run / ".loss.json").read_bytes()
        console = subprocess.Popen([*CONSOLE, str(r.run), "--pivot", "--cap", f"stdlib-code={cap}", "--yes"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV, cwd=ROOT)

        def reached() -> bool:
            journal, _ = read_journal(r.run)
            return journal is not None and STAGES.index(journal.stage) >= STAGES.index(stage)

        wait_for(lambda: reached() or console.poll() is not None, what=f"stage {stage}")
        console.kill()
        console.wait()
        journal, _ = read_journal(r.run)
        assert journal is not None, f"round {round_}: the pivot finished before it could be killed"
        out = subprocess.run([*CONSOLE, str(r.run), "--pivot", "--yes", "--timeout", "120"],
                             capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=240)
        assert out.returncode == 0, out.stdout + out.stderr
        assert "resuming the interrupted pivot" in out.stdout
        archive = out.stdout.splitlines()[-1].rsplit("archive ", 1)[1].rstrip("/")
        check_pivot(r.run, before, archive, dict(caps), dict(floors))
    assert len(list((r.run / "archive").iterdir())) == 4


def test_failed_resume_is_reported_and_rolled_back(make_run_dir):
    """A run whose checkpoint the trainer refuses (generated, not a real model): steps 1-5
    run, step 6 fails with the reason, and --pivot-rollback puts everything back."""
    run = make_run_dir()
    before = {name: (run / name).read_bytes() for name in ("run.toml", ".state.json", ".samples.json", ".loss.json")}
    out = subprocess.run([*CONSOLE, str(run), "--pivot", "--cap", "stdlib-code=0.5", "--yes", "--timeout", "60"],
                         capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=120)
    assert out.returncode == 1 and "step 6: the trainer exited with code 2 instead of resuming" in out.stderr
    assert "[1] audit checkpoint (SIGUSR1): no trainer running" in out.stdout
    journal, _ = read_journal(run)
    assert journal.stage == "config_written" and journal.final_step == 300
    assert not (run / ".state.json").exists()
    once = subprocess.run([*CONSOLE, str(run), "--once"], capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=60)
    assert "a polish pivot is unfinished (last completed stage: config_written)" in once.stdout
    assert "P = 300" in once.stdout and "(unfinished)" in once.stdout
    out = subprocess.run([*CONSOLE, str(run), "--pivot-rollback"], capture_output=True, text=True, env=ENV,
                         cwd=ROOT, timeout=60)
    assert out.returncode == 0 and "restored .samples.json, .state.json, run.toml" in out.stdout
    assert {name: (run / name).read_bytes() for name in before} == before
    assert read_journal(run) == (None, None) and not list((run / "archive").iterdir())
    out = subprocess.run([*CONSOLE, str(run), "--pivot-rollback"], capture_output=True, text=True, env=ENV,
                         cwd=ROOT, timeout=60)
    assert out.returncode == 1 and "no interrupted pivot" in out.stdout
