"""The run directory's footprint, its filesystem's room and how long that lasts."""

from __future__ import annotations

import os

import pytest

from rundir import storage
from rundir.storage import Storage, directory_size, growth_per_step, measure


def test_directory_size_counts_subdirectories_and_not_links(tmp_path):
    (tmp_path / "a").write_bytes(b"x" * 100)
    (tmp_path / "archive" / "pivot_1").mkdir(parents=True)
    (tmp_path / "archive" / "pivot_1" / "b").write_bytes(b"y" * 50)
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    outside.write_bytes(b"z" * 10_000)
    (tmp_path / "link").symlink_to(outside)
    assert directory_size(tmp_path) == (150, False)


def test_a_huge_directory_is_sized_approximately(tmp_path, monkeypatch):
    monkeypatch.setattr(storage, "MAX_ENTRIES", 10)
    for i in range(20):
        (tmp_path / f"f{i}").write_bytes(b"x")
    size, approximate = directory_size(tmp_path)
    assert approximate and size <= 10


@pytest.mark.parametrize("keep_last, keep_every, expected", [
    (5, 0, 100.0),                    # the rolling window does not grow: the history only
    (5, 500, 100.0 + 1_000_000 / 500),
    (0, 0, 100.0 + 1_000_000 / 100),  # everything kept: a checkpoint per cadence
])
def test_growth_follows_the_policy(keep_last, keep_every, expected):
    assert growth_per_step(100_000, 1000, 1_000_000, 100, keep_last, keep_every) == pytest.approx(expected)


def test_full_in_and_too_full():
    s = Storage(used=10, free=3_000, checkpoint_size=1_000, growth_per_s=10.0)
    assert s.checkpoints_that_fit == 3 and not s.too_full and s.full_in_s == 300
    assert Storage(10, 2_999, 1_000, 0.0).too_full and Storage(10, 2_999, 1_000, 0.0).full_in_s is None


def test_measure_reads_the_real_filesystem(tmp_path):
    (tmp_path / "f").write_bytes(b"x" * 4096)
    def free() -> int:
        st = os.statvfs(tmp_path)
        return st.f_bavail * st.f_frsize

    before = free()
    s = measure(tmp_path, checkpoint_size=1000, growth_per_step_bytes=10.0, steps_per_s=2.0)
    after = free()
    # Other processes write beside this test: the free space read is the filesystem's at its moment.
    assert s.used == 4096 and min(before, after) <= s.free <= max(before, after)
    assert s.growth_per_s == 20.0
