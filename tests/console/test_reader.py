"""The reader and the snapshot it builds, shared by the dashboard, --once and --json: bad input never crashes it."""

from __future__ import annotations

import json

import numpy as np
import pytest

from console.read.reader import RunReader
from console.text.run_report import render_text, to_json
from rundir import LossHistoryWriter, write_checkpoint, write_state
from rundir.layout import CHECKPOINTS, HISTORY, LOG, STATE, kind_of
from tests.console.conftest import NOW, fixed_now


def read(run_dir):
    return RunReader(run_dir, now=fixed_now).read()


def test_healthy_run(run_dir):
    snap, notices = read(run_dir)
    assert snap.dir_state == "ok" and snap.config is not None
    assert [c.status for c in snap.checkpoints] == ["complete"] * 3
    assert snap.history.n_steps == 300 and snap.history.steps_per_s == pytest.approx(2.0)
    assert snap.history.tokens_per_s == pytest.approx(1024.0)
    assert [a.status for a in snap.arms.rows] == ["ok"] * 3
    assert len(snap.samples) == 3 and [p.text for p in snap.problems] == []
    assert snap.trainer.label == "stopped"
    assert notices[0].text.startswith("watching run: trainer stopped, 300 steps, 3 checkpoints")


def test_every_kind_of_damage_is_reported(make_run_dir):
    run = make_run_dir(truncated=(200,), foreign=(100,), state_arms=("stdlib-code", "repo-docstrings"),
                       trainer_record="stale", torn_tail='{"step": 3', bad_lines=("garbage",), nonfinite=(50,),
                       samples_text="[1, 2", garbage_files=("core",))
    snap, notices = read(run)
    problems = "\n".join([p.text for p in snap.problems])
    for needle in ("stale", "step_000200.bin: invalid: truncated", "zombie arm repo-docstrings: not in run.toml",
                   "1 unreadable line", "torn last line (10 bytes)", "1 non-finite", ".samples.json: not valid JSON"):
        assert needle in problems
    said = "\n".join(n.text for n in notices)
    assert "non-finite loss at step 50" in said and "torn last line" in said and "zombie arm" in said
    assert snap.other_files == ("core",)
    assert {c.status for c in snap.checkpoints} == {"foreign", "invalid", "complete"}


@pytest.mark.parametrize("record, state, label", [("stale", "stale", "stale pid record"),
                                                  ("spoofed", "unverified", "not supervised"),
                                                  ("garbage", "unreadable", "not supervised")])
def test_trainer_records_that_fail_verification(make_run_dir, record, state, label):
    snap, _ = read(make_run_dir(trainer_record=record))
    assert (snap.trainer.state, snap.trainer.label) == (state, label)
    assert not snap.trainer.signallable


def test_missing_empty_and_file_instead_of_directory(tmp_path):
    assert read(tmp_path / "nope")[0].dir_state == "missing"
    (tmp_path / "empty").mkdir()
    snap, _ = read(tmp_path / "empty")
    assert snap.dir_state == "empty" and \
        [p.text for p in snap.problems] == ["the run directory is empty: nothing has been written yet"]
    (tmp_path / "file").write_text("x")
    assert read(tmp_path / "file")[0].dir_state == "not a directory"


def test_other_engines_run_json_array_no_toml_bare_checkpoints(make_run_dir):
    run = make_run_dir(history_format="array", with_run_toml=False, foreign=(100, 200, 300), with_state=False,
                       with_samples=False)
    snap, _ = read(run)
    assert snap.history.format == "array" and snap.history.n_steps == 300
    assert [c.status for c in snap.checkpoints] == ["foreign"] * 3
    assert snap.newest_checkpoint.step == 300
    assert snap.config is None and "no run.toml" in snap.config_error
    assert snap.arms.rows == () and snap.arms.error is None


def test_malformed_state_is_an_error_not_a_crash(make_run_dir):
    snap, _ = read(make_run_dir(state_text='{"arms": 3}'))
    assert '.state.json: no "arms" object' in snap.arms.error
    # The configured arms still show.
    assert [a.status for a in snap.arms.rows] == ["configured"] * 3


def test_incremental_read_reuses_unchanged_parts_and_reports_what_landed(run_dir):
    reader = RunReader(run_dir, now=fixed_now)
    first, _ = reader.read()
    with LossHistoryWriter(run_dir / ".loss.json") as w:
        for step in range(301, 401):
            w.append({"step": step, "loss": 2.0, "lr": 1e-3, "grad_norm": 1.0, "arm": "stdlib-code",
                      "tokens": step * 512, "time": NOW + step})
    snap, notices = reader.read({HISTORY})
    assert snap.history.n_steps == 400 and snap.history.version > first.history.version
    assert snap.checkpoints is first.checkpoints and snap.arms is first.arms
    w = np.ones(1000, np.float32)
    write_checkpoint(run_dir, 400, w, w, w)
    snap, notices = reader.read({CHECKPOINTS})
    assert any("checkpoint landed: step_000400.bin (step 400" in n.text and n.level == "good" for n in notices)
    assert snap.history is not first.history
    write_state(run_dir, {"arms": {"ghost": {"pulls": 3, "source": "data/none.txt"}}})
    snap, notices = reader.read({STATE})
    assert [n.text for n in notices] == ["zombie arm ghost: not in run.toml"]
    # Nothing changed: the same history object comes back.
    again, notices = reader.read({HISTORY})
    assert again.history is snap.history and notices == []


def test_log_tail_is_incremental(make_run_dir):
    run = make_run_dir(log_lines=("one", "two"))
    reader = RunReader(run, now=fixed_now)
    assert reader.read()[0].log_tail == ("one", "two")
    with open(run / "trainer.log", "a") as fh:
        fh.write("three\nfour-without-newline")
    assert reader.read({LOG})[0].log_tail == ("one", "two", "three")


def test_kind_of():
    assert kind_of("step_000100.bin") == kind_of("step_000100.json") == CHECKPOINTS
    assert kind_of(".tmp-.state.json.123") is None
    assert kind_of(".state.json") == STATE and kind_of("notes.txt") == "directory"


def test_once_text_lists_every_checkpoint_and_arm_with_status(make_run_dir):
    run = make_run_dir(truncated=(200,), state_arms=("stdlib-code", "repo-docstrings"))
    snap, _ = read(run)
    text = render_text(snap, NOW)
    assert "step_000100.bin" in text and "step_000300.bin" in text
    assert "invalid: truncated" in text
    assert "ZOMBIE: not in run.toml" in text
    lines = [ln for ln in text.splitlines() if ln.startswith("  step_")]
    assert len(lines) == 3 and "age   59m10s" in lines[0]
    data = to_json(snap, NOW)
    json.dumps(data)
    assert [c["status"] for c in data["checkpoints"]] == ["complete", "invalid", "complete"]
    assert {a["name"]: a["status"] for a in data["arms"]}["repo-docstrings"] == "zombie"


def test_storage_and_retention_are_shown(make_run_dir):
    """The console's view of #11: the rule that keeps each checkpoint, what the next prune
    removes, the directory's size, its filesystem's room, and a problem when fewer than three
    checkpoints fit."""
    run = make_run_dir(checkpoints=(100, 200, 300))
    (run / "run.toml").write_text((run / "run.toml").read_text().replace("keep_last = 5", "keep_last = 2"))
    snap, _ = RunReader(run, now=fixed_now, free_space=lambda _: 10 << 30).read()
    assert snap.retention.policy == "keep the last 2"
    assert snap.retention.keep == {"step_000100.bin": (), "step_000200.bin": ("last",),
                                   "step_000300.bin": ("newest", "last")}
    assert snap.retention.next_prune == ("step_000100.bin",) and snap.retention.rule("step_000100.bin") == "prune"
    assert snap.storage.used == sum(p.stat().st_size for p in run.rglob("*") if p.is_file())
    assert snap.storage.free == 10 << 30 and not snap.storage.too_full
    out = json.loads(json.dumps(to_json(snap, NOW), default=str))
    assert out["retention"]["next_prune"] == ["step_000100.bin"] and out["storage"]["free"] == 10 << 30
    assert [c["keep"] for c in out["checkpoints"]] == [[], ["last"], ["newest", "last"]]
    text = render_text(snap, NOW)
    assert "retention: keep the last 2" in text and "removed by the next prune" in text

    nearly_full, _ = RunReader(run, now=fixed_now, free_space=lambda _: 2 * snap.storage.checkpoint_size).read()
    assert nearly_full.storage.too_full
    assert any("disk nearly FULL" in p and "room for 2 checkpoints" in p
               for p in [p.text for p in nearly_full.problems])


@pytest.mark.parametrize("back_to", [350, 400])          # a resume that re-runs steps, and one that does not
def test_rates_are_measured_since_the_newest_resume_not_across_the_pause(make_run_dir, back_to):
    # 2 steps/s before and after an hour's pause: the pause is no part of the rate.
    snap, _ = read(make_run_dir(steps=450, checkpoints=(), restarts=((400, back_to, 3600.0, True),)))
    assert snap.history.steps_per_s == pytest.approx(2.0)
    assert snap.history.tokens_per_s == pytest.approx(1024.0)


def test_rates_after_a_restart_without_a_resume_event(make_run_dir):
    snap, _ = read(make_run_dir(steps=450, checkpoints=(), restarts=((400, 350, 3600.0, False),)))
    assert snap.history.steps_per_s == pytest.approx(2.0)


def test_steps_that_go_back_without_a_resume_event_are_said_and_marked(make_run_dir):
    silent = make_run_dir("silent", steps=600, checkpoints=(), restarts=((400, 350, 60.0, False),))
    snap, _ = read(silent)
    h = snap.history
    assert h.n_steps == 600 and (h.silent_rewinds, h.silent_rewind_count) == ((351,), 1)
    assert any("went back to step 351 with no resume event" in p for p in [p.text for p in snap.problems])
    assert [m.step for m in snap.markers if m.kind == "rewind"] == [351]
    text = render_text(snap, NOW, width=100)
    assert "< steps went back at 351" in text and "went back to step 351" in text
    marker_row = next(line for line in text.split("loss (raw")[1].splitlines() if "└" in line)
    assert "<" in marker_row
    assert to_json(snap, NOW)["history"]["rewinds_without_resume"] == {"count": 1, "last_steps": [351]}

    # A resume event before the steps go back: nothing to say.
    announced, _ = read(make_run_dir("announced", steps=600, checkpoints=(), restarts=((400, 350, 60.0, True),)))
    assert announced.history.silent_rewind_count == 0
    assert not any("went back" in p for p in [p.text for p in announced.problems])


def test_a_nonfinite_step_run_again_keeps_its_step(make_run_dir):
    # The trainer diverged at step 380, resumed from 350 and ran 351..400 again: the NaN is
    # counted (it was written) and its step is named, though the column now holds a finite loss.
    snap, _ = read(make_run_dir(steps=400, checkpoints=(), nonfinite=(380,), restarts=((380, 350, 10.0, True),)))
    assert snap.history.nonfinite == 1 and np.isfinite(snap.history.loss).all()
    assert snap.history.last_nonfinite_step == 380
    assert to_json(snap, NOW)["history"]["last_nonfinite_step"] == 380


def test_a_sample_with_text_instead_of_completion_is_shown(make_run_dir):
    samples = json.dumps({"samples": [{"step": 10, "arm": "other-engine", "prompt": "def f(", "text": "x): pass"},
                                      {"step": 10, "arm": "bad", "prompt": "def g("}]})
    snap, _ = read(make_run_dir(samples_text=samples))
    assert [(s.arm, s.completion) for s in snap.samples] == [("other-engine", "x): pass")]
    assert snap.samples_error == ".samples.json: 1 malformed sample skipped"


def test_another_engine_s_whole_text_does_not_say_the_prompt_twice(make_run_dir):
    """Their "text" (or "output") may hold the prompt too: shown after the prompt, the pane
    read "def def main()". Ours ("completion") is the continuation, whatever it starts with."""
    samples = json.dumps({"samples": [
        {"step": 10, "arm": "whole", "prompt": "def ", "text": "def main():\n    return 0"},
        {"step": 10, "arm": "output", "prompt": "x = ", "output": "x = 1"},
        {"step": 10, "arm": "ours", "prompt": "ab", "completion": "abc"}]})
    run = make_run_dir(samples_text=samples)
    snap, _ = read(run)
    assert [(s.arm, s.prompt + s.completion) for s in snap.samples] == [
        ("whole", "def main():\n    return 0"), ("output", "x = 1"), ("ours", "ababc")]
    once = render_text(snap, NOW)
    assert "def main():⏎    return 0" in once and "def def" not in once
