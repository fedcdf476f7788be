"""Following a run: inotify where events can be trusted, a poll of reopened files where they
cannot (a FUSE mount here, as a network filesystem), and the poll as a safety net everywhere."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from console.read.watcher import RunFingerprint, watch_run
from rundir.filesystems import Filesystem
from rundir.layout import CHECKPOINTS, HISTORY, STATE, TRAINER
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

    def wait(self, condition, what: str, ceiling: float = 30.0) -> None:
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
