"""Inspect a checkpoint: what its weights and Adam's m and v say, tensor by tensor.

The ``.bin`` is memory-mapped and read in fixed-size chunks (pages are dropped from
the mapping every few megabytes once read), so a 1.46 GB andrea-120m checkpoint is inspected with a
bounded peak RSS. The tensors and Adam's settings are :mod:`rundir.checkpoint_layout`'s
(from the ``.json``; fixed-size chunks of the flat vector without one). Validity is :func:`inspect_checkpoint`'s,
so a truncated, header-mismatched or foreign file gets the checkpoints pane's reason.
Each chunk is summed in one fused pass (the C extension ``console.read._tensor_sums``), its
comparison with the other checkpoint's in another, or with numpy's passes where it was not
built (no C compiler at install).

Every statistic is taken over the finite values of its array; the non-finite ones are
counted in ``nonfinite``. Statistics (per tensor)::

    w_rms        sqrt(mean(w^2))
    w_maxabs     max |w|
    m_norm       ||m||_2
    sqrt_v_rms   RMS of sqrt(v) = sqrt(mean(v))
    dead_v_frac  share of v below eps^2 (Adam divides by about eps there)
    update_ratio lr * RMS(m_hat / (sqrt(v_hat) + eps)) / w_rms: the size of the step
                 Adam took at ``adam_step`` relative to the weights (None when Adam's
                 step count or lr is unknown, or w_rms is 0)

and with a second checkpoint (``against``): ``w_rel_change`` = ||w - w'|| / ||w'|| and
``m_cosine`` = cos(m, m'), each over the pairs where both values are finite.
"""

from __future__ import annotations

import functools
import math
import mmap
import os
import threading
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Callable

import numpy as np

from rundir.checkpoint import HEADER_SIZE, CheckpointError, CheckpointInfo, expected_size, inspect_checkpoint
from rundir.checkpoint_layout import AdamSettings, Layout, TensorSlice, adam_settings, layout_of
from rundir.filesystems import filesystem_of
from rundir.safe_read import open_regular
from rundir.text import counted

from ..model.inspect_report import CheckpointSummary, InspectReport, TensorStats

try:        # the fused passes over a chunk (console/read/_tensor_sums.c), built at install when a C compiler is there
    from ._tensor_sums import chunk_sums as _fused_chunk_sums
    from ._tensor_sums import pair_sums as _fused_pair_sums
except ImportError:                         # numpy's passes instead, about twice as slow
    _fused_chunk_sums = _fused_pair_sums = None

# Values of each of w, m and v read per chunk (1 MB each): numpy's passes over a chunk find
# it in cache, and their per-call cost stays small (measured on andrea-12m, one thread:
# 64K-512K values cost about the same; 32K a third more, in per-call overhead).
CHUNK_VALUES = 1 << 18
# Values of each array read before their pages are dropped from the mapping (8 MB each).
RELEASE_VALUES = 1 << 21
# Threads summing chunks at once by default. One: with the fused pass a chunk is summed at
# about the page cache's speed, and more threads contend for the mapping's page faults
# (andrea-12m on an idle 2-CPU machine: 18-20 ms on one thread, 24-30 ms on two or four).
DEFAULT_THREADS = 1

Progress = Callable[[int, int], None]       # (values done, values in all)
# One chunk's sums: (ww, maxabs, v_sum, vv, dead, mm, uu), as _tensor_sums.chunk_sums returns them.
ChunkSums = tuple[float, float, float, float, int, float, float]


class InspectCancelled(Exception):
    """The caller's ``cancelled()`` said stop (the inspector screen was closed)."""


# -- reading ------------------------------------------------------------------------
class _Arrays:
    """A valid checkpoint's three arrays, over one read-only mapping where it is safe; pages are dropped
    from the mapping as they are read, so the resident set stays a few megabytes per array.
    On a shared filesystem (:mod:`rundir.filesystems`) the arrays are read a chunk at a time
    instead (:class:`_Slices`): a mapping of a file another host removes or truncates can
    raise SIGBUS, and a FUSE file opened for direct I/O cannot be mapped at all (ENODEV,
    which is tried too)."""

    def __init__(self, info: CheckpointInfo):
        assert info.n_params is not None
        self.path = info.path
        self.n = n = info.n_params
        size = expected_size(n)
        fd, st = open_regular(info.path)
        try:
            if st.st_size != size:      # replaced or cut since the quick look
                raise CheckpointError(f"{info.path.name}: changed while being opened ({st.st_size} bytes, "
                                      f"expected {size})")
            self._mm = None if filesystem_of(info.path).shared else _map(fd, size)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd                   # the descriptor just checked: read from, where not mapped
        if self._mm is None:
            self.w, self.m, self.v = (_Slices(fd, HEADER_SIZE + 4 * k * n, n, info.path.name) for k in range(3))
            return
        if hasattr(mmap, "MADV_SEQUENTIAL"):
            self._mm.madvise(mmap.MADV_SEQUENTIAL)
        flat = np.frombuffer(self._mm, dtype="<f4", offset=HEADER_SIZE, count=3 * n)
        self.w, self.m, self.v = flat[:n], flat[n:2 * n], flat[2 * n:]
        self._dropped = [0, 0, 0]      # per array: values before this one are dropped from the mapping

    def release(self, upto: int) -> None:
        """Drop the pages of every array's values before ``upto`` (only whole pages), once
        at least :data:`RELEASE_VALUES` of each are waiting: one call per few megabytes,
        not per chunk, since each call costs a TLB flush."""
        if self._mm is None or not hasattr(mmap, "MADV_DONTNEED") or upto - min(self._dropped) < RELEASE_VALUES:
            return
        for k in range(3):
            lo = (HEADER_SIZE + 4 * (k * self.n + self._dropped[k])) // mmap.PAGESIZE * mmap.PAGESIZE
            hi = (HEADER_SIZE + 4 * (k * self.n + upto)) // mmap.PAGESIZE * mmap.PAGESIZE
            if hi > lo:
                self._mm.madvise(mmap.MADV_DONTNEED, lo, hi - lo)
                self._dropped[k] = upto

    def close(self) -> None:
        del self.w, self.m, self.v
        os.close(self._fd)
        if self._mm is None:
            return
        try:
            self._mm.close()
        except BufferError:         # a view still alive somewhere: the mapping goes with it
            pass


def _map(fd: int, size: int) -> mmap.mmap | None:
    """A read-only mapping of the file, or None where one is refused (ENODEV: direct I/O)."""
    try:
        return mmap.mmap(fd, size, access=mmap.ACCESS_READ)
    except OSError:
        return None


class _Slices:
    """One of a checkpoint's arrays, where it is not mapped: ``[lo:hi]`` reads those values
    from the open descriptor (a file cut short meanwhile raises :class:`CheckpointError`)."""

    def __init__(self, fd: int, offset: int, n: int, name: str):
        self.fd, self.offset, self.n, self.name = fd, offset, n, name

    def __getitem__(self, values: slice) -> np.ndarray:
        lo, hi, _ = values.indices(self.n)
        data = os.pread(self.fd, 4 * (hi - lo), self.offset + 4 * lo)
        if len(data) != 4 * (hi - lo):
            raise CheckpointError(f"{self.name}: cut short while being read")
        return np.frombuffer(data, dtype="<f4")


def open_valid(path: str | os.PathLike[str]) -> CheckpointInfo:
    """The quick look at ``path``; a :class:`CheckpointError` with the checkpoints pane's
    reason when it is invalid (truncated, header mismatched, not a checkpoint)."""
    info = inspect_checkpoint(path)
    if info.status == "invalid":
        raise CheckpointError(f"{Path(path).name}: {info.reason}")
    return info


class _Buffers:
    """Scratch arrays of one chunk, per inspection (per thread), each allocated when first
    used: numpy's passes use all three, the fused pass none unless a value is non-finite."""

    def __init__(self, size: int):
        self.size = size

    @functools.cached_property
    def values(self) -> np.ndarray:
        return np.empty(self.size, dtype=np.float32)

    @functools.cached_property
    def ones(self) -> np.ndarray:
        return np.ones(self.size, dtype=np.float32)

    @functools.cached_property
    def flags(self) -> np.ndarray:
        return np.empty(self.size, dtype=bool)


class _Sums:
    """Running sums of one chunk or tensor (float64 Python floats; each chunk's are summed
    in double lanes by the fused pass, or are numpy's float32 dot products, whose float32
    rounding is then over one chunk only)."""

    __slots__ = ("ww", "maxabs", "mm", "v_sum", "vv", "uu", "n_w", "n_v", "n_u", "dead", "bad",
                 "dd", "ww_b", "mm_ab", "mm_a", "mm_b")
    _ADDED = ("ww", "mm", "v_sum", "vv", "uu", "n_w", "n_v", "n_u", "dead", "dd", "ww_b", "mm_ab", "mm_a", "mm_b")

    def __init__(self) -> None:
        self.ww = self.maxabs = self.mm = self.v_sum = self.vv = self.uu = 0.0
        self.n_w = self.n_v = self.n_u = self.dead = 0          # finite values of w, v, the update; v < eps^2
        self.bad = {"w": 0, "m": 0, "v": 0}                     # non-finite values of each
        # against, over the pairs where both values are finite: (w - w')^2, w'^2, m.m', m^2, m'^2
        self.dd = self.ww_b = self.mm_ab = self.mm_a = self.mm_b = 0.0

    def add(self, other: "_Sums") -> None:
        """Add another chunk's (or tensor's) sums to these."""
        for key in self._ADDED:
            setattr(self, key, getattr(self, key) + getattr(other, key))
        self.maxabs = max(self.maxabs, other.maxabs)
        for key, count in other.bad.items():
            self.bad[key] += count


def _sumsq(x: np.ndarray) -> float:
    return float(np.dot(x, x))


def _update_terms(m: np.ndarray, v: np.ndarray, eps_scaled: np.float32, out: np.ndarray) -> np.ndarray:
    """m / (sqrt(v) + eps / c) into ``out``, in float32: Adam's step up to the factors
    1 / c (c = 1 / sqrt(1 - beta2^t)) and 1 / (1 - beta1^t), applied once at the end."""
    np.sqrt(v, out=out)
    np.add(out, eps_scaled, out=out)
    return np.divide(m, out, out=out)


def _numpy_chunk_sums(w: np.ndarray, m: np.ndarray, v: np.ndarray, bufs: _Buffers, eps2: float,
                      eps_scaled: np.float32, with_update: bool) -> ChunkSums:
    """:data:`ChunkSums` with numpy, where the fused pass was not built: one dot product
    (float32) or reduction per sum, each over data the previous one left in cache."""
    k = w.size
    ww = _sumsq(w)
    maxabs = max(float(w.max()), -float(w.min())) if k else 0.0
    v_sum, vv = float(np.dot(v, bufs.ones[:k])), _sumsq(v)
    dead = int(np.count_nonzero(np.less(v, eps2, out=bufs.flags[:k])))
    mm = _sumsq(m)
    uu = _sumsq(_update_terms(m, v, eps_scaled, bufs.values[:k])) if with_update else 0.0
    return ww, maxabs, v_sum, vv, dead, mm, uu


def _add_chunk(s: _Sums, w: np.ndarray, m: np.ndarray, v: np.ndarray, bufs: _Buffers,
               eps2: float, eps_scaled: np.float32, with_update: bool) -> float:
    """Add one chunk of a tensor to its sums (under ``np.errstate(all="ignore")``);
    returns the chunk's ||m||^2 as first summed (non-finite if m is), which
    :func:`_add_against` reuses.

    Fast on the assumption that every value is finite: one pass takes every sum. A
    finite sum proves its array finite (a NaN or an Inf makes it NaN or Inf), so only an
    array whose sum comes out non-finite (a non-finite value, or with numpy's float32 sums
    an overflow) is summed again, masked and in float64."""
    k = w.size
    if _fused_chunk_sums is not None:
        ww, maxabs, v_sum, vv, dead, mm, uu = _fused_chunk_sums(w, m, v, eps2, float(eps_scaled), with_update)
    else:
        ww, maxabs, v_sum, vv, dead, mm, uu = _numpy_chunk_sums(w, m, v, bufs, eps2, eps_scaled, with_update)
    s.dead += dead
    if math.isfinite(ww):
        s.ww += ww
        s.n_w += k
        s.maxabs = max(s.maxabs, maxabs)
    else:
        ok = np.isfinite(w)
        s.bad["w"] += k - int(np.count_nonzero(ok))
        wf = w[ok].astype(np.float64)
        s.ww += float(np.dot(wf, wf))
        s.n_w += wf.size
        if wf.size:
            s.maxabs = max(s.maxabs, float(np.abs(wf).max()))
    if math.isfinite(v_sum) and math.isfinite(vv):
        s.v_sum += v_sum
        s.vv += vv
        s.n_v += k
    else:
        ok = np.isfinite(v)
        s.bad["v"] += k - int(np.count_nonzero(ok))
        vf = v[ok].astype(np.float64)
        s.v_sum += float(vf.sum())
        s.vv += float(np.dot(vf, vf))
        s.n_v += vf.size
    if math.isfinite(mm):
        s.mm += mm
    else:
        ok = np.isfinite(m)
        s.bad["m"] += k - int(np.count_nonzero(ok))
        s.mm += _sumsq(m[ok].astype(np.float64))
    if not with_update:
        return mm
    if math.isfinite(uu):
        s.uu += uu
        s.n_u += k
    else:
        u = _update_terms(m, v, eps_scaled, bufs.values[:k])
        uf = u[np.isfinite(u)].astype(np.float64)
        s.uu += float(np.dot(uf, uf))
        s.n_u += uf.size
    return mm


def _add_against(s: _Sums, w: np.ndarray, m: np.ndarray, w_b: np.ndarray, m_b: np.ndarray, bufs: _Buffers,
                 mm: float) -> None:
    """Add one chunk's comparison sums; pairs where either value is non-finite are left out.
    ``mm`` is the chunk's ||m||^2 from :func:`_add_chunk`: numpy's passes do not sum it again."""
    if _fused_pair_sums is not None:
        sums = _fused_pair_sums(w, m, w_b, m_b)
    else:
        d = np.subtract(w, w_b, out=bufs.values[:w.size])
        sums = (_sumsq(d), _sumsq(w_b), float(np.dot(m, m_b)), mm, _sumsq(m_b))
    if not all(math.isfinite(x) for x in sums):
        ok = np.isfinite(w) & np.isfinite(w_b)
        d = w[ok].astype(np.float64) - w_b[ok]
        wb = w_b[ok].astype(np.float64)
        okm = np.isfinite(m) & np.isfinite(m_b)
        ma, mb = m[okm].astype(np.float64), m_b[okm].astype(np.float64)
        sums = (float(np.dot(d, d)), float(np.dot(wb, wb)), float(np.dot(ma, mb)), float(np.dot(ma, ma)),
                float(np.dot(mb, mb)))
    s.dd += sums[0]
    s.ww_b += sums[1]
    s.mm_ab += sums[2]
    s.mm_a += sums[3]
    s.mm_b += sums[4]


def _ratio(a: float, b: float) -> float | None:
    return a / b if b > 0 and math.isfinite(a / b) else None


def _rms(total: float, n: int) -> float | None:
    return math.sqrt(total / n) if n else None


def _same_shapes(a: Layout, b: Layout) -> str | None:
    """None when two layouts can be compared, else why not."""
    if a.kind != "model" or b.kind != "model":
        return None                 # a bare .bin has no shapes to differ: n_params decides
    for x, y in zip(a.tensors, b.tensors):
        if x.name != y.name or x.shape != y.shape:
            return f"{x.name} is {_shape(x.shape)} in one and {y.name} {_shape(y.shape)} in the other"
    if len(a.tensors) != len(b.tensors):
        return f"{counted(len(a.tensors), 'tensor')} against {len(b.tensors)}"
    return None


def _shape(shape: tuple[int, ...]) -> str:
    return "x".join(map(str, shape))


def inspect_file(path: str | os.PathLike[str], against: str | os.PathLike[str] | None = None, *,
                 progress: Progress | None = None, cancelled: Callable[[], bool] | None = None,
                 chunk_values: int = CHUNK_VALUES, threads: int = DEFAULT_THREADS) -> InspectReport:
    """Read the checkpoint at ``path`` (and ``against``, a second one of the same shape)
    chunk by chunk and return its statistics. Raises :class:`CheckpointError` with a
    one-line reason for an invalid file or two that cannot be compared, and
    :class:`InspectCancelled` when ``cancelled()`` turns true. ``progress(done, total)``
    is called after each chunk (values of the flat vector). Chunks are summed by
    ``threads`` threads (1, the default: in the calling thread, no pool; the fused pass and
    numpy let go of the GIL) and the sums added in file order, so the result does not
    depend on the count."""
    info = open_valid(path)
    assert info.n_params is not None
    layout, adam = layout_of(info), adam_settings(info.sidecar)
    other = None
    if against is not None:
        other = open_valid(against)
        if other.n_params != info.n_params:
            raise CheckpointError(f"cannot compare {info.path.name} ({info.n_params:,} parameters) with "
                                  f"{other.path.name} ({other.n_params:,}): not the same shape")
        other_layout = layout_of(other)
        why = _same_shapes(layout, other_layout)
        if why:
            raise CheckpointError(f"cannot compare {info.path.name} with {other.path.name}: not the same shape ({why})")
        if layout.kind != "model" and other_layout.kind == "model":
            layout = other_layout   # the names and shapes the other's .json gives
    a = _Arrays(info)
    try:
        b = _Arrays(other) if other is not None else None
    except BaseException:
        a.close()
        raise
    try:
        tensors, grand = _read(a, b, layout, adam, progress, cancelled, chunk_values, threads)
    finally:
        a.close()
        if b is not None:
            b.close()
    totals: dict[str, float | None] = {"w_norm": math.sqrt(grand.ww), "m_norm": math.sqrt(grand.mm),
                                       "v_norm": math.sqrt(grand.vv)}
    if b is not None:
        totals["w_rel_change"] = _ratio(math.sqrt(grand.dd), math.sqrt(grand.ww_b))
        totals["m_cosine"] = _ratio(grand.mm_ab, math.sqrt(grand.mm_a * grand.mm_b))
    return InspectReport(_summary(info), info.status, layout, adam, tensors, totals,
                         _summary(other) if other is not None else None)


def _read(a: _Arrays, b: _Arrays | None, layout: Layout, adam: AdamSettings, progress: Progress | None,
          cancelled: Callable[[], bool] | None, chunk_values: int, threads: int) -> tuple[list[TensorStats], _Sums]:
    """Sum every chunk and add the sums up tensor by tensor, in file order: in this
    thread when ``threads`` is 1, else in a pool (numpy lets go of the GIL) with at most
    ``2 * threads`` chunks in flight, so the pages still mapped stay a few chunks' worth."""
    with_update = adam.step is not None and adam.lr is not None
    t = adam.step or 1
    v_scale = 1.0 / math.sqrt(1.0 - adam.beta2 ** t)
    m_scale = 1.0 / (1.0 - adam.beta1 ** t)
    eps2 = float(np.float32(adam.eps) * np.float32(adam.eps))
    eps_scaled = np.float32(adam.eps / v_scale)
    local = threading.local()

    def add(s: _Sums, lo: int, hi: int) -> _Sums:
        """Add the chunk [lo, hi) to ``s`` (under ``np.errstate(all="ignore")``)."""
        bufs = getattr(local, "bufs", None)
        if bufs is None:
            bufs = local.bufs = _Buffers(chunk_values)
        w, m = a.w[lo:hi], a.m[lo:hi]           # once: where not mapped, each slice is a read
        mm = _add_chunk(s, w, m, a.v[lo:hi], bufs, eps2, eps_scaled, with_update)
        if b is not None:
            _add_against(s, w, m, b.w[lo:hi], b.m[lo:hi], bufs, mm)
        return s

    def add_quietly(s: _Sums, lo: int, hi: int) -> _Sums:
        with np.errstate(all="ignore"):     # the pool's threads: numpy's error state is per thread
            return add(s, lo, hi)

    ends = [ts.offset + ts.count for ts in layout.tensors]
    # (tensor index, first value, end) of every chunk, in file order
    pieces = ((i, lo, min(lo + chunk_values, end)) for i, (ts, end) in enumerate(zip(layout.tensors, ends))
              for lo in range(ts.offset, end, chunk_values))
    tensors: list[TensorStats] = []
    grand, sums = _Sums(), _Sums()
    done, n = 0, a.n

    def finished(i: int, lo: int, hi: int) -> None:
        """A chunk's sums are in ``sums``: drop its pages, say so, close its tensor if it was the last."""
        nonlocal done, sums
        a.release(hi)
        if b is not None:
            b.release(hi)
        done += hi - lo
        if progress is not None:
            progress(done, n)
        if hi == ends[i]:                       # the tensor's last chunk
            tensors.append(_stats(layout.tensors[i], sums, adam, with_update, m_scale / v_scale, b is not None))
            grand.add(sums)
            sums = _Sums()

    if threads <= 1:
        with np.errstate(all="ignore"):         # non-finite values are counted, not warned about
            for i, lo, hi in pieces:
                if cancelled is not None and cancelled():
                    raise InspectCancelled(str(a.path))
                add(sums, lo, hi)               # straight into the tensor's sums
                finished(i, lo, hi)
        return tensors, grand
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="inspect") as pool:
        flight: deque[tuple[int, int, int, Future[_Sums]]] = deque()
        try:
            while True:
                while len(flight) < 2 * threads:
                    piece = next(pieces, None)
                    if piece is None:
                        break
                    if cancelled is not None and cancelled():
                        raise InspectCancelled(str(a.path))
                    flight.append((*piece, pool.submit(add_quietly, _Sums(), piece[1], piece[2])))
                if not flight:
                    break
                i, lo, hi, future = flight.popleft()
                sums.add(future.result())
                finished(i, lo, hi)
        finally:
            for *_, future in flight:
                future.cancel()
    return tensors, grand


def _stats(ts: TensorSlice, s: _Sums, adam: AdamSettings, with_update: bool, u_scale: float,
           against: bool) -> TensorStats:
    """One tensor's statistics from its sums."""
    w_rms, u_rms = _rms(s.ww, s.n_w), _rms(s.uu, s.n_u)
    update = None
    if with_update and adam.lr is not None and u_rms is not None and w_rms is not None:
        update = _ratio(adam.lr * u_scale * u_rms, w_rms)
    stats = TensorStats(ts.name, ts.shape, ts.count, w_rms, s.maxabs if s.n_w else None, math.sqrt(s.mm),
                        _rms(s.v_sum, s.n_v) if s.v_sum >= 0 else None, s.dead / ts.count, update, dict(s.bad))
    if against:
        stats.w_rel_change = _ratio(math.sqrt(s.dd), math.sqrt(s.ww_b))
        stats.m_cosine = _ratio(s.mm_ab, math.sqrt(s.mm_a * s.mm_b))
    return stats


def _summary(info: CheckpointInfo) -> CheckpointSummary:
    assert info.n_params is not None
    return CheckpointSummary(info.path, info.step, info.n_params, adam_settings(info.sidecar).step)
