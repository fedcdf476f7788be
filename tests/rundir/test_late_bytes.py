"""NUL bytes at a file's end are bytes not written yet (a network filesystem shows the size
first): the incremental readers stop before them, read the same offset again, and never skip
a line that arrived late. NULs that stay past the grace are one counted bad line."""

from __future__ import annotations

import os
import time

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from console.read.log_tail import LogTail
from rundir import late_bytes
from rundir.history import LossHistory, read_history_tail
from rundir.late_bytes import LateBytes


def step_line(step: int) -> bytes:
    return orjson.dumps({"step": step, "loss": 3.0 - step / 1000, "lr": 1e-3, "grad_norm": 1.0, "arm": "a",
                         "tokens": step * 64, "time": 1e9 + step}) + b"\n"


def late_append(path, data: bytes) -> int:
    """What an NFS client sees of another host's append: the new size, NUL bytes for now.
    Returns the offset the data belongs at (fill it in with :func:`land`)."""
    with open(path, "ab") as f:
        offset = f.tell()
        f.write(b"\0" * len(data))
    return offset


def land(path, offset: int, data: bytes) -> None:
    """The late bytes arrive, at the offsets the NULs held."""
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, data, offset)
    finally:
        os.close(fd)


def wait_for(condition, what: str, ceiling: float = 60.0):
    deadline = time.monotonic() + ceiling
    while not condition():
        assert time.monotonic() < deadline, f"not within {ceiling} s: {what}"
        time.sleep(0.05)


def test_history_rereads_a_nul_tail_until_its_lines_land(tmp_path):
    path = tmp_path / ".loss.json"
    path.write_bytes(b"".join(step_line(s) for s in range(1, 4)))
    history = LossHistory(path)
    history.refresh()
    late = b"".join(step_line(s) for s in range(4, 7))
    at = late_append(path, late)
    for _ in range(3):                          # read again and again while the bytes are late
        history.refresh()
        assert list(history.step) == [1, 2, 3]
        assert (history.bad_lines, history.torn_tail) == (0, 0)
    land(path, at, late)
    history.refresh()
    assert list(history.step) == [1, 2, 3, 4, 5, 6]
    assert (history.bad_lines, history.torn_tail) == (0, 0)


def test_a_later_write_that_lands_first_waits_for_the_earlier_one(tmp_path):
    """Pages reach the server out of order: a NUL run in the middle, real lines after it."""
    path = tmp_path / ".loss.json"
    path.write_bytes(step_line(1))
    history = LossHistory(path)
    history.refresh()
    early, later = step_line(2), step_line(3)
    at = late_append(path, early)
    with open(path, "ab") as f:
        f.write(later)
    history.refresh()
    assert list(history.step) == [1] and history.bad_lines == 0
    land(path, at, early)
    history.refresh()
    assert list(history.step) == [1, 2, 3] and history.bad_lines == 0


def test_a_hole_that_stays_is_one_bad_line_and_reading_goes_on(tmp_path, monkeypatch):
    monkeypatch.setattr(late_bytes, "GRACE_S", 0.3)
    path = tmp_path / ".loss.json"
    path.write_bytes(step_line(1) + b"\0" * 40 + b"\n" + step_line(3))
    history = LossHistory(path)
    history.refresh()
    assert list(history.step) == [1]
    wait_for(lambda: history.refresh() is not None and history.bad_lines == 1, "the hole taken as a bad line")
    assert list(history.step) == [1, 3]
    with open(path, "ab") as f:                 # later lines come at once: the hole is not waited for again
        f.write(step_line(4))
    history.refresh()
    assert list(history.step) == [1, 3, 4] and history.bad_lines == 1


def test_log_tail_keeps_late_lines(tmp_path):
    path = tmp_path / "trainer.log"
    path.write_bytes(b"one\ntwo\n")
    tail = LogTail(path)
    assert tail.read() == ("one", "two")
    late = b"three\nfour\n"
    at = late_append(path, late)
    assert tail.read() == ("one", "two")
    assert tail.read() == ("one", "two")
    land(path, at, late)
    assert tail.read() == ("one", "two", "three", "four")
    assert tail.seen == 4


def test_summary_tail_does_not_count_a_late_tail(tmp_path):
    path = tmp_path / ".loss.json"
    path.write_bytes(b"".join(step_line(s) for s in range(1, 4)))
    late_append(path, step_line(4) + step_line(5))
    tail = read_history_tail(path)
    assert list(tail.step) == [1, 2, 3]
    assert (tail.bad_lines, tail.torn_tail) == (0, 0)


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200), st.integers(0, 1000))
def test_usable_never_takes_an_awaited_nul(data, offset):
    clock = FakeClock()
    late = LateBytes(grace_s=5.0, clock=clock)
    n = late.usable(data, offset)
    assert 0 not in data[:n]
    assert n == len(data) or data[n] == 0
    assert late.awaited == (n < len(data))
    clock.now = 6.0                             # past the grace: the first NUL's line is taken
    n2 = late.usable(data, offset)
    assert n2 >= n
    if n < len(data):
        line_end = data.find(b"\n", n)
        assert n2 == len(data) if line_end < 0 else n2 > line_end




def test_nuls_in_a_file_nothing_writes_to_are_taken_at_once(tmp_path):
    """A history opened long after a crash left a hole: no wait, the hole is one bad line."""
    path = tmp_path / ".loss.json"
    path.write_bytes(step_line(1) + b"\0" * 40 + b"\n" + step_line(3))
    old = time.time() - 2 * late_bytes.GRACE_S
    os.utime(path, (old, old))
    history = LossHistory(path)
    history.refresh()
    assert list(history.step) == [1, 3] and history.bad_lines == 1


def test_a_sidecar_read_waits_briefly_for_late_bytes(tmp_path):
    import threading

    from rundir.safe_read import read_json

    path = tmp_path / ".state.json"
    body = b'{"version": 1, "step": 5}'
    path.write_bytes(b"\0" * len(body))
    lands = threading.Timer(0.02, land, (path, 0, body))
    lands.start()
    read = read_json(path, 1 << 20)
    lands.join()
    assert read.ok and read.value == {"version": 1, "step": 5}
    path.write_bytes(b'{"version": 1}' + b"\0" * 8)          # NULs that stay: said, never parsed
    read = read_json(path, 1 << 20)
    assert not read.ok and "NUL" in read.error


def test_summary_tail_reads_past_a_hole_with_lines_after_it(tmp_path):
    """A crash's hole in the middle of a history a resumed trainer keeps writing: the summary
    shows the newest step, not the one before the hole."""
    path = tmp_path / ".loss.json"
    path.write_bytes(step_line(1) + b"\0" * 40 + b"\n" + b"".join(step_line(s) for s in range(2, 6)))
    tail = read_history_tail(path)
    assert list(tail.step) == [1, 2, 3, 4, 5] and tail.bad_lines == 1
