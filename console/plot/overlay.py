"""Several runs' curves overlaid on one braille canvas (the overview's comparison), drawn
with the plot's own pieces (:mod:`console.plot.canvas`): each run's min/max envelope per column in
its colour, no spike hidden."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..model.units import PLAIN, Unit
from .canvas import braille, draw_envelope, to_y, x_labels, y_labels
from .envelope import beyond_limit, beyond_note, envelope

# -- several runs in one plot (the comparison) ------------------------------------------
SERIES_STYLES = ("bold green", "bold cyan", "bold magenta", "bold yellow", "bold red", "bold blue",
                 "bold white", "green", "cyan", "magenta")


@dataclass
class Overlay:
    """Several series drawn on one canvas: a dot grid each, on shared axes."""

    width: int
    height: int
    grids: list[np.ndarray]
    y0: float = 0.0
    y1: float = 1.0
    x0: float = 0.0
    x1: float = 1.0
    log_y: bool = False
    empty_reason: str = ""
    note: str = ""                      # what it could not draw
    unit: Unit = PLAIN                  # how the y labels read


def build_overlay(series: list[tuple[np.ndarray, np.ndarray]], width: int, height: int,
                  log_y: bool = False, x_range: tuple[float, float] | None = None, unit: Unit = PLAIN) -> Overlay:
    """Each ``(x, y)`` series (x ascending) decimated by the same min/max :func:`envelope`
    as the loss plot (so no spike of any run is hidden) over ``x_range`` (default: the x
    range of them all)."""
    width, height = max(width, 1), max(height, 1)
    px_cols, px_rows = 2 * width, 4 * height
    overlay = Overlay(width, height, [np.zeros((px_rows, px_cols), dtype=bool) for _ in series], log_y=log_y,
                      unit=unit)
    xs = [x for x, _ in series if len(x)]
    if not xs:
        overlay.empty_reason = "no steps to compare"
        return overlay
    x0, x1 = min(float(x[0]) for x in xs), max(float(x[-1]) for x in xs)
    if x_range is not None:
        x0, x1 = float(x_range[0]), float(x_range[1])
    if x1 <= x0:
        x1 = x0 + 1.0
    envs = [envelope(x, to_y(y, log_y), x0, x1, px_cols) for x, y in series]
    overlay.note = beyond_note(sum(int(beyond_limit(y).sum()) for _, y in series))
    filled = [e for e in envs if e.filled.any()]
    if not filled:
        overlay.empty_reason = overlay.note or "no finite loss to plot" + (" (log-y needs loss > 0)" if log_y else "")
        return overlay
    y0 = min(float(np.nanmin(e.lo)) for e in filled)
    y1 = max(float(np.nanmax(e.hi)) for e in filled)
    if y1 - y0 < 1e-12:
        pad = abs(y0) * 0.05 or 0.5
        y0, y1 = y0 - pad, y1 + pad
    for grid, env in zip(overlay.grids, envs):
        draw_envelope(grid, env, y0, y1)
    overlay.y0, overlay.y1, overlay.x0, overlay.x1 = y0, y1, x0, x1
    return overlay


def render_overlay_runs(overlay: Overlay, styles: tuple[str, ...] = SERIES_STYLES, axis_style: str = "grey50",
                        label_width: int = 8, front: int = 0,
                        x_axis: str = "step") -> list[list[tuple[str, str | None]]]:
    """The overlay as lines of ``(text, style)`` runs, as :func:`render_runs`: a cell with
    dots of several series takes the colour of the one with the most dots in it, a series
    from ``front`` on before those under it (the raw envelopes under their smoothed lines)."""
    w, h = overlay.width, overlay.height
    if overlay.empty_reason or not overlay.grids:
        reason = overlay.empty_reason or "no runs to compare"
        return [[(" " * label_width + (reason if row == h // 2 else "").center(w)[:w], "italic grey50")]
                for row in range(h + 2)]
    cells = np.stack([braille(grid, w, h) for grid in overlay.grids])      # series, row, col
    dots = np.unpackbits(cells.astype(np.uint8)[..., None], axis=-1).sum(axis=-1)
    owner = np.where(dots.max(axis=0) > 0, dots.argmax(axis=0) + 1, 0)     # 0: empty cell
    if 0 < front < len(cells):
        top = dots[front:]
        owner = np.where(top.max(axis=0) > 0, top.argmax(axis=0) + 1 + front, owner)
    both = np.bitwise_or.reduce(cells, axis=0)
    glyphs = np.where(both > 0, both + 0x2800, 0x20).astype(np.uint32)
    labels = y_labels(overlay.y0, overlay.y1, h, overlay.log_y, overlay.unit, label_width - 2)
    lines: list[list[tuple[str, str | None]]] = []
    for row in range(h):
        label = labels.get(row, "")
        runs: list[tuple[str, str | None]] = [(label.rjust(label_width - 2)[: label_width - 2] + " ┤", axis_style)]
        chars = glyphs[row].tobytes().decode("utf-32-le")
        k = owner[row]
        cuts = np.flatnonzero(k[1:] != k[:-1]) + 1
        start = 0
        for end in [*cuts.tolist(), w]:
            series = int(k[start])
            runs.append((chars[start:end], styles[(series - 1) % len(styles)] if series else None))
            start = end
        lines.append(runs)
    lines.append([(" " * (label_width - 1) + "└" + "─" * w, axis_style)])
    lines.append([(" " * label_width + x_labels(overlay.x0, overlay.x1, w, x_axis, note=overlay.note),
                   "yellow" if overlay.note else axis_style)])
    return lines
