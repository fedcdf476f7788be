"""Resume verification from the history's replaced lines."""

from __future__ import annotations

import math

from rundir import LossHistory, LossHistoryWriter
from rundir.history import MAX_SUPERSEDED
from rundir.resume_check import ResumeCheck, check_resumes


def line(step, loss=None, grad_norm=0.5):
    return {"step": step, "loss": 2.0 + step / 1000 if loss is None else loss, "lr": 3e-3,
            "grad_norm": grad_norm, "arm": "a", "tokens": step * 10, "time": 1000.0 + step}


def process(event, step, **data):
    return {"event": event, "step": step, "threads": 2, "device": "cpu", "world_size": 1, **data}


def history_of(tmp_path, records, pieces=1):
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "h.jsonl"
    history = LossHistory(path)
    cut = [round(i * len(records) / pieces) for i in range(pieces + 1)]
    with LossHistoryWriter(path) as w:
        for a, b in zip(cut, cut[1:]):
            for r in records[a:b]:
                w.append(r)
            history.refresh()
    return history


def checks(history):
    return check_resumes(history.events, history.superseded, history.last_step)


def kill_and_resume(rerun_loss=None, **resume):
    """Steps 1..30, a resume from 20 that runs 21..40 (21..30 again)."""
    records = [process("start", 0), *(line(s) for s in range(1, 31)),
               process("resume", 20, from_step=20, rerun={"from": 21, "to": 30}, **resume)]
    records += [line(s, loss=(rerun_loss or {}).get(s)) for s in range(21, 41)]
    return records


def test_identical_rerun_is_verified(tmp_path):
    for pieces in (1, 3, 7):         # however the reads fall
        [check] = checks(history_of(tmp_path / str(pieces), kill_and_resume(), pieces))
        assert (check.from_step, check.compared, check.identical, check.complete) == (20, 10, True, True)
        assert check.text() == "resume at 20 verified: 10 steps identical"
        assert check.to_dict() == {"from_step": 20, "compared": 10, "identical": True, "first_difference": None,
                                   "changed": [], "verdict": "verified"}


def test_a_difference_is_a_divergence(tmp_path):
    [check] = checks(history_of(tmp_path, kill_and_resume({25: 2.5, 27: 9.0}), 4))
    assert not check.identical and check.verdict == "diverged"
    assert check.first_difference == {"step": 25, "loss": [2.025, 2.5], "grad_norm": [0.5, 0.5]}
    assert check.text() == "resume at 20 DIVERGED at step 25: 2.025 vs 2.5"


def test_a_divergence_shows_as_many_digits_as_tell_the_values_apart():
    check = ResumeCheck(120_000, 10, False, {"step": 120_001, "loss": [0.7900453801235412, 0.8289481497577315],
                                            "grad_norm": [0.5, 0.5]}, (), True, 3)
    assert check.text() == "resume at 120,000 DIVERGED at step 120,001: 0.79 vs 0.8289"
    tiny = ResumeCheck(20, 10, False, {"step": 25, "loss": [1.0000000000000002, 1.0], "grad_norm": [0.5, 0.5]},
                       (), True, 3)
    assert tiny.text() == "resume at 20 DIVERGED at step 25: 1.0000000000000002 vs 1"     # a last-bit difference shows


def test_pending_until_the_rerun_is_done(tmp_path):
    records = kill_and_resume()[:-12]           # the new process has re-run 21..28
    [check] = checks(history_of(tmp_path, records))
    assert (check.compared, check.complete, check.verdict) == (8, False, "pending")


def test_nan_rerun_as_nan_is_identical(tmp_path):
    records = kill_and_resume()
    records[25] = line(25, loss=math.nan)       # step 25 of the first process
    records[-16] = line(25, loss=math.nan)      # and of the second
    [check] = checks(history_of(tmp_path, records))
    assert check.identical and check.compared == 10


def test_changed_computation_is_labelled_not_failed(tmp_path):
    records = kill_and_resume({25: 2.5}, threads=1)
    [check] = checks(history_of(tmp_path, records))
    assert check.changed == ("threads 2 -> 1",) and check.verdict == "changed"
    assert "changed what is computed (threads 2 -> 1)" in check.text()
    for extra, reason in (({"fresh_bandit": True}, "fresh bandit"), ({"skip_batches": 300}, "300 batches skipped"),
                          ({"device": "cuda:0"}, "device cpu -> cuda:0"), ({"world_size": 2}, "world size 1 -> 2")):
        [check] = checks(history_of(tmp_path / reason, kill_and_resume(**extra)))
        assert check.changed == (reason,)


def test_two_resumes_each_get_their_own_steps(tmp_path):
    records = kill_and_resume()
    records += [process("resume", 35, from_step=35, rerun={"from": 36, "to": 40})]
    records += [line(s, loss=3.0 if s == 38 else None) for s in range(36, 45)]
    first, second = checks(history_of(tmp_path, records, 2))
    assert (first.compared, first.identical, first.complete) == (10, True, True)
    assert (second.from_step, second.compared, second.identical) == (35, 5, False)
    assert second.first_difference["step"] == 38


def test_superseded_lines_survive_a_hand_over_and_are_bounded(tmp_path):
    history = history_of(tmp_path, kill_and_resume())
    meta, columns = history.state_dict()
    carried = LossHistory.from_state_dict(meta, columns)
    assert checks(carried) == checks(history)
    assert 0 < MAX_SUPERSEDED <= 100_000


def test_a_resume_after_a_rollback_is_not_compared_with_the_abandoned_steps(tmp_path):
    """Steps 1..60; a rollback from 60 to 30 abandons 31..60; the trainer resumes from 30
    (batches skipped), runs 31..45 and is killed; a resume from its checkpoint at 40 runs
    41..70: 41..45 are run again (compared), 46..60 replace steps the rollback abandoned, never
    run by the process before it, so no rerun to compare (the demo's "resume at 639 DIVERGED
    at step 640")."""
    clock = iter(range(10_000))

    def timed(step, loss=None):
        return {**line(step, loss), "time": 1000.0 + next(clock)}

    records = [process("start", 0), *(timed(s) for s in range(1, 61))]
    records.append({"event": "rollback", "step": 30, "from_step": 60, "to_step": 30, "time": 1000.0 + next(clock)})
    records.append(process("resume", 30, from_step=30, skip_batches=7, rerun=None))
    records += [timed(s, loss=3.0 + s / 100) for s in range(31, 46)]
    records.append(process("resume", 40, from_step=40, rerun={"from": 41, "to": 45}))
    records += [timed(s, loss=3.0 + s / 100) for s in range(41, 71)]
    for pieces in (1, 4):
        history = history_of(tmp_path / str(pieces), records, pieces)
        [check] = checks(history)            # the rollback's resume re-ran nothing: 31..45 were abandoned
        assert (check.from_step, check.compared, check.identical, check.complete) == (40, 5, True, True), check.text()
        assert check.text() == "resume at 40 verified: 5 steps identical"

    # A resume that (by the history's last step) says it runs abandoned steps again is no rerun either.
    records[-31] = process("resume", 40, from_step=40, rerun={"from": 41, "to": 60})
    history = history_of(tmp_path / "claimed", records)
    assert [c.compared for c in checks(history)] == [5]
    records = records[:-30]                                 # 41..45 not yet run again: pending
    assert [(c.compared, c.verdict) for c in checks(history_of(tmp_path / "early", records))] == [(0, "pending")]


def test_a_step_logged_twice_by_the_resumed_process_is_no_rerun(tmp_path):
    """After a resume from 20 (21..30 run again), the new process logs step 35 twice (its
    values in two calls, the second with another loss): only 21..30 are compared."""
    records = [process("start", 0, time=500.0), *(line(s) for s in range(1, 31)),
               process("resume", 20, from_step=20, rerun={"from": 21, "to": 30}, time=1050.0)]
    records += [{**line(s), "time": 1100.0 + s} for s in range(21, 41)]
    records.insert(records.index(records[-5]) + 1, {**line(35, loss=9.0), "time": 1200.0})
    [check] = checks(history_of(tmp_path, records, 3))
    assert (check.compared, check.identical, check.verdict) == (10, True, "verified"), check.text()
