"""Test-only fault injection for the trainer. Nothing here is active unless its
environment variable is set; normal runs never set them.

- ``ANDREA_TEST_NAN_AT_STEP`` / ``ANDREA_TEST_INF_AT_STEP``: steps (``"30"``,
  ``"30-39"``, ``"5,30-39"``) whose loss is multiplied by NaN / +inf before the
  backward pass, so that the divergence policy is exercised through the real path.

The library's own hooks live beside the code they slow down or break:
``ANDREA_TEST_SLOW_WRITE`` (:mod:`rundir.checkpoint`) and
``ANDREA_TEST_ENOSPC_AFTER_BYTES`` (:mod:`rundir.atomic`).
"""

from __future__ import annotations

import math
import os
from functools import lru_cache

NAN_ENV = "ANDREA_TEST_NAN_AT_STEP"
INF_ENV = "ANDREA_TEST_INF_AT_STEP"


def _parse_steps(text: str) -> frozenset[int]:
    steps: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        low, _, high = part.partition("-")
        steps.update(range(int(low), int(high or low) + 1))
    return frozenset(steps)


@lru_cache(maxsize=None)
def _table(nan: str, inf: str) -> dict[int, float]:
    table = {step: math.inf for step in _parse_steps(inf)}
    table.update({step: math.nan for step in _parse_steps(nan)})
    return table


def forced_nonfinite(step: int) -> float | None:
    """The factor (NaN or inf) to poison step ``step``'s loss with, or None."""
    nan, inf = os.environ.get(NAN_ENV, ""), os.environ.get(INF_ENV, "")
    if not nan and not inf:
        return None
    return _table(nan, inf).get(step)
