"""The reader's findings: spikes kept right across resumes, resume verdict events, the ETA."""

from __future__ import annotations

import numpy as np

from console.model.spikes import find_spikes
from console.read.reader import RunReader
from rundir import LossHistoryWriter, load_run_config, write_run_config
from tests.rundirs import RunSpec, make_run


def _steps(writer, steps, loss=2.0, t0=5000.0, spike=None):
    for s in steps:
        writer.step(s, 30.0 if s == spike else loss, 3e-3, 0.5, "a", s * 10, t0 + s)


def test_spikes_follow_resumes_that_rewrite_steps(tmp_path):
    run = make_run(tmp_path / "run", RunSpec(steps=300))
    reader = RunReader(run)
    reader.read()
    path = run / ".loss.json"
    with LossHistoryWriter(path) as w:
        _steps(w, range(301, 451), spike=420)
    snap, _ = reader.read()
    assert [s.start for s in snap.history.spikes] == [420]
    with LossHistoryWriter(path) as w:        # a resume from 400 re-runs 401..450 without the spike
        w.event("resume", step=400, from_step=400, rerun={"from": 401, "to": 450}, time=9000.0)
        _steps(w, range(401, 440))
    snap, notices = reader.read()
    assert snap.history.spikes == ()
    with LossHistoryWriter(path) as w:
        _steps(w, range(440, 600), spike=550)
    snap, notices = reader.read()
    h = reader.history
    assert list(snap.history.spikes) == find_spikes(h.step, h.loss) and [s.start for s in snap.history.spikes] == [550]
    [check] = snap.history.resume_checks
    assert check.verdict == "diverged" and check.first_difference["step"] == 420


def test_a_verified_resume_is_an_event(tmp_path):
    run = make_run(tmp_path / "run", RunSpec(steps=300))
    reader = RunReader(run)
    reader.read()
    with LossHistoryWriter(run / ".loss.json") as w:
        _steps(w, range(301, 331))
        w.event("resume", step=320, from_step=320, rerun={"from": 321, "to": 330}, time=9000.0)
        _steps(w, range(321, 341))
    snap, notices = reader.read()
    assert [n.text for n in notices if "resume at" in n.text] == ["resume at 320 verified: 10 steps identical"]
    assert [n.level for n in notices if "resume at" in n.text] == ["good"]


def test_eta_from_the_current_segment(tmp_path):
    run = make_run(tmp_path / "run", RunSpec(steps=300))
    config = load_run_config(run)
    config.run.max_steps = 1300
    write_run_config(run, config)
    with LossHistoryWriter(run / ".loss.json") as w:
        # After a resume the trainer runs at 4 steps a second (before it: 2).
        w.event("resume", step=300, from_step=300, time=10_000.0)
        for s in range(301, 501):
            w.step(s, 2.0, 3e-3, 0.5, "a", s * 10, 10_000.0 + (s - 300) / 4)
    snap, _ = RunReader(run).read()
    assert np.isclose(snap.history.eta_s, 800 / 4)


def test_spikes_in_another_engines_json_array_history(tmp_path):
    run = make_run(tmp_path / "run", RunSpec(steps=1000, history_format="array", spikes={700: 25.0},
                                             nonfinite=(800,), with_run_toml=False))
    snap, _ = RunReader(run, spike_window=50, spike_k=8).read()
    assert snap.history.format == "array"
    assert [s.start for s in snap.history.spikes] == [700]
    assert snap.history.nonfinite_steps == (800,)


def test_a_diverged_resume_is_a_problem_as_it_is_an_alert(tmp_path):
    """--check's error for a resume that diverged is in the problems list (--once, the pane)
    too: never "problems (0) none" beside an exit 2."""
    from console.actions.alerts import check_report
    from tests.console.test_cli import console

    run = make_run(tmp_path / "run", RunSpec(steps=300))
    with LossHistoryWriter(run / ".loss.json") as w:
        w.event("resume", step=280, from_step=280, rerun={"from": 281, "to": 300}, time=9000.0)
        for s in range(281, 311):
            w.append({"step": s, "loss": 9.0, "lr": 1e-3, "grad_norm": 1.0, "arm": "stdlib-code", "tokens": s,
                      "time": 9000.0 + s})
    snap, _ = RunReader(run).read()
    [problem] = [p for p in snap.problems if p.kind == "resume"]
    assert problem.level == "error" and problem.text.startswith("resume at 280 DIVERGED at step 281")
    code, lines = check_report(snap)
    assert code == 2 and lines.count(f"error: {problem.text}") == 1
    once = console(run, "--once").stdout
    assert f"  ! {problem.text}" in once and "problems (0)" not in once
