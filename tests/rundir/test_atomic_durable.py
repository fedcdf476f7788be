"""``durable=False``: the same atomic replacement, without the fsyncs (live files only)."""

from __future__ import annotations

import os

from rundir import read_state, write_state
from rundir.atomic import atomic_write_json


def test_non_durable_write_is_still_a_whole_replacement(tmp_path, monkeypatch):
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(fd) or real_fsync(fd))
    atomic_write_json(tmp_path / "x.json", {"a": 1}, durable=False)
    assert synced == []
    write_state(tmp_path, {"version": 1, "step": 3, "arms": {}}, durable=False)
    assert synced == [] and read_state(tmp_path).value.step == 3
    write_state(tmp_path, {"version": 1, "step": 4, "arms": {}})
    assert len(synced) == 2                       # the file, then the directory
    assert read_state(tmp_path).value.step == 4
    assert sorted(p.name for p in tmp_path.iterdir()) == [".state.json", "x.json"]


def test_a_chunk_that_is_a_count_is_a_hole_of_zeros(tmp_path):
    from rundir.atomic import atomic_write_chunks

    target = tmp_path / "holes.bin"
    assert atomic_write_chunks(target, iter([b"ab", 1 << 20, b"cd", 3 << 20])) == 4 + (4 << 20)
    data = target.read_bytes()
    assert data[:2] == b"ab" and data[2 + (1 << 20):4 + (1 << 20)] == b"cd" and len(data) == 4 + (4 << 20)
    assert not data[2:2 + (1 << 20)].strip(b"\0") and not data[4 + (1 << 20):].strip(b"\0")
    assert target.stat().st_blocks * 512 < 1 << 20           # the holes take no disk
