"""What the event log says of a checkpoint as it lands: a live trainer writes the ``.bin``,
then its ``.json`` (docs/contract.md#the-resume-contract-step_nnnnnnjson). A read between the two
saw a "foreign" checkpoint
land, and the completion then said "requested checkpoint complete", never "landed": an
operator (and the tests waiting for "requested checkpoint landed") read the wrong thing
whenever a read fell between the two writes."""

from __future__ import annotations

import dataclasses
import os

import pytest

from console.model.checkpoint_wait import CheckpointWait, WaitEnd
from console.read.changes import UNFINISHED_S, describe_changes
from console.read.landing import AwaitedCheckpoint, landed_text
from console.read.reader import RunReader
from rundir.history.records import HistoryEvent
from rundir.layout import CHECKPOINTS
from tests.rundirs import EPOCH, make_run

STEP_SECONDS = 0.5
WRITTEN = EPOCH + 200 * STEP_SECONDS          # the mtime make_run gives step_000200.bin


def landing_reads(tmp_path, after_s: float):
    """Three real reads of one run, ``after_s`` seconds after step 200's .bin was written:
    before it, with its .bin alone, and complete."""
    run = make_run(tmp_path / "run", steps=300, checkpoints=(100, 200), step_seconds=STEP_SECONDS)
    aside = tmp_path / "aside"
    aside.mkdir()
    for name in ("step_000200.bin", "step_000200.json"):
        os.rename(run / name, aside / name)
    reader = RunReader(run, now=lambda: WRITTEN + after_s)
    before, _ = reader.read()
    os.rename(aside / "step_000200.bin", run / "step_000200.bin")
    bin_only, _ = reader.read({CHECKPOINTS})
    os.rename(aside / "step_000200.json", run / "step_000200.json")
    complete, _ = reader.read({CHECKPOINTS})
    assert [c.status for c in bin_only.checkpoints] == ["complete", "foreign"]
    assert [c.status for c in complete.checkpoints] == ["complete", "complete"]
    return before, bin_only, complete


def with_trainer(snap, state: str):
    return dataclasses.replace(snap, trainer=dataclasses.replace(snap.trainer, state=state))


def texts(notices) -> list[str]:
    return [n.text for n in notices]


def test_a_live_trainers_bin_before_its_json_is_one_landing_said_complete(tmp_path):
    before, bin_only, complete = (with_trainer(s, "running") for s in landing_reads(tmp_path, 1.0))
    now = WRITTEN + 1.0
    assert texts(describe_changes(before, bin_only, now)) == []        # not "foreign"
    assert texts(describe_changes(bin_only, complete, now)) == [
        "checkpoint landed: step_000200.bin (step 200, 11.7 KiB, complete)"]


def test_a_requested_checkpoint_is_said_landed_whichever_read_saw_its_bin(tmp_path):
    before, bin_only, complete = (with_trainer(s, "running") for s in landing_reads(tmp_path, 1.0))
    request = AwaitedCheckpoint(sent_at=WRITTEN - 0.5)
    requested = {"step_000200.bin": request}
    expected = ["requested checkpoint landed, 1.5 s after the signal: step_000200.bin (step 200, 11.7 KiB, complete)"]
    assert texts(describe_changes(bin_only, complete, WRITTEN + 1.0, requested)) == expected
    assert texts(describe_changes(before, complete, WRITTEN + 1.0, requested)) == expected


def test_the_overview_and_the_command_line_say_a_landing_as_the_dashboard_does(tmp_path):
    """One wording: the wait of the overview's job and of --checkpoint (a CheckpointWait with
    the checkpoint found) says the same line as the dashboard's read of the same landing."""
    before, bin_only, complete = (with_trainer(s, "running") for s in landing_reads(tmp_path, 1.0))
    [dashboard] = texts(describe_changes(bin_only, complete, WRITTEN + 1.0))
    info = next(c for c in complete.checkpoints if c.step == 200)
    assert landed_text(CheckpointWait(WaitEnd.LANDED, info)) == dashboard


@pytest.mark.parametrize("state, after_s", [("stopped", 1.0), ("running", UNFINISHED_S + 1)])
def test_a_bin_without_json_is_foreign_when_no_trainer_writes_it_or_it_stays_so(tmp_path, state, after_s):
    """Copied in beside a stopped run, or left without its .json by the live trainer past
    the grace: a foreign checkpoint, said as such, and its .json later says it completed."""
    before, bin_only, complete = (with_trainer(s, state) for s in landing_reads(tmp_path, after_s))
    now = WRITTEN + after_s
    assert texts(describe_changes(before, bin_only, now)) == [
        "checkpoint landed: step_000200.bin (step 200, 11.7 KiB, foreign: weights, m and v only)"]
    assert texts(describe_changes(bin_only, complete, now)) == ["step_000200.bin: resume .json written, now complete"]


def test_every_request_one_checkpoint_answers_is_settled_and_a_remote_trainer_is_waited_for(tmp_path):
    """c pressed twice within one step gives one checkpoint, which answers both requests (the
    first one was left waiting, and said unanswered after 10 minutes); a trainer on another
    host, asked through the request file, is never signallable here and is waited for, not
    said to have exited."""
    from console.read.landing import AwaitedCheckpoints

    before, _, complete = (with_trainer(s, "running") for s in landing_reads(tmp_path, 1.0))
    pid = 4242
    before, complete = (dataclasses.replace(s, trainer=dataclasses.replace(s.trainer, pid=pid))
                        for s in (before, complete))
    # The trainer's history says it took the request and which checkpoint answered it.
    answer = (HistoryEvent("signal", 200, WRITTEN - 0.3, 0, {"signal": "SIGUSR1", "action": "checkpoint",
                                                             "during_checkpoint": False}),
              HistoryEvent("checkpoint", 200, WRITTEN, 0, {"path": "step_000200.bin", "reason": "signal"}))
    complete = dataclasses.replace(complete, history=dataclasses.replace(
        complete.history, events=tuple(e for e in complete.history.events if e.event != "checkpoint") + answer))
    requests = AwaitedCheckpoints()
    baseline = {"step_000100.bin": ("as it was",)}                   # the older checkpoint, unchanged
    stamp_of = lambda name: baseline.get(name, ("written since",))       # noqa: E731
    first = AwaitedCheckpoint(sent_at=WRITTEN - 0.5, baseline=baseline)
    second = AwaitedCheckpoint(sent_at=WRITTEN - 0.4, baseline=baseline)
    for request in (first, second):
        requests.expect(request)
        requests.sent(request, pid)
    answered, ended = requests.settle(before, complete, WRITTEN + 1.0, stamp_of)
    assert list(answered) == ["step_000200.bin"] and ended == [] and not requests

    remote = with_trainer(before, "remote")
    waiting, asked = AwaitedCheckpoints(), AwaitedCheckpoint(sent_at=WRITTEN)
    waiting.expect(asked)
    waiting.sent(asked, pid)
    answered, ended = waiting.settle(remote, with_trainer(remote, "remote"), WRITTEN + 1.0, lambda name: None)
    assert (answered, ended) == ({}, []) and waiting
