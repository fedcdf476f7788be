"""The mirror on a shared home (issue 34): a same-length edit between the sampled blocks is
found by the full check; on a filesystem other hosts share the mirror is read, never mapped
(a real FUSE mount); two processes sharing one cache never crash nor read a half-written
mirror. ``FUZZ_EXAMPLES`` sets the cases of the edit property."""

from __future__ import annotations

import binascii
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from console.read import history_mirror
from console.read import mirror_file as mirror
from console.read.cache_dir import CACHE_ENV, mirror_path
from console.read.history_mirror import HistoryMirror
from console.read.mirror_file import open_history, open_mirror, verify_covered
from rundir.filesystems import filesystem_of

from .test_history_mirror import fresh, mapped, step_line, summary

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "60"))
ROOT = Path(__file__).resolve().parents[2]


def long_history(path: Path, steps: int = 3000) -> bytes:
    data = b"".join(step_line(s, loss=2.0 + (s % 97) / 100) + b"\n" for s in range(steps))
    path.write_bytes(data)
    return data


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(where=st.floats(0, 1), length=st.integers(1, 64), seed=st.integers(0, 2**32 - 1))
def test_a_same_length_edit_anywhere_is_found_by_the_full_check(where, length, seed):
    """A same-length change of the history's digits in place (``2.7`` made ``9.7``), at any
    position and of any length: the open refuses the mirror (the edit hit a sampled block) or
    the full check says the mirror is stale."""
    with tempfile.TemporaryDirectory() as tmp, mock.patch.dict(os.environ, {CACHE_ENV: tmp}), \
            mock.patch.object(mirror, "WHOLE_CHECK_BYTES", 4096), mock.patch.object(mirror, "SAMPLE_BYTES", 256):
        path = Path(tmp) / ".loss.json"
        data = long_history(path)
        first, _, _ = open_history(path, min_bytes=0)
        covered = first._offset
        start = min(int(where * covered), covered - 1)
        while not 48 <= data[start] <= 57:             # from the first digit at or after it (the
            start = (start + 1) % covered              # history is mostly digits: a few bytes on)
        rng = np.random.default_rng(seed)
        edited = bytearray(data)
        for i in range(start, min(start + length, covered)):
            if 48 <= edited[i] <= 57:
                edited[i] = 48 + (edited[i] - 48 + int(rng.integers(1, 10))) % 10     # another digit
        with open(path, "r+b") as fh:                  # in place: the same file, the same length
            fh.write(edited)
        history, why, source = open_mirror(path)
        if history is None:
            assert why is not None                     # the edit hit a sampled block
        else:
            assert verify_covered(path, source) is False
            assert summary(history) != summary(fresh(path))     # what the mirror alone would show


def test_the_full_check_passes_an_unchanged_or_grown_history_and_cannot_tell_a_replaced_one(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    path = tmp_path / ".loss.json"
    long_history(path, 500)
    open_history(path, min_bytes=0)
    _, _, source = open_mirror(path)
    assert verify_covered(path, source) is True
    with open(path, "ab") as fh:
        fh.write(step_line(500) + b"\n")
    assert verify_covered(path, source) is True
    assert verify_covered(path, source, should_stop=lambda: True) is None
    shutil.copy(path, tmp_path / "copy")
    os.replace(tmp_path / "copy", path)
    assert verify_covered(path, source) is None         # another file: the reader sees it replaced


@pytest.mark.parametrize("torn", [b"", b'{"step": 3000, "lo'])
def test_the_crc_kept_is_that_of_every_byte_covered_however_it_was_carried(tmp_path, monkeypatch, torn):
    """The whole CRC in the header: computed beside a first parse (up to a mark, then carried
    on), then carried on from the mirror over the bytes appended: always the CRC-32 of exactly
    the bytes the mirror covers (a torn last line is not covered)."""
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(mirror, "THREAD_CHUNK", 4096)           # many marks in a small history
    monkeypatch.setattr(history_mirror, "REWRITE_AFTER_BYTES", 1)          # written again at each open
    path = tmp_path / ".loss.json"
    long_history(path)
    with open(path, "ab") as fh:
        fh.write(torn)
    for appended in (0, 40):
        with open(path, "ab") as fh:
            fh.write(b"".join(step_line(4000 + appended + s) + b"\n" for s in range(appended)))
        keeper = HistoryMirror(path, min_bytes=0)
        history, update, _ = keeper.open()
        keeper.keep_up(history, update)
        source = keeper.source
        assert source is not None and source["covered"] == history._offset
        assert source["crc"] == binascii.crc32(path.read_bytes()[:source["covered"]])
        assert verify_covered(path, source) is True


def test_a_mirror_on_a_shared_filesystem_is_read_not_mapped(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    path = tmp_path / ".loss.json"
    long_history(path, 2000)
    open_history(path, min_bytes=0)
    local, _, _ = open_mirror(path, shared=False)
    read, why, _ = open_mirror(path, shared=True)
    assert why is None and mapped(local._cols.step) and not mapped(read._cols.step)
    assert summary(read) == summary(local) == summary(fresh(path))
    with open(path, "ab") as fh:                       # appended into its own memory's spare rows
        fh.write(step_line(2000) + b"\n")
    read.refresh()
    assert summary(read) == summary(fresh(path))


@pytest.mark.skipif(shutil.which("bindfs") is None or not os.path.exists("/dev/fuse"), reason="needs bindfs and FUSE")
def test_on_a_real_fuse_mount_the_mirror_is_read_not_mapped(tmp_path, monkeypatch):
    """The cache on a FUSE mount (bindfs: what a network home looks like to statfs): the
    mirror is written there and read into memory, never mapped."""
    backing, mount = tmp_path / "backing", tmp_path / "mount"
    backing.mkdir()
    mount.mkdir()
    subprocess.run(["bindfs", str(backing), str(mount)], check=True, timeout=30)
    try:
        assert filesystem_of(mount).shared and not filesystem_of(tmp_path).shared
        monkeypatch.setenv(CACHE_ENV, str(mount / "cache"))
        path = tmp_path / ".loss.json"
        long_history(path, 2000)
        assert open_history(path, min_bytes=0)[2] is None
        assert mirror_path(path).is_file() and (backing / "cache" / "history").is_dir()
        history, why, _ = open_mirror(path)                   # shared: asked of the mount itself
        assert why is None and not mapped(history._cols.step)
        assert summary(history) == summary(fresh(path))
        del history
    finally:
        subprocess.run(["fusermount3", "-u", str(mount)], check=True, timeout=30)


def test_a_dead_writers_temporary_in_the_cache_is_removed_once_an_hour_old(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    path = tmp_path / ".loss.json"
    long_history(path, 100)
    open_history(path, min_bytes=0)
    where = mirror_path(path).parent
    old, young = where / ".tmp-x.mirror.0123456789ab.1", where / ".tmp-y.mirror.0123456789ab.1"
    old.write_bytes(b"half a mirror")
    young.write_bytes(b"another host writing now")
    os.utime(old, (time.time() - mirror.STALE_TEMP_S - 60,) * 2)
    with open(path, "ab") as fh:
        fh.write(step_line(100) + b"\n")
    assert open_history(path, min_bytes=0)[2] is None and mirror.save_mirror(fresh(path)) is None
    assert not old.exists() and young.exists()


# -- two consoles, one cache --------------------------------------------------------------
WORKER = r"""
import json, os, sys, time
from pathlib import Path
from rundir.history import LossHistory
from console.read.mirror_file import open_mirror, save_mirror
from console.read import history_mirror
from console.read.history_mirror import HistoryMirror

path, me, other, rounds, shared = Path(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5] == "1"
truth = LossHistory(path)
truth.refresh()
want = (truth.step.tolist(), truth.loss.tolist())
Path(path.parent, me + ".ready").touch()
deadline = time.monotonic() + 60
while not Path(path.parent, other + ".ready").exists():          # both start together
    assert time.monotonic() < deadline, "the other process never started"
    time.sleep(0.01)
used = refused = 0
for i in range(rounds):
    keeper = HistoryMirror(path, min_bytes=0, shared=shared)
    history, update, note = keeper.open()
    assert (history.step.tolist(), history.loss.tolist()) == want, "a mirror that is not the history was used"
    if note is None and keeper.opened_from is not None:
        used += 1
    elif note is not None:
        refused += 1
    assert save_mirror(history) is None                          # and write it again, over the other's
print(json.dumps({"used": used, "refused": refused}))
"""


def test_two_processes_sharing_one_cache_never_read_a_half_written_mirror(tmp_path, monkeypatch):
    """Two processes (one mapping, one reading as on a shared home) open the history through
    the one cache and write its mirror over each other's, as fast as they can: each open is
    the history exactly, and nothing raises."""
    cache = tmp_path / "cache"
    monkeypatch.setenv(CACHE_ENV, str(cache))
    path = tmp_path / ".loss.json"
    long_history(path, 20_000)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, str(path), me, other, "40", shared], cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for me, other, shared in (("a", "b", "0"), ("b", "a", "1"))]
    outs = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=120)
            assert proc.returncode == 0, err
            outs.append(json.loads(out))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert sum(o["used"] for o in outs) > 0                   # they did read each other's mirrors
    assert not [p for p in (cache / "history").iterdir() if p.name.startswith(".tmp-")]
    assert open_mirror(path)[1] is None
