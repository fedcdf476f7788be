"""One rule of waiting for a requested checkpoint (console.read.landing.RequestWait), two
drivers: the dashboard's reads (AwaitedCheckpoints.settle, through RunReader.read) and the
poll of the overview, the command line and the pivot (supervise.wait_for_checkpoint). Each
situation is made once, then both drivers are asked: they end the same way, said in the
same words."""

from __future__ import annotations

import os
import signal
import socket
import time

import pytest

from console.actions.supervise import SignalResult, send, wait_for_checkpoint
from console.model.checkpoint_wait import WaitEnd
from console.read.landing import PRUNED_DETAILS, AwaitedCheckpoint, answer_to, landed_text, pruned_since, trainer_gone
from console.read.reader import RunReader
from rundir import checkpoint_stamps, verify_trainer
from rundir.history import read_history_tail
from rundir.layout import CHECKPOINT_SIGNAL, LOSS_JSON, TRAINER, TRAINER_JSON
from tests.console.trainer_proc import Trainer
from tests.rundirs import EPOCH, make_run


def dashboard_request(reader: RunReader, result: SignalResult, timeout: float) -> AwaitedCheckpoint:
    """The request as the dashboard's signal job hands it to its reader."""
    request = AwaitedCheckpoint(result.sent_at, result.baseline, timeout=timeout)
    reader.awaited.expect(request)
    record = result.verification.record
    reader.awaited.sent(request, record.pid if record is not None else None)
    return request


def said(reader: RunReader) -> list[str]:
    """What the tick's read (the trainer's kind only) says of checkpoint requests."""
    return [n.text for n in reader.read({TRAINER})[1] if "checkpoint" in n.text and "request" in n.text]


def test_the_trainer_is_gone_by_one_rule_whichever_driver_feeds_it():
    """The dashboard's snapshot and the poll's liveness are read in the same words: another
    process, or one no longer running, is gone; one on another host with no scheduler to
    ask (asked through the request file) is waited for; a request not sent yet waits."""
    assert not trainer_gone(4242, 4242, "running") and not trainer_gone(4242, 4242, "remote")
    assert trainer_gone(4242, 4243, "running") and trainer_gone(4242, None, "stopped")
    assert trainer_gone(4242, 4242, "stale") and not trainer_gone(None, None, "stopped")


@pytest.mark.parametrize("situation", ["trainer gone", "timeout"])
def test_both_drivers_end_an_unanswered_request_alike(tmp_path, situation):
    """A trainer that cannot answer (stopped), then killed, or past a timeout of 0 s: the
    poll's wait and the dashboard's read end it the same way, said in the same words."""
    run = tmp_path / "live"
    with Trainer(run) as trainer:
        reader = RunReader(run)
        reader.read()
        os.kill(trainer.proc.pid, signal.SIGSTOP)           # it cannot answer
        try:
            result = send(run, CHECKPOINT_SIGNAL)
            assert result.ok, result.message
            timeout = 0.0 if situation == "timeout" else 600.0
            dashboard_request(reader, result, timeout)
            if situation == "trainer gone":
                trainer.proc.kill()
                trainer.proc.wait()
            wait = wait_for_checkpoint(run, result, timeout)
            expected = WaitEnd.TIMED_OUT if situation == "timeout" else WaitEnd.TRAINER_EXITED
            assert wait.end is expected and wait.pid == trainer.proc.pid
            assert said(reader) == [f"checkpoint request: {wait.why}"]
            assert said(reader) == []                       # said once
        finally:
            if trainer.proc.poll() is None:
                os.kill(trainer.proc.pid, signal.SIGCONT)


def test_a_checkpoint_written_as_the_trainer_exits_is_a_landing_for_both_drivers(tmp_path):
    """The trainer takes the request and a stop at once, writes the checkpoint and exits:
    the look that finds it gone is the last look for a landing, and both drivers find the
    same checkpoint there (never 'exited without a new checkpoint')."""
    run = tmp_path / "live"
    with Trainer(run) as trainer:
        reader = RunReader(run)
        reader.read()
        os.kill(trainer.proc.pid, signal.SIGSTOP)
        result = send(run, CHECKPOINT_SIGNAL)
        assert result.ok, result.message
        dashboard_request(reader, result, 600.0)
        trainer.proc.send_signal(signal.SIGTERM)
        os.kill(trainer.proc.pid, signal.SIGCONT)
        assert trainer.proc.wait(60) == 0
        wait = wait_for_checkpoint(run, result, 600.0)
        assert wait.end is WaitEnd.LANDED and wait.info is not None, wait.why
        [landed] = [t for t in said(reader) if t.startswith("requested checkpoint landed, ")]
        # The same checkpoint, said in the same words after the dashboard's "... after the signal".
        assert landed.split(" after the signal: ", 1)[1] == landed_text(wait).split("checkpoint landed: ", 1)[1]


def history_says(run, question, what: str, timeout: float = 60.0):
    """The trainer's history's answer to ``question`` (of its events), once it has one."""
    deadline = time.monotonic() + timeout
    while (found := question(read_history_tail(run / LOSS_JSON).events)) is None:
        assert time.monotonic() < deadline, f"the history says no {what} after {timeout:g} s"
        time.sleep(0.05)
    return found


def test_an_answer_pruned_before_any_look_found_it_is_a_landing_for_both_drivers(tmp_path):
    """The trainer answers a request, then a newer checkpoint lands and the answer is pruned
    (keep the last 1) before either driver looks, as a fast cadence, a loaded machine or a
    mount's late listing make it: both say it landed and was pruned since, in the same words,
    never 'no new checkpoint' at the timeout."""
    run = tmp_path / "live"
    with Trainer(run, "--keep-last", "1") as trainer:
        reader = RunReader(run)
        reader.read()
        first = send(run, CHECKPOINT_SIGNAL)
        assert first.ok, first.message
        dashboard_request(reader, first, 600.0)
        answer = history_says(run, lambda events: answer_to(events, first.sent_at), "answer to the request")
        assert send(run, CHECKPOINT_SIGNAL).ok
        # The prune event comes before the removal: the answer is gone once both are done.
        history_says(run, lambda events: (pruned_since(events, answer) and not (run / answer).exists()) or None,
                     f"prune of {answer} done")
        os.kill(trainer.proc.pid, signal.SIGSTOP)           # the lines since stay within a look's tail
        try:
            wait = wait_for_checkpoint(run, first, 600.0)
            assert wait.end is WaitEnd.LANDED and wait.pruned == answer and wait.info is None, wait
            [landed] = [n.text for n in reader.read()[1] if n.text.startswith("requested checkpoint landed, ")]
            assert landed.split(" after the signal: ", 1)[1] == landed_text(wait).split("checkpoint landed: ", 1)[1]
            assert landed.endswith(f"{PRUNED_DETAILS})") and not reader.awaited
        finally:
            os.kill(trainer.proc.pid, signal.SIGCONT)


def test_a_trainer_on_another_host_is_waited_for_by_both_drivers_until_its_record_goes(tmp_path):
    """No scheduler to ask and no process to see: while its record stands, both drivers wait
    for it (until the timeout); once it is removed (a clean exit), both say it exited."""
    record = {"pid": 4242, "create_time": EPOCH, "started": EPOCH, "host": f"not-{socket.gethostname()}",
              "argv": ["andrea-train", str(tmp_path / "run")]}
    run = make_run(tmp_path / "run", steps=50, checkpoints=(), trainer_record=record)
    verification = verify_trainer(run)
    assert verification.state == "remote" and verification.elsewhere, verification
    clock = [time.time()]
    reader = RunReader(run, now=lambda: clock[0])
    reader.read()
    for timeout, gone in ((0.3, False), (600.0, True)):
        result = SignalResult(True, "", verification, time.time(), checkpoint_stamps(run))
        dashboard_request(reader, result, timeout)
        if gone:
            (run / TRAINER_JSON).unlink()
        clock[0] = result.sent_at
        assert said(reader) == (["checkpoint request: trainer pid 4242 exited without a new checkpoint"]
                                if gone else [])
        wait = wait_for_checkpoint(run, result, timeout)
        assert wait.end is (WaitEnd.TRAINER_EXITED if gone else WaitEnd.TIMED_OUT)
        if not gone:
            clock[0] = result.sent_at + timeout + 0.01
            assert said(reader) == [f"checkpoint request: {wait.why}"]


def test_a_trainer_on_another_host_whose_heartbeat_went_stale_is_gone_for_both_drivers(tmp_path):
    """Its lock file's heartbeat is the one word of it from here: stale, both drivers say it exited."""
    import json
    import os

    from rundir.layout import LOCK_OWNER_FILE
    from rundir.run_lock import LockOwner

    host = f"not-{socket.gethostname()}"
    record = {"pid": 4242, "create_time": EPOCH, "started": EPOCH, "host": host, "boot_id": "b" * 32,
              "argv": ["andrea-train", str(tmp_path / "run")]}
    run = make_run(tmp_path / "run", steps=50, checkpoints=(), trainer_record=record)
    lock = run / LOCK_OWNER_FILE

    def beat(at: float) -> None:
        """The lock file as its holder last wrote it, at ``at``."""
        owner = LockOwner(host=host, boot_id="b" * 32, pid=4242, start_ticks=None, create_time=EPOCH,
                          token="f" * 32, heartbeat=at, acquired=EPOCH)
        lock.write_text(json.dumps(owner.to_dict()))
        os.utime(lock, (at, at))

    beat(time.time())
    verification = verify_trainer(run)
    assert verification.state == "remote" and "heartbeat" in verification.reason, verification
    reader = RunReader(run)
    reader.read()
    result = SignalResult(True, "", verification, time.time(), checkpoint_stamps(run))
    dashboard_request(reader, result, 600.0)
    beat(time.time() - 3600)                            # its last heartbeat an hour ago: the trainer is gone
    assert verify_trainer(run).state == "stale"
    assert said(reader) == ["checkpoint request: trainer pid 4242 exited without a new checkpoint"]
    assert wait_for_checkpoint(run, result, 60.0).end is WaitEnd.TRAINER_EXITED     # not waited out
