"""The plot's smoothed line: a debiased exponential moving average that skips what the plot
leaves out (:func:`console.plot.envelope.beyond_limit`), computed in blocks with no Python loop per
step, extended incrementally from a carry, and kept in float32 where the values allow."""

from __future__ import annotations

import math
import weakref
from typing import Hashable

import numpy as np

from .envelope import beyond_limit, within_limit

# The EMA's chunk: long enough to amortise its blocks, short enough that its temporaries are small.
EMA_CHUNK = 1 << 18


def ema_debiased(values: np.ndarray, beta: float, carry: tuple[float, float] = (0.0, 0.0),
                 dtype: type = np.float64) -> tuple[np.ndarray, tuple[float, float]]:
    """Debiased EMA of ``values`` (``beta`` = weight of the past, 0 = no smoothing).

    Non-finite values, and values beyond :data:`PLOT_LIMIT`, are skipped: the result is
    ``num / den`` where ``num`` is the EMA of ``x * valid`` and ``den`` the EMA of
    ``valid``, both started at 0, which is Adam-style
    bias correction and NaN-skipping at once. ``carry`` is ``(num, den)`` after the values
    that came before, so the line can be extended without recomputing it; the new carry
    is returned. Vectorised in blocks short enough that ``beta ** -block`` cannot overflow.
    ``dtype``: the result's (worked out in float64 either way; float32 halves a drawn line's
    memory: :func:`line_dtype`).
    """
    x = np.asarray(values, dtype=np.float64)
    n = len(x)
    if n == 0:
        return np.empty(0, dtype), carry
    if n > EMA_CHUNK or dtype is not np.float64:
        # A long history in chunks, each carried into the next: the temporaries of one
        # chunk, not of the whole column (seven of them at 5M steps were 280 MB).
        out = np.empty(n, dtype)
        for start in range(0, n, EMA_CHUNK):
            out[start:start + EMA_CHUNK], carry = ema_debiased(x[start:start + EMA_CHUNK], beta, carry)
        return out, carry
    if 0.0 < beta < 1.0 and -1e100 <= x.min() <= x.max() <= 1e100:     # NaN fails it too
        return _ema_all_valid(x, beta, carry)
    valid = np.isfinite(x) & ~beyond_limit(x)     # what the plot leaves out, the line skips too
    if not valid.all():
        x = np.where(valid, x, np.nan)
    scale = _ema_scale(x, carry)
    if scale != 1.0:
        # The EMA is linear: over values large enough for the blocks' cumulative sums to
        # overflow (up to PLOT_LIMIT), it is taken of the values scaled down, and scaled back.
        out, (num, den) = ema_debiased(x / scale, beta, (carry[0] / scale, carry[1]))
        return out * scale, (num * scale, den)
    if beta <= 0.0:
        out = np.where(np.isfinite(x), x, np.nan)
        last = out[np.isfinite(out)]
        return out, ((float(last[-1]), 1.0) if len(last) else carry)
    valid = np.isfinite(x)
    xv = np.where(valid, x, 0.0) * (1.0 - beta)
    vv = valid * (1.0 - beta)
    block, up_all, down_all = _block_powers(beta, n)
    num_out = np.empty(n)
    den_out = np.empty(n)
    num, den = carry
    for start in range(0, n, block):
        stop = min(n, start + block)
        up, down = up_all[: stop - start], down_all[: stop - start]
        num_out[start:stop] = down * (num + np.cumsum(xv[start:stop] * up))
        den_out[start:stop] = down * (den + np.cumsum(vv[start:stop] * up))
        num, den = float(num_out[stop - 1]), float(den_out[stop - 1])
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(den_out > 0, num_out / np.where(den_out > 0, den_out, 1.0), np.nan)
    return out, (num, den)


# Lines whose values all lie within this are kept in float32 (a 5M-step EMA: 20 MB, not 40).
FLOAT32_RANGE = 1e30


def line_dtype(values: np.ndarray) -> type:
    """float32 for a drawn line of values within ±:data:`FLOAT32_RANGE` (NaN aside): seven
    digits, far finer than a pixel; float64 otherwise."""
    return np.float32 if len(values) and within_limit(values, FLOAT32_RANGE) else np.float64


class SmoothedLine:
    """One series' smoothed line, kept as the series grows: extended from its carry into
    spare room (what is kept is never copied again, and the room not yet written costs no
    memory), computed anew when its key changes (a rewind) or a new value does not fit
    float32. The plots showing one series with one smoothing share it (:class:`SmoothedLines`)."""

    def __init__(self, beta: float):
        self.beta = beta
        self._buf: np.ndarray | None = None
        self._length = 0
        self._key: Hashable = None
        self._carry = (0.0, 0.0)

    def of(self, values: np.ndarray, key: Hashable) -> np.ndarray:
        """The line of ``values``, which under one ``key`` only ever grow (fewer than before:
        a history read anew, and the line is too)."""
        buf, done, n = self._buf, self._length, len(values)
        if buf is None or key != self._key or n < done:
            return self._anew(values, key)
        if n == done:
            return buf[:n]
        if buf.dtype == np.float32 and line_dtype(values[done:]) is np.float64:
            return self._anew(values, key)            # values past float32's range: the line in float64
        tail, self._carry = ema_debiased(values[done:], self.beta, self._carry, buf.dtype.type)
        if n > len(buf):
            grown = np.empty(max(n, 2 * len(buf)), buf.dtype)
            grown[:done] = buf[:done]
            self._buf = buf = grown
        buf[done:n] = tail
        self._length = n
        return buf[:n]

    def _anew(self, values: np.ndarray, key: Hashable) -> np.ndarray:
        line, self._carry = ema_debiased(values, self.beta, dtype=line_dtype(values))
        self._buf, self._length, self._key = line, len(line), key
        return line


class SmoothedLines:
    """A dashboard's smoothed lines, one per (series, smoothing) that some plot shows: a plot
    holds the one it draws, and a line no plot holds any more is dropped."""

    def __init__(self) -> None:
        self._lines: weakref.WeakValueDictionary[tuple[str, float], SmoothedLine] = weakref.WeakValueDictionary()

    def line(self, series: str, beta: float) -> SmoothedLine:
        line = self._lines.get((series, beta))
        if line is None:
            line = self._lines[(series, beta)] = SmoothedLine(beta)
        return line


def _ema_all_valid(x: np.ndarray, beta: float, carry: tuple[float, float]) -> tuple[np.ndarray, tuple[float, float]]:
    """:func:`ema_debiased` of values that are all finite and of plausible size (the usual
    history): nothing to skip or scale, and the debiasing denominator in closed form
    (``1 - beta**i * (1 - den)``), so one buffer is worked on in place, block by block."""
    n = len(x)
    block, up_all, down_all = _block_powers(beta, n)
    out = np.empty(n)
    num, den = carry
    for start in range(0, n, block):
        stop = min(n, start + block)
        up, down = up_all[: stop - start], down_all[: stop - start]
        run = out[start:stop]
        np.multiply(x[start:stop], up, out=run)
        np.cumsum(run, out=run)
        run *= 1.0 - beta
        run += num
        run *= down                                      # the EMA of the values, not yet debiased
        num = float(run[-1])
        dens = 1.0 - down * (1.0 - den)
        den = float(dens[-1])
        run /= dens
    return out, (num, den)


def _block_powers(beta: float, n: int) -> tuple[int, np.ndarray, np.ndarray]:
    """The block length for ``n`` values and ``beta ** -k``, ``beta ** k`` for k = 1..block:
    the block is short enough that ``beta ** -block`` stays below e^200 (no overflow)."""
    block = max(1, min(n, int(200.0 / -math.log(beta))))
    k = np.arange(1, block + 1, dtype=np.float64)
    return block, beta ** -k, beta ** k


def _ema_scale(x: np.ndarray, carry: tuple[float, float]) -> float:
    """1.0 for values of any plausible size; else a power of two near the largest finite
    magnitude (with the carried EMA's), so that scaled values stay within +-2."""
    finite = x[np.isfinite(x)]
    biggest = max(float(np.abs(finite).max()) if len(finite) else 0.0,
                  abs(carry[0] / carry[1]) if carry[1] > 0 and math.isfinite(carry[0] / carry[1]) else 0.0)
    return 1.0 if biggest <= 1e100 else math.ldexp(1.0, math.frexp(biggest)[1] - 1)
