"""console.read._tensor_sums: the inspector's fused pass over a chunk, against numpy in float64.

The inspector's results with and without it are compared in test_checkpoint_inspect.py (every test
there runs both ways); this tests the kernel's own contract: each sum, NaN and infinity
propagating into exactly the sums of their array, the lengths the vector loop does not
divide, and arguments refused with a message.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from console.read import _tensor_sums

EPS2 = float(np.float32(1e-8) * np.float32(1e-8))
EPS_SCALED = float(np.float32(1e-8 / 31.6))

values = st.floats(width=32, allow_nan=True, allow_infinity=True)
finite = st.floats(width=32, allow_nan=False, allow_infinity=False, min_value=-1e4, max_value=1e4)


def reference(w, m, v, with_update):
    """The same sums, straight from their definitions, in float64 (u in float32, as the kernel)."""
    w64, m64, v64 = (a.astype(np.float64) for a in (w, m, v))
    with np.errstate(all="ignore"):
        u = (m / (np.sqrt(v) + np.float32(EPS_SCALED))).astype(np.float64)
        absw = np.abs(w[~np.isnan(w)])
        return {"ww": np.sum(w64 * w64), "maxabs": float(absw.max()) if absw.size else 0.0,
                "v_sum": np.sum(v64), "vv": np.sum(v64 * v64), "dead": int(np.count_nonzero(v < EPS2)),
                "mm": np.sum(m64 * m64), "uu": np.sum(u * u) if with_update else 0.0}


def check(w, m, v, with_update):
    got = dict(zip(("ww", "maxabs", "v_sum", "vv", "dead", "mm", "uu"),
                   _tensor_sums.chunk_sums(w, m, v, EPS2, EPS_SCALED, with_update)))
    want = reference(w, m, v, with_update)
    assert got["dead"] == want["dead"]
    if np.isfinite(w).all():
        assert got["maxabs"] == want["maxabs"]
    with np.errstate(all="ignore"):         # a sum's rounding is relative to its terms' sizes
        v_size = float(np.sum(np.abs(v.astype(np.float64))))
    for key in ("ww", "v_sum", "vv", "mm", "uu"):
        if math.isfinite(want[key]):
            size = v_size if key == "v_sum" else abs(want[key])       # only v's sum has terms of both signs
            assert got[key] == pytest.approx(want[key], abs=1e-9 * size + 1e-300), key
        else:               # the caller's test for "sum this array again, masked"
            assert not math.isfinite(got[key]), key


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 70).flatmap(lambda n: st.tuples(*(arrays(np.float32, n, elements=values) for _ in range(3)))),
       st.booleans())
def test_every_sum_matches_float64_and_nonfinite_values_propagate(arrays_, with_update):
    check(*arrays_, with_update)


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 2000).flatmap(lambda n: st.tuples(*(arrays(np.float32, n, elements=finite) for _ in range(3)))))
def test_finite_chunks_give_finite_sums(arrays_):
    w, m, v = arrays_
    v = np.abs(v)                       # v is a mean of squares: never negative in a checkpoint
    check(w, m, v, True)
    assert all(math.isfinite(x) for x in _tensor_sums.chunk_sums(w, m, v, EPS2, EPS_SCALED, True))


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 70).flatmap(lambda n: st.tuples(*(arrays(np.float32, n, elements=values) for _ in range(4)))))
def test_pair_sums_match_float64_and_nonfinite_values_propagate(arrays_):
    w, m, w_b, m_b = (a.astype(np.float64) for a in arrays_)
    got = _tensor_sums.pair_sums(*arrays_)
    with np.errstate(all="ignore"):
        want = (np.sum((w - w_b) ** 2), np.sum(w_b * w_b), np.sum(m * m_b), np.sum(m * m), np.sum(m_b * m_b))
        sizes = (want[0], want[1], np.sum(np.abs(m * m_b)), want[3], want[4])     # m.m_b: terms of both signs
    for key, g, x, size in zip(("dd", "ww_b", "mm_ab", "mm_a", "mm_b"), got, want, sizes):
        if math.isfinite(x):
            assert g == pytest.approx(x, abs=1e-9 * size + 1e-300), key
        else:
            assert not math.isfinite(g), key


def test_a_chunk_of_the_inspectors_size_and_float32_overflowing_squares():
    rng = np.random.default_rng(1)
    w, m = (rng.standard_normal(1 << 18, dtype=np.float32) for _ in range(2))
    v = m * m
    w[12345] = 1e25                     # its square is past float32, not past float64
    check(w, m, v, True)
    assert math.isfinite(_tensor_sums.chunk_sums(w, m, v, EPS2, EPS_SCALED, True)[0])


def test_memory_mapped_read_only_slices_are_read_in_place(tmp_path):
    path = tmp_path / "flat.bin"
    np.arange(30, dtype="<f4").tofile(path)
    flat = np.memmap(path, dtype="<f4", mode="r")
    ww, maxabs, *_ = _tensor_sums.chunk_sums(flat[0:10], flat[10:20], flat[20:30], EPS2, EPS_SCALED, False)
    assert (ww, maxabs) == (285.0, 9.0)


F32 = np.zeros(3, np.float32)


@pytest.mark.parametrize("args, error, message", [
    ((np.zeros(3), F32, F32), TypeError, "w: expected a float32 buffer, got format d"),
    ((F32, np.zeros(3, np.int32), F32), TypeError, "m: expected a float32 buffer, got format i"),
    ((F32, F32, np.zeros(4, np.float32)), ValueError, r"(v|w_b) differs in length from w \(16 and 12 bytes\)"),
    ((np.zeros(6, np.float32)[::2], F32, F32), ValueError, "not C-contiguous"),
])
def test_wrong_buffers_are_refused_with_a_message(args, error, message):
    with pytest.raises(error, match=message):
        _tensor_sums.chunk_sums(*args, EPS2, EPS_SCALED, True)
    with pytest.raises(error, match=message):
        _tensor_sums.pair_sums(*args, F32)
    with pytest.raises(TypeError, match="takes 4 arguments"):
        _tensor_sums.pair_sums(*args)
