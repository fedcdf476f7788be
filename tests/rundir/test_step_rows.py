"""rundir/step_rows.py: where a step lies in a step column, searched by arithmetic
where the column has no gap."""

from __future__ import annotations

import mmap

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from rundir.step_rows import gapless_from, search_steps

INT64 = np.iinfo(np.int64)


def _steps(first: int, n: int, gaps: bool, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return first + (np.cumsum(rng.integers(1, 4, n)) if gaps else np.arange(n))


@settings(max_examples=300, deadline=None)
@given(first=st.integers(-10**12, 10**12), n=st.integers(1, 300), gaps=st.booleans(),
       needles=st.lists(st.floats(-1e13, 1e13, allow_nan=False), min_size=1, max_size=20),
       side=st.sampled_from(["left", "right"]), seed=st.integers(0, 2**16))
def test_float_needles_land_where_searchsorted_puts_them(first, n, gaps, needles, side, seed):
    """A float needle (a pixel column's edge) lands where ``np.searchsorted`` puts it among
    the steps as floats, without the column converted."""
    steps = _steps(first, n, gaps, seed)
    near = [float(steps[min(int(abs(x)) % n, n - 1)]) + off for x in needles[:5] for off in (-0.5, 0.0, 0.5)]
    x = np.asarray(needles + near)
    assert np.array_equal(search_steps(steps, x, side), np.searchsorted(steps.astype(np.float64), x, side=side))


@settings(max_examples=300, deadline=None)
@given(first=st.integers(-10**12, 10**12), n=st.integers(1, 300), gaps=st.booleans(),
       needles=st.lists(st.integers(INT64.min, INT64.max), min_size=1, max_size=20),
       side=st.sampled_from(["left", "right"]), seed=st.integers(0, 2**16))
def test_integer_needles_land_exactly_however_large(first, n, gaps, needles, side, seed):
    """An integer needle (an event's step) is searched as an integer, to the row, even where a
    float would round it (beyond 2**53) and at the ends of int64."""
    steps = _steps(first, n, gaps, seed)
    near = [int(steps[abs(x) % n]) + off for x in needles[:5] for off in (-1, 0, 1)]
    x = np.asarray(needles + near, dtype=np.int64)
    assert np.array_equal(search_steps(steps, x, side), np.searchsorted(steps, x, side=side))
    assert int(search_steps(steps, int(x[0]), side)) == int(np.searchsorted(steps, x[0], side=side))


def test_a_column_at_the_ends_of_int64_is_searched_without_overflow():
    for steps in (np.arange(INT64.max - 4, INT64.max, dtype=np.int64) + 1, np.arange(INT64.min, INT64.min + 5)):
        needles = np.array([INT64.min, int(steps[0]), int(steps[2]), int(steps[-1]), INT64.max], np.int64)
        for side in ("left", "right"):
            assert np.array_equal(search_steps(steps, needles, side), np.searchsorted(steps, needles, side=side))


def test_a_gapless_column_is_searched_without_reading_its_middle(tmp_path):
    """Only the first and last rows of a gapless column are read: a search faults in no more
    of a column mapped from a file than reading those two rows does."""
    n = 4 << 20
    path = tmp_path / "steps"
    np.arange(10, 10 + n, dtype=np.int64).tofile(path)
    with open(path, "rb") as fh:
        mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    steps = np.frombuffer(mm, np.int64)
    assert gapless_from(steps) == 10
    pagemap = open("/proc/self/pagemap", "rb")

    def resident_pages() -> int:
        start = steps.__array_interface__["data"][0] // mmap.PAGESIZE
        pagemap.seek(start * 8)
        entries = np.frombuffer(pagemap.read(steps.nbytes // mmap.PAGESIZE * 8), np.uint64)
        return int((entries >> np.uint64(63)).sum())

    def resident_after(read) -> int:
        mm.madvise(mmap.MADV_DONTNEED)
        read()
        return resident_pages()

    needles = np.arange(0, n + 20, 997)
    ends = resident_after(lambda: (int(steps[0]), int(steps[-1])))
    assert resident_after(lambda: search_steps(steps, needles, "right")) <= ends
    assert np.array_equal(search_steps(steps, needles, "right"), np.clip(needles - 9, 0, n))
    assert resident_after(lambda: np.searchsorted(steps, needles)) > ends      # what a binary search reads
    pagemap.close()
