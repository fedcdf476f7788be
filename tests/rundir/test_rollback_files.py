"""The rollback's files: the checkpoint it proposes, what it loses, the journal, the set-aside."""

from __future__ import annotations

import time

import pytest

from rundir import LossHistory, latest_resumable, list_checkpoints
from rundir.layout import LOSS_JSON, ROLLBACK_JOURNAL, ROLLBACK_RECORD
from rundir.retention import ROLLBACK, protected_steps
from rundir.rollback_files import (
    MAX_SKIP_BATCHES,
    ChoiceNames,
    RollbackError,
    RollbackJournal,
    check_skip_batches,
    choose_checkpoint,
    list_rollbacks,
    lost_training,
    read_rollback_journal,
    remove_rollback_journal,
    set_aside_checkpoints,
    write_rollback_journal,
)
from tests.rundirs import make_run

NOW = 1_764_403_200.0      # 2025-11-29T08:00:00Z


@pytest.fixture
def run(tmp_path):
    return make_run(tmp_path / "run", steps=600, checkpoints=(100, 200, 300, 400, 500), spikes={450: 20.0},
                    truncated=(200,))


def test_the_newest_complete_checkpoint_margin_steps_before_the_spike(run):
    infos = list_checkpoints(run)
    assert choose_checkpoint(infos, spike_start=450, margin=100).step == 300
    assert choose_checkpoint(infos, spike_start=450, margin=0).step == 400
    assert choose_checkpoint(infos, spike_start=400, margin=150).step == 100     # 200 is truncated: not complete
    assert choose_checkpoint(infos, to_step=500).step == 500
    with pytest.raises(RollbackError, match="no complete checkpoint at least 100 steps .* step 50 or earlier"):
        choose_checkpoint(infos, spike_start=150, margin=100)
    with pytest.raises(RollbackError, match="--to 200: there is no complete checkpoint at step 200"):
        choose_checkpoint(infos, to_step=200)
    with pytest.raises(RollbackError, match="--to 250"):
        choose_checkpoint(infos, spike_start=450, to_step=250)
    with pytest.raises(RollbackError,
                       match=r"no loss spike in the history: nothing to roll back past \(pass --to STEP"):
        choose_checkpoint(infos)


def test_a_refusal_names_the_choices_as_the_front_end_does(run):
    """The command line speaks of --to and --skip-batches, the rollback screen of its fields."""
    fields = ChoiceNames(to='"to step"', choose_to='type a step in "to step"', skip='"skip batches"')
    infos = list_checkpoints(run)
    for call, cli, screen in [
        (lambda: choose_checkpoint(infos), "(pass --to STEP to go back", '(type a step in "to step" to go back'),
        (lambda: choose_checkpoint(infos, to_step=200), "--to 200: there is no complete checkpoint at step 200",
         '"to step" 200: there is no'),
        (lambda: choose_checkpoint(infos, spike_start=150), "; pass --to STEP to choose one",
         '; type a step in "to step" to choose one'),
        (lambda: check_skip_batches(MAX_SKIP_BATCHES + 1), "--skip-batches 1000001: expected",
         '"skip batches" 1000001: expected'),
        (lambda: check_skip_batches("{x}"), "--skip-batches '{x}': expected", '"skip batches" \'{x}\': expected'),
    ]:
        with pytest.raises(RollbackError) as caught:
            call()
        assert cli in str(caught.value) and screen in caught.value.worded(fields)
        assert "--" not in caught.value.worded(fields)


def test_skip_batches_must_be_a_count():
    assert check_skip_batches(0) == 0 and check_skip_batches(500) == 500
    for bad in (-1, MAX_SKIP_BATCHES + 1, 2.5, True, "3"):
        with pytest.raises(RollbackError, match="--skip-batches"):
            check_skip_batches(bad)


def test_what_is_lost_is_steps_tokens_and_time_after_the_checkpoint(run):
    history = LossHistory(run / LOSS_JSON)
    history.refresh()
    loss = lost_training(history, 300)
    assert (loss.last_step, loss.steps, loss.tokens, loss.seconds) == (600, 300, 300 * 512, 150.0)
    assert "steps 301..600 (300 steps, 153,600 tokens, 2.5 min of training) are abandoned" in loss.describe()
    assert lost_training(history, 300, tokens_at_step=100_000).tokens == 600 * 512 - 100_000
    assert lost_training(history, 600).steps == 0


def test_journal_round_trip_and_damage(run):
    assert read_rollback_journal(run) == (None, None)
    journal = RollbackJournal(stage="planned", started=NOW, to_step=300, skip_batches=150)
    journal.advance("planned", "a note", now=NOW)
    write_rollback_journal(run, journal)
    assert read_rollback_journal(run) == (journal, None)
    assert protected_steps(run)[300] == ROLLBACK          # retention keeps X while the rollback is under way
    with pytest.raises(ValueError, match="unknown rollback stage"):
        journal.advance("archived")
    (run / ROLLBACK_JOURNAL).write_text('{"stage": "flying"}')
    assert "malformed" in read_rollback_journal(run)[1]
    (run / ROLLBACK_JOURNAL).write_text("[1")
    assert "unreadable" in read_rollback_journal(run)[1]
    remove_rollback_journal(run)
    assert read_rollback_journal(run) == (None, None)


def test_set_aside_moves_the_checkpoints_after_x_and_is_idempotent(run):
    before = (run / LOSS_JSON).read_bytes()
    journal = RollbackJournal(stage="stopped", started=NOW, to_step=300, skip_batches=150, from_step=600)
    write_rollback_journal(run, journal)
    dest = set_aside_checkpoints(run, journal, now=NOW)
    assert journal.archive == "archive/rollback_000300_20251129T080000Z" and dest == run / journal.archive
    assert read_rollback_journal(run)[0].archive == journal.archive      # named before anything moved
    assert sorted(p.name for p in dest.iterdir()) == [ROLLBACK_RECORD, "step_000400.bin", "step_000400.json",
                                                      "step_000500.bin", "step_000500.json"]
    assert [c.step for c in list_checkpoints(run)] == [100, 200, 300] and latest_resumable(run).step == 300
    assert journal.set_aside == [400, 500]
    again = set_aside_checkpoints(run, journal, now=time.time())         # after an interruption: the same place
    assert again == dest and journal.set_aside == [400, 500]
    assert (run / LOSS_JSON).read_bytes() == before
    [listed] = list_rollbacks(run)
    assert listed["to_step"] == 300 and listed["path"] == journal.archive and listed["set_aside"] == [400, 500]


def test_a_set_aside_interrupted_before_its_record_still_lists_what_it_moved(run):
    journal = RollbackJournal(stage="stopped", started=NOW, to_step=300, skip_batches=150, from_step=600)
    write_rollback_journal(run, journal)
    dest = set_aside_checkpoints(run, journal, now=NOW)
    # As a kill between the moves and the journal's update leaves it: the files moved, the list not kept.
    (dest / ROLLBACK_RECORD).unlink()
    journal.set_aside = []
    set_aside_checkpoints(run, journal, now=NOW)
    assert journal.set_aside == [400, 500]
    assert list_rollbacks(run)[0]["set_aside"] == [400, 500]


def test_an_archive_that_is_not_a_plain_directory_is_refused_in_one_line(run, tmp_path):
    (tmp_path / "elsewhere").mkdir()
    (run / "archive").symlink_to(tmp_path / "elsewhere")
    journal = RollbackJournal(stage="stopped", started=NOW, to_step=300, skip_batches=150, from_step=600)
    with pytest.raises(RollbackError, match="not a plain directory"):
        set_aside_checkpoints(run, journal, now=NOW)
    assert [c.step for c in list_checkpoints(run)] == [100, 200, 300, 400, 500]     # nothing moved
