"""``.checkpoint_request.json``: a checkpoint asked for through the run directory, taken once by
the trainer it is addressed to (rundir/checkpoint_request.py, rundir.signals.RequestWatch)."""

from __future__ import annotations

import dataclasses
import os
import time

from hypothesis import given, settings
from hypothesis import strategies as st

from rundir.checkpoint_request import request_path, take_request, write_request
from rundir.signals import RequestWatch, SignalFlags
from rundir.trainer_record import TrainerRecord, read_trainer_record
from tests.trainer.trainer_runs import events, start_trainer, step_lines, stop_cleanly, wait_for

ME = TrainerRecord(pid=4242, create_time=1.5, host="node0", argv=["andrea-train", "run"], started=2.0,
                   start_ticks=777, boot_id="boot-a", rank=0, world_size=2)


def test_a_request_is_taken_once_by_the_trainer_it_names(tmp_path):
    write_request(tmp_path, ME)
    taken = take_request(tmp_path, ME)
    assert taken.answer and taken.request.pid == os.getpid() and taken.request.trainer["pid"] == 4242
    assert not request_path(tmp_path).exists()
    assert take_request(tmp_path, ME) is None                  # taken once


def test_a_request_for_another_trainer_is_removed_and_not_answered(tmp_path):
    for other in (dataclasses.replace(ME, pid=4243), dataclasses.replace(ME, start_ticks=778),
                  dataclasses.replace(ME, boot_id="boot-b"), dataclasses.replace(ME, host="node1")):
        write_request(tmp_path, other)
        taken = take_request(tmp_path, ME)
        assert not taken.answer and "addressed to another trainer" in taken.note
        assert not request_path(tmp_path).exists()


@settings(max_examples=int(os.environ.get("FUZZ_EXAMPLES", "60")), deadline=None)
@given(st.one_of(st.binary(max_size=300), st.sampled_from([b"{}", b"[]", b'{"trainer": 1}', b"null",
                                                           b'{"trainer": {}, "requested_at": true, '
                                                          b'"host": "h", "pid": 1}'])))
def test_a_request_that_is_not_one_is_removed_and_said_never_raises(tmp_path_factory, data):
    run = tmp_path_factory.mktemp("run")
    request_path(run).write_bytes(data)
    taken = take_request(run, ME)
    assert taken is not None and not taken.answer and taken.note.startswith("removed")
    assert "\n" not in taken.note and not request_path(run).exists()


def test_a_plain_trainer_answers_a_request_and_removes_a_stale_one(trainer_run):
    """Any trainer looks for the request (a console uses it for one of several processes)."""
    run = trainer_run("requested")
    proc = start_trainer(run, "--checkpoint-every", "100000")
    try:
        wait_for(lambda: read_trainer_record(run)[0] is not None and len(step_lines(run)) > 5, what="training")
        record, _ = read_trainer_record(run)
        write_request(run, dataclasses.replace(record, pid=record.pid + 1))          # not this trainer
        wait_for(lambda: "addressed to another trainer" in (run / "trainer.log").read_text(),
                 what="the stale request removed, and said")
        assert not request_path(run).exists()
        write_request(run, record)
        [checkpoint] = wait_for(lambda: events(run, "checkpoint"), what="the requested checkpoint")
        assert checkpoint["reason"] == "signal" and not request_path(run).exists()
        [signal_event] = events(run, "signal")
        assert signal_event["signal"] == "checkpoint request" and signal_event["step"] == checkpoint["step"]
        assert f"checkpoint requested by console pid {os.getpid()}" in (run / "trainer.log").read_text()
        err = stop_cleanly(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert [e["reason"] for e in events(run, "checkpoint")] == ["signal", "signal"]


def not_regular_files(path):
    """Makers of what may sit at the request's path that is no regular file."""
    return {"a directory": lambda: path.mkdir(), "a FIFO": lambda: os.mkfifo(path),
            "a symbolic link": lambda: path.symlink_to(path.with_name("elsewhere.json"))}


def test_what_is_no_regular_file_is_left_alone_and_said_once_until_it_changes(tmp_path):
    """Issue 35: a directory at the request's path made the trainer say "could not be removed"
    at every poll, ten times a second, without end. Nothing that is not a regular file is
    opened (a FIFO would block a plain open) or removed; it is said once, and again once it
    changes (another inode, type or mtime)."""
    for kind, make in not_regular_files(request_path(tmp_path)).items():
        path = request_path(tmp_path)
        make()
        said: list[str] = []
        watch = RequestWatch(tmp_path, ME, said.append, every=0)
        flags = SignalFlags()
        for _ in range(50):
            watch.poll(flags)
        assert said == [f".checkpoint_request.json is {kind}, not a request: left alone"], kind
        assert os.path.lexists(path) and not flags.pending
        os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9), follow_symlinks=False)
        watch.poll(flags)
        assert len(said) == 2, kind                         # it changed: said again, once
        os.rmdir(path) if kind == "a directory" else path.unlink()
        write_request(tmp_path, ME)                          # a request in its place is taken
        watch.poll(flags)
        assert flags.take().checkpoint and not path.exists(), kind


def log_text(run) -> str:
    log = run / "trainer.log"
    return log.read_text() if log.exists() else ""


def test_a_trainer_says_a_directory_at_the_request_path_once_and_still_takes_a_request(trainer_run):
    run = trainer_run("request-dir")
    request_path(run).mkdir()
    proc = start_trainer(run, "--checkpoint-every", "100000")
    line = ".checkpoint_request.json is a directory, not a request: left alone"
    try:
        wait_for(lambda: line in log_text(run) and step_lines(run), what="the directory said, and a step")
        said_at = step_lines(run)[-1]["time"]
        # Ten polls' worth of training later (POLL_S is 0.1 s): still said once.
        wait_for(lambda: step_lines(run)[-1]["time"] - said_at > 1.0, what="a second of steps")
        assert log_text(run).count(line) == 1
        request_path(run).rmdir()
        record, _ = read_trainer_record(run)
        write_request(run, record)
        [checkpoint] = wait_for(lambda: events(run, "checkpoint"), what="the requested checkpoint")
        assert checkpoint["reason"] == "signal" and not request_path(run).exists()
        err = stop_cleanly(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert log_text(run).count(line) == 1
