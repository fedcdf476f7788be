"""What the dashboard's plot (:mod:`.loss_plot`) and the comparison's (:mod:`.compare_plot`)
share: the view's options as reactives, zoom and pan over the plot's whole x range, the
smoothing's steps, the x axes' cycle, and the mouse (a drag zooms to the x it covers, a
click puts the cursor there). Each plot says what its whole range is, which x a column
shows, and how its cursor is set."""

from __future__ import annotations

import math

from textual import events
from textual.reactive import reactive
from textual.widget import Widget

from ...model.format import X_AXES
from ...plot.canvas import LABEL_WIDTH
from ...plot.view import panned, zoomed

SMOOTHING_STEPS = (0.0, 0.9, 0.98, 0.995, 0.999)


class PlotPane(Widget):
    x_axis: reactive[str] = reactive("step")              # step | tokens | time
    log_y: reactive[bool] = reactive(False)
    smoothing: reactive[float] = reactive(0.98)
    zoom: reactive[tuple[int, int] | None] = reactive(None)   # the x range in view, on the axis; None: all
    cursor: reactive[float | None] = reactive(None)        # the cursor's x, on the axis

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._drag_from: int | None = None      # the plot column a drag started at

    # -- what each plot says ---------------------------------------------------------
    def full_range(self) -> tuple[int, int] | None:
        """The x range of all the plot's data (None: nothing to show)."""
        raise NotImplementedError

    def x_at_column(self, column: int) -> float | None:
        """The x that plot column ``column`` (0: the first after the y labels) shows as last
        drawn (None: nothing drawn there)."""
        raise NotImplementedError

    def set_cursor(self, x: float | None) -> None:
        raise NotImplementedError

    # -- the options -----------------------------------------------------------------
    def cycle_x_axis(self) -> None:
        self.x_axis = X_AXES[(X_AXES.index(self.x_axis) + 1) % len(X_AXES)]

    def cycle_smoothing(self) -> None:
        bigger = [s for s in SMOOTHING_STEPS if s > self.smoothing + 1e-12]
        self.smoothing = bigger[0] if bigger else SMOOTHING_STEPS[0]

    # -- zoom and pan ----------------------------------------------------------------
    def zoom_by(self, factor: float) -> None:
        """Zoom in (``factor`` > 1) or out around the cursor (else the middle of the view)."""
        full = self.full_range()
        if full is not None:
            self.zoom = zoomed(self.zoom, full, factor, self.cursor)

    def pan(self, direction: int) -> None:
        full = self.full_range()
        if full is not None:
            self.zoom = panned(self.zoom, full, direction)

    # -- the mouse -------------------------------------------------------------------
    def on_mouse_down(self, event: events.MouseDown) -> None:
        offset = event.get_content_offset(self)
        self._drag_from = offset.x - LABEL_WIDTH if offset is not None else None

    def on_mouse_up(self, event: events.MouseUp) -> None:
        offset = event.get_content_offset(self)
        start, self._drag_from = self._drag_from, None
        if offset is None or start is None:
            return
        end = offset.x - LABEL_WIDTH
        if abs(end - start) >= 2:               # a drag: zoom to the x it covered
            a, b = (self.x_at_column(c) for c in sorted((start, end)))
            if a is not None and b is not None and b > a:
                self.zoom = (math.floor(a), math.ceil(b))
        else:
            self.set_cursor(self.x_at_column(end))
