"""The loss plot's arithmetic and rendering, torch- and Textual-free.

Three steps, each vectorised with numpy so that a 200,000-step history costs a few
milliseconds:

1. :func:`console.plot.ema.ema_debiased`: the smoothed line, a debiased exponential moving
   average that skips non-finite values, computed in blocks (no Python loop per step).
2. :func:`console.plot.envelope.envelope`: decimation *before* plotting. Every pixel column gets the min and
   the max of all the points that fall in it, so a single-step spike is never hidden,
   whatever the width (reservoir or stride sampling would drop it).
3. :func:`render`: a braille canvas (2 x 4 dots per cell) drawn from the envelopes, with
   a y axis, a marker row (the kinds of :data:`console.model.markers.MARKER_KINDS`) and an
   x axis, as Rich Text. The steps a rollback abandoned are drawn dimmed (:func:`rundir.abandoned.abandoned_mask`).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np
from rich.text import Text

from rundir.step_rows import search_steps

from ..model.markers import MARKER_KINDS, Marker
from ..model.units import PLAIN, Unit
from .ema import ema_debiased, line_dtype
from .envelope import PLOT_LIMIT, Envelope, as_floats, beyond_limit, beyond_note, column_of, envelope, within_limit

# Dot bit of braille pattern U+2800 for (column 0..1, row 0..3) inside one cell.
_DOT_BITS = np.array([[0x01, 0x02, 0x04, 0x40], [0x08, 0x10, 0x20, 0x80]], dtype=np.uint16)
ABANDONED_STYLE = "grey30"      # the steps a rollback abandoned, dimmed
LABEL_WIDTH = 8                 # the y axis's labels, left of the plot
# A span of y narrower than this, relative to the values, is drawn as constant: float32's
# resolution is 6e-8 and an EMA in float32 drifts more than that from its input.
NEARLY_CONSTANT = 1e-6
# The wall clock the time axis can name: Unix seconds from 1970 to the end of year 9999.
CLOCK_RANGE = (0.0, 253_402_300_799.0)


@dataclass
class PlotOptions:
    log_y: bool = False
    window: int | None = None           # last N steps; None = the whole history
    smoothing: float = 0.98             # EMA beta; 0 = off
    show_raw: bool = True
    x_axis: str = "step"                # step | tokens | time (wall clock): console.model.format.X_AXES


def x_values(kind: str, steps: np.ndarray, tokens: np.ndarray | None, times: np.ndarray | None
             ) -> tuple[np.ndarray, str]:
    """The x of each step on the ``kind`` axis, made non-decreasing (a clock stepped back or
    a token count restarted must not fold the plot), and the axis it really is: ``step``
    when the history has no tokens or no times for every step."""
    if kind == "tokens" and tokens is not None and len(tokens) and tokens.min() >= 0:
        return np.maximum.accumulate(tokens.astype(np.float64)), "tokens"
    if kind == "time" and times is not None and len(times):
        x = np.fmax.accumulate(times)
        if np.isfinite(x).all() and CLOCK_RANGE[0] <= x[0] and x[-1] <= CLOCK_RANGE[1]:
            return x, "time"
    return steps, "step"


def plot_x(kind: str, steps: np.ndarray, tokens: np.ndarray | None, times: np.ndarray | None
           ) -> tuple[np.ndarray | None, str]:
    """:func:`x_values` as :func:`build_canvas` takes them: None on the step axis."""
    if kind == "step":
        return None, "step"
    x, axis = x_values(kind, steps, tokens, times)
    return (None if axis == "step" else x), axis


@dataclass
class Canvas:
    """The drawn plot: ``raw`` and ``smooth`` dot grids (rows x pixel columns, row 0 on top)
    and what the axes say. Kept so that tests can inspect the pixels."""

    width: int                          # cells of the plot area
    height: int
    raw: np.ndarray
    smooth: np.ndarray
    y0: float
    y1: float
    x0: float
    x1: float
    log_y: bool
    markers: list[tuple[int, str]] = field(default_factory=list)   # (cell column, kind)
    empty_reason: str = ""
    x_axis: str = "step"
    dim: np.ndarray | None = None       # the abandoned steps' dots (a rollback), drawn dimmed
    note: str = ""                      # said under the plot: what it could not draw
    unit: Unit = PLAIN                  # how the y axis's labels read (the series')

def to_y(values: np.ndarray, log_y: bool) -> np.ndarray:
    """The y of each value: the value (or its log10), NaN where it cannot be plotted."""
    values = as_floats(values)
    if not within_limit(values):
        with np.errstate(invalid="ignore"):
            big = np.abs(values) > PLOT_LIMIT       # infinities too: left out like NaN either way
        values = np.where(big, np.nan, values)
    if not log_y:
        return values
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(values > 0, np.log10(np.where(values > 0, values, 1.0)), np.nan)


def nearly_constant(y0: float, y1: float, log_y: bool) -> bool:
    """Whether ``[y0, y1]`` (values, or their log10) is narrower than the values' own
    precision: the smoothed line is kept in float32, so a constant learning rate of 3e-3
    and its EMA differ by 2.6e-11, and a y axis spanning that draws rounding as a rise
    across the whole plot, with labels that cannot be told apart. Such a span is drawn as
    a constant, in a padded range. (:data:`NEARLY_CONSTANT` relative, in log-y that many
    decades over ln 10.)"""
    if log_y:
        return y1 - y0 <= NEARLY_CONSTANT / math.log(10)
    return y1 - y0 <= max(NEARLY_CONSTANT * max(abs(y0), abs(y1)), 1e-12)


def draw_envelope(grid: np.ndarray, env: Envelope, y0: float, y1: float) -> None:
    """Fill each column's [min, max] run, and join consecutive columns so a line is continuous."""
    rows = grid.shape[0]
    span = max(y1 - y0, 1e-12)

    def row_of(v: np.ndarray) -> np.ndarray:
        return np.clip(((y1 - v) / span * (rows - 1)).round().astype(np.int64), 0, rows - 1)

    filled = env.filled
    cols = np.flatnonzero(filled)
    if not len(cols):
        return
    top = row_of(env.hi[cols])           # smaller row index = higher value
    bottom = row_of(env.lo[cols])
    # Join with the previous filled column: extend this column's run to meet it.
    prev_top = np.concatenate([top[:1], top[:-1]])
    prev_bottom = np.concatenate([bottom[:1], bottom[:-1]])
    adjacent = np.concatenate([[False], np.diff(cols) == 1])
    join_top = np.where(adjacent, np.minimum(top, prev_bottom), top)
    join_bottom = np.where(adjacent, np.maximum(bottom, prev_top), bottom)
    run_top = np.minimum(top, join_top)
    run_bottom = np.maximum(bottom, join_bottom)
    r = np.arange(rows)[:, None]
    grid[:, cols] |= (r >= run_top[None, :]) & (r <= run_bottom[None, :])


def build_canvas(steps: np.ndarray, loss: np.ndarray, smooth: np.ndarray | None, width: int, height: int,
                 options: PlotOptions, markers: list[Marker] = (), x: np.ndarray | None = None,
                 x_axis: str = "step", abandoned: np.ndarray | None = None,
                 span: tuple[tuple[float, float], tuple[float, float] | None] | None = None) -> Canvas:
    """Decimate and draw. ``smooth`` is the EMA of the whole history (same length as ``loss``).
    ``x`` (non-decreasing, one per step) puts the steps on another axis (``x_axis``: tokens or
    time); markers, placed by step, land where their step is on it. ``abandoned`` (a mask, one
    per step: :func:`rundir.abandoned.abandoned_mask`) takes those steps out of the lines and draws them dimmed.
    ``span``: the steps the x axis spans and their x on ``x_axis`` (None: that of ``x``), so that
    plots of series with fewer steps (the eval loss) line up with the others; default: the
    steps drawn."""
    width, height = max(width, 1), max(height, 1)
    px_cols, px_rows = 2 * width, 4 * height
    raw_grid = np.zeros((px_rows, px_cols), dtype=bool)
    smooth_grid = np.zeros((px_rows, px_cols), dtype=bool)
    canvas = Canvas(width, height, raw_grid, smooth_grid, 0.0, 1.0, 0.0, 1.0, options.log_y)
    if len(steps) == 0:
        canvas.empty_reason = "no steps in the history yet"
        return canvas
    first = 0
    if options.window and len(steps):
        first = int(search_steps(steps, steps[-1] - options.window + 1))
    canvas.x_axis = x_axis if x is not None else "step"
    steps_shown = steps[first:]
    s = x[first:] if x is not None else steps_shown
    x0, x1 = float(s[0]), float(s[-1])
    lo_step, hi_step = float(steps_shown[0]), float(steps_shown[-1])
    if span is not None and (x is None or span[1] is not None):
        (lo_step, hi_step), (x0, x1) = span[0], span[1] if x is not None else span[0]
    if x1 <= x0:
        x1 = x0 + 1.0
    canvas.note = "" if within_limit(loss[first:]) else beyond_note(int(beyond_limit(loss[first:]).sum()))
    y_raw = to_y(loss[first:], options.log_y)
    y_smooth = to_y(smooth[first:], options.log_y) if smooth is not None else None
    env_dim = None
    if abandoned is not None and abandoned[first:].any():
        gone = abandoned[first:]
        env_dim = envelope(s, np.where(gone, y_raw, np.nan), x0, x1, px_cols)
        y_raw = np.where(gone, np.nan, y_raw)
        y_smooth = np.where(gone, np.nan, y_smooth) if y_smooth is not None else None
    env_raw = envelope(s, y_raw, x0, x1, px_cols)
    env_smooth = None
    if y_smooth is not None and options.smoothing > 0:
        env_smooth = envelope(s, y_smooth, x0, x1, px_cols)
    show = env_raw if options.show_raw or env_smooth is None else env_smooth
    finite = show.filled
    if not finite.any():
        canvas.empty_reason = canvas.note or \
            "no finite loss to plot" + (" (log-y needs loss > 0)" if options.log_y else "")
        return canvas
    y0, y1 = float(np.nanmin(show.lo)), float(np.nanmax(show.hi))
    for extra in (env_smooth, env_dim):
        if extra is not None and extra.filled.any():
            y0, y1 = min(y0, float(np.nanmin(extra.lo))), max(y1, float(np.nanmax(extra.hi)))
    if nearly_constant(y0, y1, options.log_y):
        # Padded, the value on the centre of a dot row: midway it would fall between two,
        # and a value and its float32 EMA would be drawn on both.
        mid, half = (y0 + y1) / 2, px_rows / 2
        pad = abs(mid) * 0.05 or 0.5
        y0, y1 = mid - pad, mid + pad * half / (half - 1)
    if options.show_raw:
        draw_envelope(raw_grid, env_raw, y0, y1)
    if env_smooth is not None:
        draw_envelope(smooth_grid, env_smooth, y0, y1)
    if env_dim is not None:
        canvas.dim = np.zeros((px_rows, px_cols), dtype=bool)
        draw_envelope(canvas.dim, env_dim, y0, y1)
    canvas.y0, canvas.y1, canvas.x0, canvas.x1 = y0, y1, x0, x1
    placed: dict[int, str] = {}
    shown = [m for m in markers if lo_step <= m.step <= max(hi_step, lo_step + 1.0)]
    where = np.array([m.step for m in shown], dtype=np.float64)
    if x is not None and len(where):
        where = np.interp(where, steps_shown.astype(np.float64), s.astype(np.float64))
    cols = column_of(where, x0, x1, width) if shown else []
    for m, col in zip(shown, cols):
        col = int(col)
        if col not in placed or m.spec.priority >= MARKER_KINDS[placed[col]].priority:
            placed[col] = m.kind
    canvas.markers = sorted(placed.items())
    return canvas


def braille(grid: np.ndarray, width: int, height: int) -> np.ndarray:
    """Pattern offset (0..255) of every cell of a dot grid."""
    cells = grid.reshape(height, 4, width, 2)            # cell row, dot row, cell col, dot col
    bits = _DOT_BITS.T[None, :, None, :]                  # (1, 4, 1, 2)
    return (cells * bits).sum(axis=(1, 3)).astype(np.uint16)


def format_value(v: float, log_y: bool = False) -> str:
    if log_y:
        v = _pow10(v)
    if not math.isfinite(v):
        return str(v)
    if v != 0 and (abs(v) >= 1e4 or abs(v) < 1e-3):
        return f"{v:.2e}"
    return f"{v:.4g}"


def _pow10(e: float) -> float:
    return 10.0 ** e if e < 308.25 else math.inf


def nice_ticks(lo: float, hi: float, most: int) -> list[float]:
    """At most ``most`` round values in ``[lo, hi]``: the multiples of the smallest step of
    1, 2 or 5 x 10^n that gives no more than that."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo or most < 1:
        return []
    raw = (hi - lo) / most
    if not (math.isfinite(raw) and raw > 0):
        return []                  # a span beyond float64 or below its resolution: no round values
    base = 10.0 ** math.floor(math.log10(raw))
    if base == 0.0:
        return []                  # a span of subnormals: below any round value's resolution
    for mult in (1, 2, 5, 10, 20):
        step = mult * base
        if not math.isfinite(step):
            break
        first, last = math.ceil(lo / step - 1e-9), math.floor(hi / step + 1e-9)
        if last - first + 1 <= most:
            # Twelve significant digits, not decimals: a span of 1e-142 has round values too.
            return [float(f"{k * step:.12g}") for k in range(first, last + 1)]
    return []


def y_labels(y0: float, y1: float, rows: int, log_y: bool = False, unit: Unit = PLAIN,
             room: int = LABEL_WIDTH - 2) -> dict[int, str]:
    """The y axis's labels: round values of the series' ``unit`` (1, 2 or 5 x 10^n apart;
    in log-y, round values), each on the text row nearest to it, each told apart from the
    others within ``room`` characters (:func:`tick_texts`). Row 0 is the top (``y1``)."""
    if not (math.isfinite(y0) and math.isfinite(y1)):
        return {}
    if rows < 2 or y1 <= y0:
        return {0: format_value(y1, log_y)} if rows >= 1 else {}
    most = max(2, min(5, (rows + 1) // 2))
    if log_y:
        # Powers of ten when two fit, else round values (those crowd at the top of a log axis,
        # and the crowded ones are left out). Exponents past float64's (a padded axis around
        # 1e300) name no value.
        lo, hi = max(y0, -323.0), min(y1, 308.0)
        positions = [(float(e), 10.0 ** e) for e in range(math.ceil(lo), math.floor(hi) + 1) if e < 308]
        if len(positions) > most:
            positions = [(e, 10.0 ** e) for e in nice_ticks(lo, hi, most) if e == int(e) and e < 308]
        if len(positions) < 2 and hi > lo:
            positions = [(math.log10(v), v) for v in nice_ticks(10.0 ** lo, _pow10(hi), most) if v > 0]
        positions = [(y, unit.figure(v)) for y, v in positions]
    else:
        scale = unit.scale
        positions = [(v / scale, v) for v in nice_ticks(y0 * scale, y1 * scale, most)]
    labels: dict[int, float] = {}
    for y, value in positions:
        row = int(round((y1 - y) / (y1 - y0) * (4 * rows - 1))) // 4     # the cell of the value's dot row
        if 0 <= row < rows and not labels.keys() & {row - 1, row, row + 1}:
            labels[row] = value
    if log_y:       # powers of ten and round values, told apart by their own digits where they can be
        own = [f"{v:.6g}" if abs(v) < 1e4 and (v == 0 or abs(v) >= 1e-3) else f"{v:.0e}" for v in labels.values()]
        if len(set(own)) == len(own) and max(map(len, own), default=0) <= room:
            return dict(zip(labels, own))
    return dict(zip(labels, tick_texts(list(labels.values()), room)))


_SUFFIXES = ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def tick_texts(values: list[float], room: int = LABEL_WIDTH - 2) -> list[str]:
    """Round tick values as labels that tell them apart: as many decimals as the gap between
    them needs, thousands as k, M, G, T, tiny values as 2.5e-4. Where that is wider than
    ``room``, fewer decimals, and a label equal to the one before it is left empty (never
    the same label twice on an axis)."""
    finite = [abs(v) for v in values if math.isfinite(v)]
    if not finite:
        return [str(v) for v in values]
    gaps = [abs(b - a) for a, b in zip(values, values[1:]) if math.isfinite(b - a) and b != a]
    if not gaps:        # one label: its own digits
        return [f"{v:.6g}" if abs(v) < 1e4 and (v == 0 or abs(v) >= 1e-3) else f"{v:.0e}" for v in values]
    if all(v == 0 or 1e-3 <= v < 1e4 for v in finite):
        plain = [f"{v:.6g}" for v in values]         # 2, 2.5, 3: their own digits, where they differ
        if len(set(plain)) == len(plain) and max(map(len, plain)) <= room:
            return plain
    gap = min(gaps)
    for drop in range(0, 16):
        texts = [_tick_text(v, gap, max(finite), drop) for v in values]
        if max(map(len, texts)) <= room:
            break
    out = []
    for text in texts:
        out.append("" if out and text in out else text)
    return out


def _decimals(gap: float, drop: int) -> int:
    return max(0, -math.floor(math.log10(gap) + 1e-9) - drop) if gap > 0 and math.isfinite(gap) else 0


def _tick_text(v: float, gap: float, mag: float, drop: int) -> str:
    if not math.isfinite(v):
        return str(v)
    if v == 0:
        return "0"
    if 1e4 <= mag < 1e15:
        div, suffix = next((d, x) for d, x in _SUFFIXES if mag >= d)
        return f"{v / div:.{_decimals(gap / div, drop)}f}{suffix}"
    if mag < 1e-3 or mag >= 1e15:
        digits = max(0, math.floor(math.log10(mag)) - math.floor(math.log10(gap)) - drop) if gap > 0 else 0
        mantissa, _, exp = f"{v:.{min(digits, 12)}e}".partition("e")
        return f"{mantissa}e{int(exp)}"
    return f"{v:.{_decimals(gap, drop)}f}"


def format_step(step: float) -> str:
    if not math.isfinite(step):
        return str(step)
    if abs(step) >= 1e12:
        return f"{step:.2e}"                # no trainer runs this long; a file can say so
    step = int(round(step))
    if step >= 1_000_000_000:
        return f"{step / 1e9:.2f}G"
    if step >= 1_000_000:
        return f"{step / 1e6:.2f}M"
    if step >= 10_000:
        return f"{step / 1e3:.1f}k"
    return f"{step:,}"


def format_x(value: float, axis: str, span: float) -> str:
    """An x-axis label: a step, a token count, a wall-clock time (local), or a time since
    a run's start (``elapsed``: the comparison's)."""
    if axis == "elapsed" and math.isfinite(value):
        s = int(value)
        return f"{s // 3600}h{s % 3600 // 60:02d}m" if abs(s) >= 3600 else f"{s // 60}m{s % 60:02d}s"
    if axis == "time":
        try:
            return time.strftime("%m-%d %H:%M" if span > 86400 else "%H:%M:%S" if span < 600 else "%H:%M",
                                 time.localtime(value))
        except (OverflowError, ValueError, OSError):
            return f"t={value:.3g}"         # not a time this machine's clock can name
    return format_step(value)


def render_runs(canvas: Canvas, raw_style: str = "grey62", smooth_style: str = "bold green",
                axis_style: str = "grey50", label_width: int = 8) -> list[list[tuple[str, str | None]]]:
    """The canvas as lines of ``(text, style)`` runs: y labels, braille rows, a marker row
    and the x labels. Both the Rich Text of ``--once`` and the dashboard's strips are
    built from these."""
    lines: list[list[tuple[str, str | None]]] = []
    w, h = canvas.width, canvas.height
    if canvas.empty_reason:
        for row in range(h + 2):
            line = canvas.empty_reason if row == h // 2 else ""
            lines.append([(" " * label_width + line.center(w)[:w], "italic grey50")])
        return lines
    raw = braille(canvas.raw, w, h)
    smooth = braille(canvas.smooth, w, h)
    dim = braille(canvas.dim, w, h) if canvas.dim is not None else np.zeros_like(raw)
    both = raw | smooth | dim
    kinds = np.where(smooth > 0, 2, np.where(raw > 0, 1, np.where(dim > 0, 3, 0)))
    glyphs = np.where(both > 0, both + 0x2800, 0x20).astype(np.uint32)
    styles = (None, raw_style, smooth_style, ABANDONED_STYLE)
    labels = y_labels(canvas.y0, canvas.y1, h, canvas.log_y, canvas.unit, label_width - 2)
    for row in range(h):
        label = labels.get(row, "")
        runs: list[tuple[str, str | None]] = [(label.rjust(label_width - 2)[: label_width - 2] + " ┤", axis_style)]
        chars = glyphs[row].tobytes().decode("utf-32-le")
        k = kinds[row]
        cuts = np.flatnonzero(k[1:] != k[:-1]) + 1        # runs of cells with the same style
        start = 0
        for end in [*cuts.tolist(), w]:
            runs.append((chars[start:end], styles[int(k[start])]))
            start = end
        lines.append(runs)
    marker = ["─"] * w
    marker_styles: list[str | None] = [axis_style] * w
    for col, kind in canvas.markers:
        spec = MARKER_KINDS[kind]
        marker[col], marker_styles[col] = spec.glyph, spec.style
    runs = [(" " * (label_width - 1) + "└", axis_style)]
    for ch, st in zip(marker, marker_styles):
        if runs and runs[-1][1] == st:
            runs[-1] = (runs[-1][0] + ch, st)
        else:
            runs.append((ch, st))
    lines.append(runs)
    lines.append([(" " * label_width + x_labels(canvas.x0, canvas.x1, w, canvas.x_axis, canvas.note),
                   "yellow" if canvas.note else axis_style)])
    return lines


def x_labels(x0: float, x1: float, w: int, axis: str = "step", note: str = "") -> str:
    """The x axis' labels line: left, middle (when it fits) and right, in the axis' unit; a
    ``note`` (what the plot left out) takes the middle's place."""
    span = x1 - x0
    left, right = format_x(x0, axis, span), format_x(x1, axis, span)
    mid = note[: max(0, w - len(left) - len(right) - 4)] if note else format_x((x0 + x1) / 2, axis, span)
    axis = [" "] * w
    for pos, lab in ((0, left), (max(0, (w - len(mid)) // 2), mid), (max(0, w - len(right)), right)):
        if w >= len(left) + len(mid) + len(right) + 4 or lab is not mid:
            axis[pos:pos + len(lab)] = lab
    return "".join(axis)[:w]


def render(canvas: Canvas, label_width: int = 8, **styles: str) -> Text:
    """The canvas as Rich Text (see :func:`render_runs`)."""
    text = Text(no_wrap=True, overflow="crop")
    for i, runs in enumerate(render_runs(canvas, label_width=label_width, **styles)):
        if i:
            text.append("\n")
        for chunk, style in runs:
            text.append(chunk, style=style)
    return text


def plot_text(steps: np.ndarray, loss: np.ndarray, width: int, height: int, options: PlotOptions,
              markers: list[Marker] = (), smooth: np.ndarray | None = None, label_width: int = LABEL_WIDTH,
              abandoned: np.ndarray | None = None, x: np.ndarray | None = None, x_axis: str = "step",
              unit: Unit = PLAIN) -> Text:
    """One call: EMA (unless given), canvas and Rich Text, for ``--once`` and tests
    (``x`` and ``x_axis``: another axis than the steps, from :func:`plot_x`)."""
    if smooth is None and options.smoothing > 0:
        smooth, _ = ema_debiased(loss, options.smoothing, dtype=line_dtype(loss))
    canvas = build_canvas(steps, loss, smooth, width - label_width, height, options, markers, x=x, x_axis=x_axis,
                          abandoned=abandoned)
    canvas.unit = unit
    return render(canvas, label_width=label_width)
