"""``--rollback`` on generated run directories: what it proposes, what it refuses, and a
cancel or a failed resume that changes nothing it should not."""

from __future__ import annotations

import pytest

from console.actions.rollback_runner import RollbackRequest, propose_rollback, set_aside_text
from rundir.layout import LOSS_JSON, ROLLBACK_JOURNAL
from rundir.rollback_files import RollbackError, read_rollback_journal
from tests.console.test_cli import console
from tests.trainer.trainer_runs import snapshot

SPIKY = dict(steps=600, checkpoints=(100, 200, 300, 400, 500), spikes={450: 30.0, 451: 40.0, 452: 35.0})


def test_the_proposal_is_the_checkpoint_margin_steps_before_the_newest_spike(make_run_dir):
    run = make_run_dir(**SPIKY)
    proposal = propose_rollback(run, RollbackRequest())
    assert (proposal.spike.start, proposal.spike.end) == (450, 452)
    assert proposal.to_step == 300 and proposal.margin == 100
    assert proposal.skip_batches == 452 - 300             # every batch up to the spike's end
    assert proposal.loss.steps == 300
    text = proposal.describe()
    assert "the newest spike starts at step 450" in text and "roll back to step_000300.bin" in text
    chosen = propose_rollback(run, RollbackRequest(to_step=400, skip_batches=7))
    assert (chosen.to_step, chosen.skip_batches) == (400, 7)
    with pytest.raises(RollbackError, match="nothing after step 500"):
        propose_rollback(make_run_dir("short", steps=500, checkpoints=(100, 500)), RollbackRequest(to_step=500))


@pytest.mark.parametrize("flags, code, message", [
    ((), 1, "no loss spike in the history: nothing to roll back past (pass --to STEP"),
    (("--to", "250"), 1, "--to 250: there is no complete checkpoint at step 250"),
    (("--to", "-5"), 2, "--to -5: expected a step number >= 0"),
    (("--skip-batches", "-1"), 2, "--skip-batches -1: expected a number of batches >= 0"),
    (("--to", "200", "--skip-batches", "2000000"), 1, "--skip-batches 2000000: expected a whole number"),
])
def test_refusals_change_nothing(make_run_dir, flags, code, message):
    run = make_run_dir()
    before = snapshot(run)
    r = console(run, "--rollback", "--yes", *flags)
    assert r.returncode == code, r.stdout + r.stderr
    assert message in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert snapshot(run) == before


def test_no_checkpoint_early_enough_is_refused(make_run_dir):
    run = make_run_dir(steps=300, checkpoints=(100, 200, 300), spikes={150: 30.0})
    r = console(run, "--rollback", "--yes")
    assert r.returncode == 1
    assert "no complete checkpoint at least 100 steps (alerts.rollback_margin) before the spike at step 150" in r.stderr


def test_flags_of_rollback_alone_are_usage_errors(make_run_dir):
    run = make_run_dir()
    for flags in (("--to", "100"), ("--skip-batches", "3"), ("--rollback", "--once")):
        r = console(run, *flags)
        assert r.returncode == 2, flags


def test_not_confirmed_changes_nothing(make_run_dir):
    run = make_run_dir(**SPIKY)
    before = snapshot(run)
    r = console(run, "--rollback")                        # no terminal to ask, no --yes
    assert r.returncode == 1 and "Not confirmed" in r.stderr and "cancelled: nothing changed" in r.stderr
    assert "[plan]" in r.stdout and "roll back to step_000300.bin" in r.stdout
    assert snapshot(run) == before and not (run / ROLLBACK_JOURNAL).exists()


def test_a_resume_the_trainer_refuses_is_reported_and_pending(make_run_dir):
    """Generated checkpoints are no real model: steps 1-2 run, step 3 fails with the
    trainer's reason, and the journal keeps the rollback pending for the next attempt."""
    run = make_run_dir(**SPIKY)
    history = (run / LOSS_JSON).read_bytes()
    r = console(run, "--rollback", "--yes", "--timeout", "60", timeout=120)
    assert r.returncode == 1 and "step 3: the trainer exited with code 2 instead of resuming" in r.stderr
    assert "[1] stop the trainer (SIGTERM): no trainer running" in r.stdout
    assert "stopped at step" not in r.stdout and "the run is at step 600" in r.stdout    # one thing said
    journal, _ = read_rollback_journal(run)
    assert journal.stage == "set_aside" and journal.to_step == 300 and journal.set_aside == [400, 500]
    assert (run / LOSS_JSON).read_bytes() == history
    assert not (run / "step_000400.bin").exists() and (run / journal.archive / "step_000400.bin").exists()
    once = console(run, "--once")
    assert "a rollback to step 300 is unfinished (last completed stage: set_aside); r or --rollback completes it" \
        in once.stdout
    r = console(run, "--rollback", "--to", "200", "--yes")
    assert r.returncode == 1 and "an interrupted rollback to step 300" in r.stderr


def test_a_spike_among_the_steps_a_rollback_abandoned_is_not_proposed_again(make_run_dir):
    """Rolled back to 300 past the spike at 450 and resumed to 350: the spike's lines are
    still in the history, but a second rollback has no spike to go back for."""
    from rundir import LossHistoryWriter

    run = make_run_dir(**SPIKY)
    later = 10.0 ** 10                                   # after every generated line
    with LossHistoryWriter(run / LOSS_JSON) as w:
        w.event("rollback", step=300, time=later, from_step=600, to_step=300, skip_batches=152)
        for step in range(301, 351):
            w.step(step, 2.0, 3e-3, 0.5, "a", step * 512, later + step)
    with pytest.raises(RollbackError, match="no loss spike in the history"):
        propose_rollback(run, RollbackRequest())


def test_another_engine_s_run_is_refused_saying_what_was_found_and_why(make_run_dir):
    """No run.toml, foreign checkpoints (weights, m and v only), a spike: the refusal names
    the spike and what a rollback needs, not a missing file."""
    run = make_run_dir(steps=3000, checkpoints=(1000, 2000, 3000), foreign=(1000, 2000, 3000), with_run_toml=False,
                       with_state=False, spikes={2500: 30.0, 2501: 28.0})
    before = snapshot(run)
    r = console(run, "--rollback", "--yes")
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "found the loss spike at steps 2,500–2,501 (peak 30 at step 2,500)" in r.stderr
    assert "3 checkpoints, all foreign" in r.stderr and "no run.toml" in r.stderr
    assert "resumes andrea-train from one of its own complete checkpoints" in r.stderr
    assert "no such file" not in r.stderr
    assert snapshot(run) == before


def test_foreign_checkpoints_under_a_run_toml_are_said_to_be_why(make_run_dir):
    run = make_run_dir(**{**SPIKY, "foreign": SPIKY["checkpoints"]})
    with pytest.raises(RollbackError, match="the 5 checkpoints here are foreign: a rollback resumes andrea-train"):
        propose_rollback(run, RollbackRequest())


def test_a_rollback_past_a_pivot_warns_and_the_pivot_is_no_longer_listed(make_run_dir):
    """A pivot at 450 (its archive and event); a rollback to 300 goes back past it: the
    proposal warns (the screen and --rollback print it), and once done --once and --json no
    longer list the pivot the run left behind."""
    import json

    from rundir import LossHistoryWriter
    from tests.rundirs import EPOCH

    run = make_run_dir(steps=600, checkpoints=(100, 200, 300, 400, 500))
    archive = run / "archive" / "pivot_000450_20251129T090000Z"
    archive.mkdir(parents=True)
    (archive / "pivot.json").write_text(json.dumps({"final_step": 450, "stage": "complete",
                                                   "new_policy": {"caps": {}, "floors": {}}}))
    with LossHistoryWriter(run / LOSS_JSON) as w:
        # as andrea-train writes it: the archive relative to the run directory (layout.pivot_archive_name)
        w.event("pivot", step=450, time=EPOCH + 450.5, archive=str(archive.relative_to(run)), policy={}, old_policy={},
                dropped=[])
    assert "P = 450" in console(run, "--once").stdout
    assert "WARNING" not in propose_rollback(run, RollbackRequest(to_step=500)).describe()
    text = propose_rollback(run, RollbackRequest(to_step=300, skip_batches=0)).describe()
    assert "; WARNING: step 300 is before the pivot at step 450: " in text and "NOT exactly" in text
    with LossHistoryWriter(run / LOSS_JSON) as w:
        w.event("rollback", step=300, time=EPOCH + 10_000, from_step=600, to_step=300, skip_batches=0)
    out = console(run, "--once").stdout
    assert "P = 450" not in out and "pivots (" not in out, out
    assert json.loads(console(run, "--json").stdout)["pivots"] == []


def test_an_unfinished_pivot_is_worded_once(make_run_dir):
    """The problems list, the overview and a rollback's refusal say an unfinished pivot in one
    wording (rundir.pivot_files.unfinished_text)."""
    from console.model.findings import summary_problems
    from console.read.reader import RunReader
    from console.read.run_summary import summarize_run
    from rundir.pivot_files import PivotJournal, unfinished_text, write_journal

    run = make_run_dir(**SPIKY)
    journal = PivotJournal(stage="config_written", started=1.0, old_policy={}, new_policy={})
    write_journal(run, journal)
    said = unfinished_text(journal)
    assert said == ("a polish pivot is unfinished (last completed stage: config_written): p or --pivot completes it, "
                    "--pivot-rollback undoes it")
    snap, _ = RunReader(run).read()
    assert [p.text for p in snap.problems if p.kind == "pending"] == [said]
    assert [p.text for p in summary_problems(summarize_run(run)) if p.kind == "pending"] == [said]
    r = console(run, "--rollback", "--to", "300", "--yes")
    assert r.returncode != 0 and said in r.stderr, r.stderr


def test_the_set_aside_step_names_a_few_steps_and_counts_a_long_run_s():
    """Step 2's line names up to three steps; past that their count and span, so that the line
    stays short at 80x24 (73 steps listed once pushed the outcome off the rollback screen)."""
    assert set_aside_text([2000, 2500, 3000]) == "steps 2,000, 2,500, 3,000"
    assert set_aside_text([]) == "steps none"
    assert set_aside_text(list(range(60, 1501, 20))) == "73 of them, steps 60 to 1,500"
