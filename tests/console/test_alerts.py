"""Alerts: raised once, --check's exit status, and --notify's command (real subprocesses)."""

from __future__ import annotations

import json
import sys
import time

import pytest

from console.actions.alerts import AlertTracker, check_report, run_notify
from console.cli import main
from console.model.findings import child_exit_alert
from console.model.format import LINE_LIMIT, printable
from console.read.reader import RunReader
from rundir import LossHistoryWriter
from tests.rundirs import RunSpec, make_run

ALERT = {"kind": "spike", "level": "warning", "text": "loss spike at step 5", "key": "spike:5", "step": 5}


def test_notify_command_gets_the_alert_on_stdin(tmp_path):
    out = tmp_path / "got.json"
    argv = [sys.executable, "-c", f"import sys; open({str(out)!r}, 'w').write(sys.stdin.read())"]
    assert run_notify(argv, ALERT, timeout=60) is None
    assert json.loads(out.read_text()) == ALERT


def test_notify_failure_hang_and_missing_are_messages_not_crashes(tmp_path):
    failed = run_notify([sys.executable, "-c", "import sys; sys.stdin.read(); sys.exit(3)"], ALERT, timeout=60)
    assert failed.endswith("exited with code 3")
    started = time.monotonic()
    hung = run_notify([sys.executable, "-c", "import time; time.sleep(600)"], ALERT, timeout=1)
    assert "did not finish within 1 s: killed" in hung
    assert time.monotonic() - started < 300          # killed, not waited for
    missing = run_notify([str(tmp_path / "no-such-command")], ALERT, timeout=60)
    assert missing.startswith("--notify: command not found:")
    unreadable = run_notify([str(tmp_path)], ALERT, timeout=60)
    assert unreadable.startswith("--notify: cannot run")


def test_alerts_are_raised_once_and_history_facts_only_as_they_happen(tmp_path):
    run = make_run(tmp_path / "run", RunSpec(steps=600, spikes={300: 20.0}))
    reader = RunReader(run)
    tracker = AlertTracker()
    snap, _ = reader.read()
    assert [a.kind for a in snap.alerts] == ["spike"]
    assert tracker.new_alerts(snap) == []            # the spike was there before the console looked
    with LossHistoryWriter(run / ".loss.json") as w:
        for step in range(601, 700):
            w.step(step, 2.0 if step != 650 else 30.0, 3e-3, 0.5, "a", step * 10, 2000.0 + step)
        w.step(700, float("nan"), 3e-3, 0.5, "a", 7000, 2700.0)
    snap, _ = reader.read()
    new = tracker.new_alerts(snap)
    assert sorted(a.key for a in new) == ["nonfinite:700", "spike:650"]
    assert tracker.new_alerts(snap) == []            # once
    assert [a.level for a in new if a.kind == "nonfinite"] == ["error"]


def test_check_exit_status(tmp_path, capsys):
    healthy = make_run(tmp_path / "ok", RunSpec(steps=600))
    spiked = make_run(tmp_path / "spike", RunSpec(steps=600, spikes={590: 20.0}))
    old_spike = make_run(tmp_path / "old", RunSpec(steps=600, spikes={300: 20.0}))
    nan = make_run(tmp_path / "nan", RunSpec(steps=600, nonfinite=(595, 596)))
    assert main([str(healthy), "--check"]) == 0
    assert capsys.readouterr().out == "healthy: no problems\n"
    assert main([str(spiked), "--check"]) == 1
    assert "warning: loss spike at step 590" in capsys.readouterr().out
    assert main([str(old_spike), "--check"]) == 0
    assert "past: loss spike at step 300" in capsys.readouterr().out
    assert main([str(nan), "--check"]) == 2
    assert "error: non-finite loss at steps 595..596" in capsys.readouterr().out
    assert main([str(tmp_path / "missing"), "--check"]) == 2
    # A flag overrides run.toml's [alerts]: with a huge k there is no spike.
    assert main([str(spiked), "--check", "--spike-k", "1000"]) == 0
    capsys.readouterr()


def test_bad_alert_flags_are_usage_errors(tmp_path, capsys):
    run = make_run(tmp_path / "run", RunSpec(steps=10))
    for flags in (["--spike-window", "3"], ["--spike-k", "-1"], ["--spike-k", "nan"], ["--notify", ""],
                  ["--notify", "'unclosed"], ["--notify-timeout", "0"]):
        assert main([str(run), "--once", *flags]) == 2, flags
        err = capsys.readouterr().err
        assert err.startswith("andrea-console: ") and err.count("\n") == 1, err


def test_check_report_counts_a_diverged_resume_as_an_error(tmp_path):
    run = make_run(tmp_path / "run", RunSpec(steps=100))
    with LossHistoryWriter(run / ".loss.json") as w:
        w.event("resume", step=80, from_step=80, rerun={"from": 81, "to": 100}, time=3000.0)
        for step in range(81, 120):
            w.step(step, 9.0, 3e-3, 0.5, "a", step * 10, 3000.0 + step)
    snap, _ = RunReader(run).read()
    code, lines = check_report(snap)
    assert code == 2
    assert any(line.startswith("error: resume at 80 DIVERGED at step 81:") for line in lines)


async def _raise_a_spike(tmp_path, name, notify):
    """A dashboard on a quiet run; a spike lands; what the events pane says (and when
    ``notify`` gets it, the caller's file has it)."""
    from console.tui.widgets import EventLog
    from rundir.layout import HISTORY
    from tests.console.test_snapshots import app_for, settled

    run = make_run(tmp_path / name, RunSpec(steps=600))
    app = app_for(run, notify=notify, notify_timeout=60, bell=False)
    async with app.run_test(size=(140, 45)) as pilot:
        await settled(pilot)
        with LossHistoryWriter(run / ".loss.json") as w:
            w.step(601, 40.0, 3e-3, 0.5, "a", 6010, time.time())
        app.request_read({HISTORY})
        log = app.dashboard.query_one(EventLog)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not any("--notify" in t for t in log.texts):
            await settled(pilot)
            if notify and notify[-1] == "ok" and (tmp_path / "got.json").exists():
                break
            await pilot.pause(0.1)
        return list(log.texts)


@pytest.mark.asyncio
async def test_dashboard_raises_the_alert_and_notify_failures_are_events(tmp_path):
    out = tmp_path / "got.json"
    ok = [sys.executable, "-c", f"import sys; open({str(out)!r}, 'w').write(sys.stdin.read())", "ok"]
    texts = await _raise_a_spike(tmp_path, "ok", ok)
    assert any("ALERT: loss spike at step 601" in t for t in texts)
    alert = json.loads(out.read_text())
    assert (alert["kind"], alert["level"], alert["key"], alert["step"]) == ("spike", "warning", "spike:601", 601)
    assert alert["run_dir"].endswith("ok")
    missing = await _raise_a_spike(tmp_path, "missing", [str(tmp_path / "no-such-notifier")])
    assert any("--notify: command not found:" in t for t in missing)
    failing = await _raise_a_spike(tmp_path, "failing", [sys.executable, "-c", "import sys; sys.exit(5)"])
    assert any(t.endswith("exited with code 5") for t in failing)


def test_the_notify_timeout_help_names_the_default():
    from console.actions.alerts import NOTIFY_TIMEOUT_S
    from console.commands.parser import build_parser

    [action] = [a for a in build_parser()._actions if "--notify-timeout" in a.option_strings]
    assert f"(default {NOTIFY_TIMEOUT_S:g})" in action.help


def test_disk_nearly_full_and_a_zombie_arm_are_alerts(tmp_path):
    run = make_run(tmp_path / "run", RunSpec(steps=300, state_arms=("stdlib-code", "gone-arm")))
    snap, _ = RunReader(run, free_space=lambda _: 1000).read()
    alerts = {a.kind: a for a in snap.alerts}
    assert alerts["disk"].level == "error" and alerts["disk"].text.startswith("disk nearly FULL")
    assert alerts["zombie"].level == "error" and "gone-arm" in alerts["zombie"].text
    # One level for a kind, everywhere: the problems pane says the zombie at the alert's.
    assert [p.level for p in snap.problems if p.kind == "zombie"] == ["error"]
    code, lines = check_report(snap)
    assert code == 2 and lines[0].startswith("error: disk nearly FULL")


def test_one_alert_per_trainer_end_however_the_console_learns_of_it(tmp_path):
    """A trainer this console started that diverged (exit 3) or failed is one alert: the
    history's account and the child's exit code are two views of the same end."""
    diverged = make_run(tmp_path / "diverged", RunSpec(steps=400, nonfinite=(398, 399, 400), events=(
        {"event": "resume", "step": 200, "from_step": 200, "pid": 4321},
        {"event": "stop", "step": 400, "reason": "nonfinite", "in_a_row": 3})))
    tracker = AlertTracker()
    [divergence] = [a for a in tracker.new_alerts(RunReader(diverged).read()[0]) if a.kind == "divergence"]
    assert divergence.ended_pid == 4321
    assert not tracker.first_of_its_end(child_exit_alert(4321, 3))       # already told
    assert tracker.first_of_its_end(child_exit_alert(4322, 1))           # another trainer: told
    assert child_exit_alert(4323, 0) is None                             # a clean exit is no alert

    crashed = make_run(tmp_path / "crashed", RunSpec(steps=300, events=(
        {"event": "resume", "step": 100, "from_step": 100, "pid": 5555},)))
    tracker = AlertTracker()
    assert tracker.first_of_its_end(child_exit_alert(5555, 1))          # the child's exit first
    snap = RunReader(crashed).read()[0]
    assert [a.ended_pid for a in snap.alerts if a.kind == "exit"] == [5555]
    assert [a for a in tracker.new_alerts(snap) if a.kind == "exit"] == []


def test_many_problems_of_one_kind_are_one_alert(tmp_path):
    """2,000 arms whose source is gone: one alert naming three and counting the rest, raised
    once; --check prints it as one line. A new zombie later is a new alert of its own."""
    gone = tuple(f"gone-{i:04d}" for i in range(2000))
    run = make_run(tmp_path / "run", RunSpec(steps=300, state_arms=("stdlib-code", *gone)))
    tracker = AlertTracker()
    snap, _ = RunReader(run).read()
    [alert] = tracker.new_alerts(snap)
    assert (alert.kind, alert.level, alert.count) == ("zombie", "error", 2000)
    assert alert.text.startswith("2,000 zombie arms: zombie arm gone-0000: ") and \
        alert.text.endswith("; and 1,997 more")
    assert tracker.new_alerts(snap) == []
    code, lines = check_report(snap)
    assert code == 2 and [line for line in lines if "zombie" in line] == [printable(f"error: {alert.text}", LINE_LIMIT)]


@pytest.mark.asyncio
async def test_two_thousand_zombie_arms_ring_one_bell_and_notify_once(tmp_path):
    from console.tui.widgets import EventLog
    from tests.console.conftest import until
    from tests.console.test_snapshots import app_for, settled

    calls = tmp_path / "calls"
    notify = [sys.executable, "-c", f"import sys; open({str(calls)!r}, 'a').write(sys.stdin.read())"]
    run = make_run(tmp_path / "run", RunSpec(steps=300, state_arms=tuple(f"gone-{i}" for i in range(2000))))
    app = app_for(run, notify=notify, notify_timeout=60, bell=True)
    bells = []
    app.bell = lambda: bells.append(1)          # the terminal's bell, counted instead of rung
    async with app.run_test(size=(140, 45)) as pilot:
        await settled(pilot)
        await until(pilot, lambda: calls.exists() and calls.read_text().endswith("\n"), what="--notify's call")
        log = app.dashboard.query_one(EventLog)
        alerts = [t for t in log.texts if "ALERT:" in t]
        await app.workers.wait_for_complete()
    assert len(bells) == 1 and len(alerts) == 1 and "2,000 zombie arms" in alerts[0]
    [payload] = [json.loads(line) for line in calls.read_text().splitlines()]
    assert (payload["kind"], payload["count"]) == ("zombie", 2000)
