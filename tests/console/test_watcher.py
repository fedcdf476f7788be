"""Following a run: inotify where events can be trusted, a poll of reopened files where they
cannot (a FUSE mount here, as a network filesystem), and the poll as a safety net everywhere."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from console.read.watcher import PacedReads, RunFingerprint, watch_run
from rundir.filesystems import Filesystem
from rundir.layout import CHECKPOINTS, HISTORY, SAMPLES, STATE, TRAINER
from tests.mounts import bindfs
from tests.rundirs import make_run


class Watching:
    """watch_run in a thread, collecting what it posts and announces."""

    def __init__(self, run_dir: Path, poll: bool = False):
        self.posted: list[frozenset[str]] = []
        self.announced: list[Filesystem] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=watch_run, args=(run_dir, self.posted.append, self.stop),
                                       kwargs={"poll": poll, "announce": self.announced.append}, daemon=True)

    def __enter__(self) -> "Watching":
        self.thread.start()
        self.wait(lambda: self.announced, "the filesystem announced")
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(30)
        assert not self.thread.is_alive(), "the watcher did not stop"

    def wait(self, condition, what: str, ceiling: float = 60.0) -> None:
        deadline = time.monotonic() + ceiling
        while not condition():
            assert time.monotonic() < deadline, f"not within {ceiling} s: {what}; posted {self.posted}"
            time.sleep(0.05)

    def saw(self, kind: str) -> bool:
        return any(kind in kinds for kinds in self.posted)


def append_step(run: Path, step: int) -> None:
    with open(run / ".loss.json", "a") as f:
        f.write(f'{{"step": {step}, "loss": 2.5, "lr": 0.001, "grad_norm": 1.0, "arm": "a", "tokens": 1, '
                f'"time": 1.0}}\n')


def test_fingerprint_names_the_kinds_that_changed(tmp_path):
    run = make_run(tmp_path / "run", steps=5)
    fingerprint = RunFingerprint(run, list_always=True)
    assert fingerprint.changed() == frozenset()
    append_step(run, 6)
    assert fingerprint.changed() == {HISTORY}
    (run / ".tmp-.state.json.1").write_text("{}")            # a temporary: nothing
    os.replace(run / ".tmp-.state.json.1", run / ".state.json")   # replaced: a new inode
    (run / "step_000006.bin").write_bytes(b"")
    assert fingerprint.changed() == {STATE, CHECKPOINTS}
    (run / "step_000006.bin").unlink()
    (run / ".trainer.json").write_text("{}")
    assert fingerprint.changed() == {CHECKPOINTS, TRAINER}
    assert fingerprint.changed() == frozenset()


def test_a_fuse_mount_is_polled_and_follows_writes_made_behind_it(tmp_path):
    """Writes to the directory behind the mount send the mount no event: the poll sees them."""
    node = make_run(tmp_path / "node" / "run", steps=5)
    with bindfs(node.parent, tmp_path / "login") as login, Watching(login / "run") as watching:
        assert [(fs.name, fs.events, fs.watched_by) for fs in watching.announced] == [("fuse", False, "polling · fuse")]
        append_step(node, 6)
        watching.wait(lambda: watching.saw(HISTORY), "the history's growth seen through the mount")
        (node / "step_000006.bin").write_bytes(b"")
        watching.wait(lambda: watching.saw(CHECKPOINTS), "a checkpoint seen through the mount")


def test_a_local_disk_uses_events_and_poll_forces_polling(tmp_path):
    run = make_run(tmp_path / "run", steps=5)
    with Watching(run) as watching:
        assert watching.announced[0].watched_by == "events"
        append_step(run, 6)
        watching.wait(lambda: watching.saw(HISTORY), "the history's growth")
    with Watching(run, poll=True) as watching:
        assert watching.announced[0].watched_by.startswith("polling · ")
        append_step(run, 7)
        watching.wait(lambda: watching.saw(HISTORY), "the history's growth, polled")


class Loops:
    """PacedReads whose read loops run in real threads; what it read and posted."""

    def __init__(self, read):
        self.threads: list[threading.Thread] = []
        self.posted: list[tuple] = []
        self.reads = PacedReads(read, self.posted.append, lambda snapshot, notices: ("snapshot", snapshot),
                                lambda notice: ("failed", notice.text), time.time, self.start)
        self.reads.steady_s = 0.0

    def start(self, reads: PacedReads) -> bool:
        thread = threading.Thread(target=reads.drain, args=(lambda: False,), daemon=True)
        self.threads.append(thread)
        thread.start()
        return True

    def join(self) -> None:
        for thread in self.threads:
            thread.join(30)
            assert not thread.is_alive(), "a read loop did not end with nothing left to read"


def test_paced_reads_make_a_burst_one_read_and_end_when_nothing_is_left():
    gate, read = threading.Event(), []

    def first_waits(kinds):
        read.append(kinds)
        if len(read) == 1:
            assert gate.wait(30)
        return len(read), []

    loops = Loops(first_waits)
    loops.reads.request({HISTORY})
    deadline = time.monotonic() + 30
    while not read:
        assert time.monotonic() < deadline, "the first read never came"
        time.sleep(0.01)
    loops.reads.request({STATE})                 # while the first read is under way
    loops.reads.request({SAMPLES})
    assert len(loops.threads) == 1               # one loop: reads never overlap
    gate.set()
    loops.join()
    assert read == [{HISTORY}, {STATE, SAMPLES}]         # the burst became one read
    assert loops.posted == [("snapshot", 1), ("snapshot", 2)]
    loops.reads.request({HISTORY})               # the loop ended: a new one reads this
    loops.join()
    assert len(loops.threads) == 2 and read[-1] == {HISTORY}


def test_a_read_that_raises_is_said_and_the_next_one_comes():
    def fails_once(kinds):
        if HISTORY in kinds:
            raise RuntimeError("boom")
        return "read", []

    loops = Loops(fails_once)
    loops.reads.request({HISTORY})
    loops.join()
    loops.reads.request({STATE})
    loops.join()
    assert loops.posted == [("failed", "read failed: RuntimeError('boom')"), ("snapshot", "read")]


def test_closed_paced_reads_read_nothing_more():
    read = []
    loops = Loops(lambda kinds: read.append(kinds) or (len(read), []))
    loops.reads.close()
    loops.reads.request({HISTORY})
    assert loops.threads == [] and read == []
