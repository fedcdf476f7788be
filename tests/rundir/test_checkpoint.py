"""Checkpoints: the seed's binary format, atomic writes, classification, checksums."""

from __future__ import annotations

import os
import struct

import numpy as np
import pytest

from rundir import (
    CheckpointError,
    ResumeState,
    inspect_checkpoint,
    latest_resumable,
    list_checkpoints,
    open_checkpoint,
    read_sidecar,
    verify_checksum,
    write_checkpoint,
)
from rundir.checkpoint import checkpoint_stamps, file_checksum, inspect_listed, said_checkpoints, sidecar_path
from rundir.history.records import HistoryEvent


def arrays(n, seed=0):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal(n).astype(np.float32)
    return w, (w * 0.5).astype(np.float32), (w * w).astype(np.float32)


def test_round_trip_is_the_seed_format_byte_for_byte(tmp_path):
    w, m, v = arrays(1000)
    info = write_checkpoint(tmp_path, 42, w, m, v, resume=ResumeState(extra={"note": "x"}))
    raw = (tmp_path / "step_000042.bin").read_bytes()
    assert len(raw) == 8 + 12 * 1000
    assert struct.unpack("<ii", raw[:8]) == (42, 1000)
    assert raw[8:] == w.tobytes() + m.tobytes() + v.tobytes()
    assert info.status == "complete" and info.n_params == 1000 and info.step == 42
    loaded = open_checkpoint(info.path)
    assert np.array_equal(loaded.weights, w) and np.array_equal(loaded.m, m) and np.array_equal(loaded.v, v)
    sidecar, err = read_sidecar(sidecar_path(info.path))
    assert err is None and sidecar.extra["note"] == "x" and sidecar.checksum == file_checksum(info.path)
    assert verify_checksum(info) is None


def test_wide_step_names_past_999999(tmp_path):
    w, m, v = arrays(4)
    info = write_checkpoint(tmp_path, 1_234_567, w, m, v)
    assert info.path.name == "step_1234567.bin" and info.status == "complete"


def test_no_temporary_file_is_left_and_directory_has_only_final_names(tmp_path):
    write_checkpoint(tmp_path, 1, *arrays(10))
    assert sorted(os.listdir(tmp_path)) == ["step_000001.bin", "step_000001.json"]


def test_bare_bin_is_foreign_and_still_resumable(tmp_path):
    info = write_checkpoint(tmp_path, 5, *arrays(10))
    sidecar_path(info.path).unlink()
    foreign = inspect_checkpoint(info.path)
    assert foreign.status == "foreign" and "weights, m and v only" in foreign.reason
    assert foreign.resumable


@pytest.mark.parametrize("damage, reason", [
    (lambda raw: raw[:-4], "truncated"),
    (lambda raw: raw + b"\0" * 12, "too long"),
    (lambda raw: raw[:5], "shorter than the 8-byte header"),
    (lambda raw: struct.pack("<ii", 6, 10) + raw[8:], "differs from the file name"),
    (lambda raw: struct.pack("<ii", 5, 0) + raw[8:], "n_params = 0"),
    (lambda raw: struct.pack("<ii", 5, -3) + raw[8:], "n_params = -3"),
    (lambda raw: b"", "shorter than the 8-byte header"),
])
def test_invalid_checkpoints_name_the_problem(tmp_path, damage, reason):
    info = write_checkpoint(tmp_path, 5, *arrays(10))
    info.path.write_bytes(damage(info.path.read_bytes()))
    bad = inspect_checkpoint(info.path)
    assert bad.status == "invalid" and reason in bad.reason
    with pytest.raises(CheckpointError, match="step_000005.bin"):
        open_checkpoint(info.path)


def test_sidecar_that_disagrees_or_is_garbage_makes_it_foreign(tmp_path):
    info = write_checkpoint(tmp_path, 5, *arrays(10))
    side = sidecar_path(info.path)
    side.write_text('{"format_version": 1, "step": 6, "n_params": 10, "checksum": "crc32:0"}')
    assert "says step = 6" in inspect_checkpoint(info.path).reason
    side.write_bytes(b"\x00garbage")
    got = inspect_checkpoint(info.path)
    assert got.status == "foreign" and "not valid JSON" in got.reason


def test_checksum_detects_a_flipped_byte(tmp_path):
    info = write_checkpoint(tmp_path, 5, *arrays(100))
    raw = bytearray(info.path.read_bytes())
    raw[500] ^= 0xFF
    info.path.write_bytes(bytes(raw))
    assert "differs" in verify_checksum(inspect_checkpoint(info.path))


def test_listing_and_latest_prefers_complete_over_newer_foreign(tmp_path):
    for step in (100, 200, 300):
        write_checkpoint(tmp_path, step, *arrays(10, step))
    sidecar_path(tmp_path / "step_000300.bin").unlink()          # died before its .json
    (tmp_path / "step_000400.bin").write_bytes(b"junk")           # invalid
    (tmp_path / "notes.bin").write_bytes(b"junk")                 # not a checkpoint name
    infos = list_checkpoints(tmp_path)
    assert [(i.step, i.status) for i in infos] == [(100, "complete"), (200, "complete"),
                                                   (300, "foreign"), (400, "invalid")]
    assert latest_resumable(tmp_path).step == 200
    for step in (100, 200):
        sidecar_path(tmp_path / f"step_{step:06d}.bin").unlink()
    assert latest_resumable(tmp_path).step == 300
    assert list_checkpoints(tmp_path / "missing") == []


def test_rewriting_a_step_drops_the_old_sidecar_first(tmp_path):
    write_checkpoint(tmp_path, 7, *arrays(10, 1))
    info = write_checkpoint(tmp_path, 7, *arrays(10, 2))
    assert info.sidecar.checksum == file_checksum(info.path)


def test_rejects_wrong_dtype_and_mismatched_lengths(tmp_path):
    w, m, v = arrays(10)
    with pytest.raises(CheckpointError, match="float32"):
        write_checkpoint(tmp_path, 1, w.astype(np.float64), m, v)
    with pytest.raises(CheckpointError, match="m has 9 values"):
        write_checkpoint(tmp_path, 1, w, m[:9], v)
    assert list(tmp_path.iterdir()) == []


def test_the_trainers_word_checks_a_listing_and_a_vanished_file_is_gone_not_invalid(tmp_path):
    for step in (100, 200, 300):
        write_checkpoint(tmp_path, step, *arrays(4))
    events = [HistoryEvent("checkpoint", s, 0.0, i, {"path": f"step_000{s}.bin", "reason": "cadence"})
              for i, s in enumerate((100, 200, 300))]
    events.append(HistoryEvent("prune", 300, 0.0, 9, {"steps": [100], "bytes": 1}))
    said = said_checkpoints(events)
    assert said == {"step_000200.bin": True, "step_000300.bin": True, "step_000100.bin": False}
    # The pruned one still opens (a prune killed half-way): it is listed as it is.
    assert set(checkpoint_stamps(tmp_path, said)) == {"step_000100.bin", "step_000200.bin", "step_000300.bin"}
    os.unlink(tmp_path / "step_000100.bin")
    assert inspect_listed(tmp_path / "step_000100.bin") is None
    assert inspect_checkpoint(tmp_path / "step_000100.bin").status == "invalid"     # asked for by name: it is not there
    assert [c.step for c in list_checkpoints(tmp_path)] == [200, 300]
    # Said and absent: looked up by name, left out; the listing's own are all there.
    os.unlink(tmp_path / "step_000300.bin")
    assert set(checkpoint_stamps(tmp_path, said)) == {"step_000200.bin"}
    assert said_checkpoints(events, last=1) == {"step_000100.bin": False}
