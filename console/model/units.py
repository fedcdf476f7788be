"""The unit of every series, keyed by series name: one table that the y ticks, the cursor's
readout, the status pane and the series table all read, so a figure reads the same
everywhere (GPU memory in GiB, power in W, temperature in °C, throughput in tok/s, the
learning rate in scientific form).

A value is stored as the trainer wrote it (bytes, watts...); :attr:`Unit.scale` turns it
into the unit's figure, for the text only: the plot draws the stored values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

FAMILY_SEP = "/"


@dataclass(frozen=True)
class Unit:
    """How a series' values read."""

    symbol: str = ""            # after a value, and in the plot's subtitle: "GiB", "W"
    scale: float = 1.0          # a stored value times this is the figure in ``symbol``
    scientific: bool = False    # always as 3.00e-04 (a learning rate)
    stored: str | None = None   # the unit of the values as written (--json's); default: ``symbol`` unscaled

    @property
    def stored_symbol(self) -> str:
        return self.stored if self.stored is not None else self.symbol if self.scale == 1.0 else ""

    def figure(self, value: float) -> float:
        return value * self.scale

    def format(self, value: float) -> str:
        """One value with its unit, as the readout, the status and the table say it."""
        if not math.isfinite(value):
            return "-"
        v = self.figure(value)
        if self.scientific:
            text = f"{v:.2e}"
        elif self.symbol == "%":
            text = f"{v:.1f}"
        elif v != 0 and (abs(v) >= 1e6 or abs(v) < 1e-3):
            text = f"{v:.2e}"
        elif abs(v) >= 1000:
            text = f"{v:,.0f}"
        else:
            text = f"{v:.4g}"
        return f"{text}{'' if self.symbol in ('', '%') else ' '}{self.symbol}"


PLAIN = Unit()
# By series name; a family (``share/<arm>``) by the part before the separator.
UNITS: dict[str, Unit] = {
    "lr": Unit(scientific=True),
    "tokens_per_s": Unit("tok/s"),
    "steps_per_s": Unit("steps/s"),
    "gpu_util": Unit("%"),
    "gpu_mem_used": Unit("GiB", scale=2.0 ** -30, stored="B"),
    "gpu_power_w": Unit("W"),
    "gpu_temp_c": Unit("°C"),
    "share": Unit("%", scale=100.0),
}


def unit_of(name: str) -> Unit:
    """The unit of series ``name`` (a series no row names reads as a plain number)."""
    if name in UNITS:
        return UNITS[name]
    family, sep, _ = name.partition(FAMILY_SEP)
    return UNITS.get(family, PLAIN) if sep else PLAIN
